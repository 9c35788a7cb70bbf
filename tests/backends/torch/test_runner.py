"""TorchModelRunner on a tiny random Llama vs the dense reference: chunked prefill, mixed batches,
non-contiguous block tables, speculative verification and the block moves."""

from __future__ import annotations

import pytest
import torch

from backends.torch import TorchModelRunner, random_state_dict
from engine.model_runner import KVCacheSpec, ModelRunner

ATOL = 1e-4


def test_protocol_and_geometry(tiny, kit):
    config, _sd, model = tiny
    runner = kit.make_runner(model)
    assert isinstance(runner, ModelRunner)
    assert runner.max_model_len == config.max_position_embeddings
    # layers * (K, V) * block_size * Hkv * D * 4 bytes
    assert runner.kv_bytes_per_block(4) == 2 * 2 * 4 * 2 * 8 * 4
    assert runner.kv_cache.layers[0][0].shape == (64, 4, 2, 8)


def test_chunked_prefill_mixed_batch_matches_dense(tiny, kit):
    """Three requests arriving at different steps; prefill chunks of 5 share steps with decodes."""
    config, sd, model = tiny
    runner = kit.make_runner(model, block_size=4)
    alloc = kit.BlockAllocator(64, seed=3)
    prompts = {"a": [5, 9, 17, 33, 2, 8, 44, 61, 70, 3, 11], "b": [7, 7, 21], "c": list(range(20, 34))}
    arrivals = {"a": 0, "b": 1, "c": 3}
    seqs: dict[str, kit.Seq] = {}
    for step in range(9):
        for req_id, at in arrivals.items():
            if at == step:
                seqs[req_id] = kit.Seq(req_id, list(prompts[req_id]), kit.GREEDY)
        sched = [s.schedule(alloc, 4, max_tokens=5) for s in seqs.values()]
        batch = kit.make_step(step, sched)
        assert any(r.is_decode for r in sched) or step < 3
        logits = runner.compute_logits(batch)
        for r in sched:
            s = seqs[r.req_id]
            if not r.sample:
                assert r.req_id not in logits
                s.advance(r, None)
                continue
            ref = kit.dense_logits(config, sd, s.token_ids)[-1]
            torch.testing.assert_close(logits[r.req_id][0], ref, atol=ATOL, rtol=0)
            s.advance(r, [int(ref.argmax())])
    assert all(s.num_output >= 3 for s in seqs.values())
    # block tables really were scattered
    assert any(b - a != 1 for s in seqs.values() for a, b in zip(s.block_ids, s.block_ids[1:]))


def test_execute_greedy_matches_dense_generation(tiny, kit):
    config, sd, model = tiny
    runner = kit.make_runner(model, block_size=4)
    alloc = kit.BlockAllocator(64, seed=5)
    seqs = [kit.Seq("x", [3, 14, 15, 92, 65, 35], kit.GREEDY), kit.Seq("y", [27, 18, 28], kit.GREEDY)]
    refs = [list(s.token_ids) for s in seqs]
    for step in range(8):
        sched = [s.schedule(alloc, 4) for s in seqs]
        out = runner.execute(kit.make_step(step, sched))
        assert out.step_time_s > 0
        for s, r in zip(seqs, sched):
            s.advance(r, out.sampled_token_ids[s.req_id])
    for s, ref in zip(seqs, refs):
        for _ in range(8):
            ref.append(int(kit.dense_logits(config, sd, ref)[-1].argmax()))
        assert s.token_ids == ref


def test_speculative_verification(tiny, kit):
    config, sd, model = tiny
    runner = kit.make_runner(model, block_size=4)
    alloc = kit.BlockAllocator(64, seed=7)
    prompt = [4, 8, 15, 16, 23, 42]
    ref = list(prompt)
    for _ in range(4):
        ref.append(int(kit.dense_logits(config, sd, ref)[-1].argmax()))
    s = kit.Seq("s", list(prompt), kit.GREEDY)
    r = s.schedule(alloc, 4)
    out = runner.execute(kit.make_step(0, [r]))
    s.advance(r, out.sampled_token_ids["s"])
    assert s.token_ids == ref[:7]

    # drafts: two right, one wrong -> two accepted plus the corrected token
    wrong = (ref[9] + 1) % config.vocab_size
    r = s.schedule(alloc, 4)
    r.spec_token_ids = [ref[7], ref[8], wrong]
    s.block_ids = alloc.grow(s.block_ids, len(s.token_ids) + 3, 4)
    r.block_ids = list(s.block_ids)
    out = runner.execute(kit.make_step(1, [r]))
    assert out.sampled_token_ids["s"] == [ref[7], ref[8], ref[9]]


def _decode_steps(kit, runner, seq, alloc, num_steps, step0=0, **moves):
    for step in range(num_steps):
        r = seq.schedule(alloc, 4)
        out = runner.execute(kit.make_step(step0 + step, [r], **(moves if step == 0 else {})))
        seq.advance(r, out.sampled_token_ids[seq.req_id])


def test_swap_out_in_round_trip(tiny, kit):
    _config, _sd, model = tiny
    prompt = [9, 8, 7, 6, 5, 4, 3, 2, 1, 10]
    # reference: the same request decoded without any swap
    plain = kit.Seq("w", list(prompt), kit.GREEDY)
    plain_runner = kit.make_runner(model, num_device_blocks=32, block_size=4)
    _decode_steps(kit, plain_runner, plain, kit.BlockAllocator(32, seed=1), 7)

    runner = kit.make_runner(model, num_device_blocks=32, num_host_blocks=8, block_size=4)
    alloc = kit.BlockAllocator(32, seed=11)
    s = kit.Seq("w", list(prompt), kit.GREEDY)
    _decode_steps(kit, runner, s, alloc, 3)
    old_ids = list(s.block_ids)
    expected = runner.kv_cache.device_kv[:, :, old_ids].clone()

    host_ids = [5, 0, 7]
    runner.execute(kit.make_step(10, [], blocks_to_swap_out=list(zip(old_ids, host_ids))))
    runner.kv_cache.device_kv[:, :, old_ids] = 1e4  # the freed device blocks get reused
    new_ids = [alloc.free.pop() for _ in old_ids]
    assert torch.equal(runner.kv_cache.host_kv[:, :, host_ids], expected)

    # swap back into other device blocks and decode in the same step
    s.block_ids = list(new_ids)
    n = s.num_computed
    _decode_steps(kit, runner, s, alloc, 4, step0=11, blocks_to_swap_in=list(zip(host_ids, new_ids)))
    restored = runner.kv_cache.device_kv[:, :, new_ids].flatten(2, 3)[:, :, :n]
    assert torch.equal(restored, expected.flatten(2, 3)[:, :, :n])
    assert s.token_ids == plain.token_ids


def test_copy_blocks_copy_on_write(tiny, kit):
    """A forked request shares a prefix; its partially filled last block is copied before it writes."""
    config, sd, model = tiny
    runner = kit.make_runner(model, num_device_blocks=32, block_size=4)
    alloc = kit.BlockAllocator(32, seed=13)
    parent = kit.Seq("p", [12, 13, 14, 15, 16, 17], kit.GREEDY)  # 6 tokens: block 0 full, block 1 half
    r = parent.schedule(alloc, 4)
    runner.execute(kit.make_step(0, [r]))
    parent.num_computed = 6  # keep the prompt only; both children continue from here
    shared_full, shared_tail = parent.block_ids
    child_tail = alloc.free.pop()
    kids = [
        kit.Seq("k1", [*parent.token_ids, 50], kit.GREEDY, 6, [shared_full, shared_tail]),
        kit.Seq("k2", [*parent.token_ids, 60], kit.GREEDY, 6, [shared_full, child_tail]),
    ]
    sched = [k.schedule(alloc, 4) for k in kids]
    logits = runner.compute_logits(kit.make_step(1, sched, blocks_to_copy=[(shared_tail, child_tail)]))
    for k in kids:
        ref = kit.dense_logits(config, sd, k.token_ids)[-1]
        torch.testing.assert_close(logits[k.req_id][0], ref, atol=ATOL, rtol=0)


def test_bf16_runs_close_to_fp32(tiny, kit):
    config, sd, _model = tiny
    runner = TorchModelRunner(config, "bfloat16", state_dict=sd)
    runner.initialize_kv_cache(KVCacheSpec(16, 0, 4))
    alloc = kit.BlockAllocator(16)
    s = kit.Seq("b", [1, 2, 3, 4, 5, 6, 7], kit.GREEDY)
    logits = runner.compute_logits(kit.make_step(0, [s.schedule(alloc, 4)]))["b"][0]
    ref = kit.dense_logits(config, sd, s.token_ids)[-1]
    assert logits.dtype == torch.float32
    assert (logits - ref).abs().max() < 0.1 * ref.abs().max()


def test_untied_head_from_config_and_state_dict(kit):
    config = kit.tiny_config(tie_word_embeddings=False, rope_theta=500.0)
    sd = random_state_dict(config, seed=9, std=0.2)
    runner = TorchModelRunner(config, "float32", state_dict=sd)
    runner.initialize_kv_cache(KVCacheSpec(16, 0, 8))
    s = kit.Seq("u", [3, 1, 4, 1, 5, 9, 2, 6, 5, 3], kit.GREEDY)
    logits = runner.compute_logits(kit.make_step(0, [s.schedule(kit.BlockAllocator(16), 8)]))["u"][0]
    torch.testing.assert_close(logits, kit.dense_logits(config, sd, s.token_ids)[-1], atol=ATOL, rtol=0)


def test_a_built_model_brings_its_device(tiny):
    """A runner of a built model runs where the model's weights are; asking for another device is an error."""
    from backends.torch.runner import runner_device

    config, _sd, model = tiny
    assert runner_device(model, None) == torch.device("cpu")
    assert runner_device(model, "cpu") == torch.device("cpu")
    assert runner_device(config, None) == torch.device("cpu")
    assert runner_device(config, "cuda:1") == torch.device("cuda:1")  # a config is built where asked
    with pytest.raises(ValueError, match="weights are on cpu"):
        runner_device(model, "cuda")
    assert TorchModelRunner(model).device == torch.device("cpu")
