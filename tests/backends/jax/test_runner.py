"""JaxModelRunner on a tiny random Llama vs the torch runner on the same weights: chunked prefill,
mixed batches, scrambled block tables, speculative verification and the block moves."""

from __future__ import annotations

import numpy as np

from engine.model_runner import ModelRunner
from engine.sampling_params import SamplingParams

ATOL = 1e-3  # the bound; fp32 runs agree to ~1e-5


def _runners(tiny, kit, **kw):
    config, sd, model = tiny
    return kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS, **kw), kit.make_torch_runner(model, **kw)


def test_protocol_and_geometry(tiny, kit):
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd)
    assert isinstance(runner, ModelRunner)
    assert runner.max_model_len == config.max_position_embeddings
    # layers * (K, V) * block_size * Hkv * D * 4 bytes
    assert runner.kv_bytes_per_block(4) == 2 * 2 * 4 * 2 * 8 * 4
    assert runner.kv_cache.layer(0)[0].shape == (64, 4, 2, 8)


def test_chunked_prefill_and_decode_match_torch(tiny, kit):
    """Three requests arriving at different steps; prefill chunks of 5 share steps with decodes."""
    jax_runner, torch_runner = _runners(tiny, kit)
    alloc = kit.BlockAllocator(64, seed=3)
    prompts = {"a": [5, 9, 17, 33, 2, 8, 44, 61, 70, 3, 11], "b": [7, 7, 21], "c": list(range(20, 34))}
    arrivals = {"a": 0, "b": 1, "c": 3}
    seqs = {}
    max_diff = 0.0
    for step in range(12):
        for req_id, at in arrivals.items():
            if at == step:
                seqs[req_id] = kit.Seq(req_id, list(prompts[req_id]), kit.GREEDY)
        sched = [s.schedule(alloc, 4, max_tokens=5) for s in seqs.values()]
        batch = kit.make_step(step, sched)
        ours = jax_runner.compute_logits(batch)
        ref = {k: v.numpy() for k, v in torch_runner.compute_logits(batch).items()}
        assert ours.keys() == ref.keys()
        for r in sched:
            s = seqs[r.req_id]
            if not r.sample:
                s.advance(r, None)
                continue
            max_diff = max(max_diff, float(np.abs(ours[r.req_id] - ref[r.req_id]).max()))
            s.advance(r, [int(ref[r.req_id][0].argmax())])
    assert max_diff <= ATOL, max_diff
    assert all(s.num_output >= 6 for s in seqs.values())
    assert any(b - a != 1 for s in seqs.values() for a, b in zip(s.block_ids, s.block_ids[1:]))


def test_execute_greedy_and_logprobs_match_torch(tiny, kit):
    jax_runner, torch_runner = _runners(tiny, kit)
    params = SamplingParams(temperature=0.0, max_tokens=64, logprobs=3)
    outs = []
    for runner in (jax_runner, torch_runner):
        alloc = kit.BlockAllocator(64, seed=5)
        seqs = [kit.Seq("x", [3, 14, 15, 92, 65, 35], params), kit.Seq("y", [27, 18, 28], params)]
        lps = []
        for step in range(8):
            sched = [s.schedule(alloc, 4) for s in seqs]
            out = runner.execute(kit.make_step(step, sched))
            assert out.step_time_s > 0
            for s, r in zip(seqs, sched):
                s.advance(r, out.sampled_token_ids[s.req_id])
                lps.append(out.logprobs[s.req_id][0])
        outs.append(([s.token_ids for s in seqs], lps))
    (jax_tokens, jax_lps), (torch_tokens, torch_lps) = outs
    assert jax_tokens == torch_tokens
    for a, b in zip(jax_lps, torch_lps):
        assert a.token_id == b.token_id
        assert abs(a.logprob - b.logprob) <= ATOL
        assert [t for t, _ in a.top] == [t for t, _ in b.top]
        assert np.allclose([lp for _, lp in a.top], [lp for _, lp in b.top], atol=ATOL)


def test_speculative_verification_matches_torch(tiny, kit):
    jax_runner, torch_runner = _runners(tiny, kit)
    prompt = [4, 8, 15, 16, 23, 42]
    results = []
    for runner in (jax_runner, torch_runner):
        alloc = kit.BlockAllocator(64, seed=7)
        s = kit.Seq("s", list(prompt), kit.GREEDY)
        r = s.schedule(alloc, 4)
        s.advance(r, runner.execute(kit.make_step(0, [r])).sampled_token_ids["s"])
        # drafts: two arbitrary tokens after the last one; verification keeps the matching prefix + 1
        r = s.schedule(alloc, 4)
        r.spec_token_ids = [11, 12]
        s.block_ids = alloc.grow(s.block_ids, len(s.token_ids) + 2, 4)
        r.block_ids = list(s.block_ids)
        results.append(runner.execute(kit.make_step(1, [r])).sampled_token_ids["s"])
    assert results[0] == results[1]
    assert 1 <= len(results[0]) <= 3


def test_swap_out_in_and_copy_continue_identically(tiny, kit):
    """Prefill, move the blocks device -> host -> other device blocks (and copy one), decode on."""
    config, sd, _model = tiny
    runner = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS)
    alloc = kit.BlockAllocator(64, seed=11)
    prompt = [9, 8, 7, 6, 5, 4, 3, 2, 1, 10]
    ref = kit.Seq("r", list(prompt), kit.GREEDY)
    moved = kit.Seq("m", list(prompt), kit.GREEDY)
    for s in (ref, moved):
        r = s.schedule(alloc, 4)
        s.advance(r, runner.execute(kit.make_step(0, [r])).sampled_token_ids[s.req_id])
    before = [runner.kv_cache.layer(i) for i in range(2)]
    old = list(moved.block_ids)
    host = [5, 0, 9]
    runner.execute(kit.make_step(1, [], blocks_to_swap_out=list(zip(old, host))))
    new = [alloc.free.pop() for _ in old]
    copy_dst = alloc.free.pop()
    runner.execute(kit.make_step(2, [], blocks_to_swap_in=list(zip(host, new)), blocks_to_copy=[(new[0], copy_dst)]))
    after = [runner.kv_cache.layer(i) for i in range(2)]
    for (k0, v0), (k1, v1) in zip(before, after):
        np.testing.assert_array_equal(k0[old], k1[new])
        np.testing.assert_array_equal(v0[old], v1[new])
        np.testing.assert_array_equal(k1[copy_dst], k1[new[0]])
    moved.block_ids = new
    for step in range(3, 9):
        sched = [s.schedule(alloc, 4) for s in (ref, moved)]
        out = runner.execute(kit.make_step(step, sched))
        for s, r in zip((ref, moved), sched):
            s.advance(r, out.sampled_token_ids[s.req_id])
    assert moved.token_ids == ref.token_ids
    assert len(ref.token_ids) == len(prompt) + 7
