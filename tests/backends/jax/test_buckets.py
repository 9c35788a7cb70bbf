"""Bucket policy, and the point of it: after warm-up, decode steps of varying batch sizes and
growing contexts (within the warmed buckets) compile nothing."""

from __future__ import annotations

import pytest

from backends.jax import BucketPolicy


def test_bucket_policy_rounds_up_then_grows_in_powers_of_two():
    pol = BucketPolicy()
    assert [pol.batch_size(n) for n in (1, 2, 3, 5, 33, 64, 65, 200)] == [2, 2, 4, 8, 64, 64, 128, 256]
    assert [pol.num_tokens(n) for n in (1, 16, 17, 300, 512, 513)] == [16, 16, 64, 512, 512, 1024]
    assert [pol.context_blocks(n) for n in (1, 16, 17, 100)] == [16, 16, 32, 128]
    assert [pol.sample_rows(n) for n in (1, 2, 5, 64, 65)] == [1, 4, 16, 64, 128]
    with pytest.raises(ValueError):
        BucketPolicy(batch_buckets=(4, 2))


def test_no_recompiles_in_steady_state_decode(tiny, kit):
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd, num_device_blocks=128, buckets=kit.TINY_BUCKETS)
    # 8 requests, contexts up to 6 + 40 tokens = 12 blocks of 4 -> context buckets 8 and 16
    assert runner.warmup(max_num_seqs=8, max_context_tokens=64) > 0
    alloc = kit.BlockAllocator(128, seed=2)
    seqs = [kit.Seq(f"r{i}", [3 + i, 5, 7, 11, 13, 17], kit.GREEDY) for i in range(8)]
    # prefill (chunk programs compile here; they are not the steady state)
    out = runner.execute(kit.make_step(0, sched := [s.schedule(alloc, 4) for s in seqs]))
    for s, r in zip(seqs, sched):
        s.advance(r, out.sampled_token_ids[s.req_id])

    before = runner.num_compilations
    batch_sizes = []
    for step in range(1, 41):
        active = seqs[: 1 + (step * 5) % 8]  # 1..8 requests, all batch buckets
        sched = [s.schedule(alloc, 4) for s in active]
        assert all(r.is_decode for r in sched)
        out = runner.execute(kit.make_step(step, sched))
        for s, r in zip(active, sched):
            s.advance(r, out.sampled_token_ids[s.req_id])
        batch_sizes.append(len(active))
    assert set(batch_sizes) == set(range(1, 9))
    assert max(len(s.token_ids) for s in seqs) > 8 * 4  # crossed into the second context bucket
    assert runner.num_compilations == before
