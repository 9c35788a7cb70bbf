"""A running request moved between two engines on the real model (torch → torch, fp32): its KV over real
sockets through the KV data plane, then greedy decoding continues on the target token-identical to an
unmigrated run, and the target recomputes only the partial last block."""

from __future__ import annotations

import anyio
import pytest
import zmq.asyncio

from agent.kv_data_plane import DataPlaneConfig, KVDataPlane, accept_spec_for
from agent.kv_migration import export_for_migration, import_migrated_kv
from backends.torch import TorchModelRunner
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.lora import LoraConfig, LoraRequest
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.slow

PROMPT = "The history of the printing press begins in 1440, when Johannes Gutenberg"
NUM_TOKENS = 10
NUM_BEFORE = 4  # tokens generated on the source before the move


def _engine(model, tokenizer) -> LLMEngine:
    return LLMEngine(
        TorchModelRunner(model, progress=False),
        tokenizer,
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=4, max_model_len=512),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=16),
    )


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)


def _drive(engine: LLMEngine, req_id: str, until: int | None = None) -> list[int]:
    tokens: list[int] = []
    while engine.has_unfinished_requests() and (until is None or len(tokens) < until):
        for out in engine.step():
            if out.req_id == req_id:
                tokens += out.new_token_ids
    return tokens


async def _ship(exported, spec) -> list:
    """Source plane → target plane over loopback TCP; the target's received transfers."""
    received: list = []
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            cfg = DataPlaneConfig(chunk_bytes=64 * 1024, max_inflight_bytes=256 * 1024)
            a = KVDataPlane("source", spec, lambda kv: None, cfg, context=ctx)
            b = KVDataPlane("target", spec, received.append, cfg, context=ctx)
            await tg.start(a.run)
            await tg.start(b.run)
            s = exported.state
            await a.send(
                b.endpoint, s.req_id, s.block_ids, exported.layout, exported.kv_bytes(), lora_id=s.lora_id or 0
            )
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    return received


def test_a_migrated_request_continues_token_identical(smollm2_model, smollm2_checkpoint):
    tok = smollm2_checkpoint.tokenizer
    reference = _engine(smollm2_model, tok)
    reference.add_request(PROMPT, _greedy(NUM_TOKENS), req_id="r")
    expected = _drive(reference, "r")

    source, target = _engine(smollm2_model, tok), _engine(smollm2_model, tok)
    source.add_request(PROMPT, _greedy(NUM_TOKENS), req_id="r")
    before = _drive(source, "r", until=NUM_BEFORE)
    assert before == expected[:NUM_BEFORE]
    exported = export_for_migration(source, "r")
    assert not source.has_unfinished_requests()  # taken off the source
    state = exported.state
    assert state.token_ids[-NUM_BEFORE:] == before and state.num_output_tokens == NUM_BEFORE
    assert len(state.block_ids) == (len(state.token_ids) - 1) // 4 and exported.layout.dtype == "float32"

    (kv,) = anyio.run(_ship, exported, accept_spec_for(source))
    assert kv.to_bytes() == bytes(exported.kv_bytes())  # bit-identical over the wire
    num_written = import_migrated_kv(target, state.token_ids, kv)
    assert num_written == len(state.block_ids)
    target.add_request(state.token_ids, _greedy(NUM_TOKENS - NUM_BEFORE), req_id="r")
    after = _drive(target, "r")
    assert before + after == expected
    # the moved blocks were prefix hits: the target computed only the tail
    stats = target.make_stats()
    assert stats.prefix_cache_hits_total == len(state.block_ids) * 4


def test_importing_into_a_cache_that_already_holds_the_prefix_writes_nothing(smollm2_model, smollm2_checkpoint):
    tok = smollm2_checkpoint.tokenizer
    source = _engine(smollm2_model, tok)
    source.add_request(PROMPT, _greedy(3), req_id="r")
    _drive(source, "r", until=2)
    exported = export_for_migration(source, "r")
    (kv,) = anyio.run(_ship, exported, accept_spec_for(source))
    # the source itself cached these blocks while computing them: importing them again writes nothing
    assert import_migrated_kv(source, exported.state.token_ids, kv) == 0


def test_torch_to_jax_migration_continues_token_identical(smollm2_model, smollm2_checkpoint):
    """Both backends share the block layout: the torch source's KV goes into the JAX target's cache."""
    pytest.importorskip("jax")
    from backends.jax.runner import JaxModelRunner

    tok = smollm2_checkpoint.tokenizer
    reference = _engine(smollm2_model, tok)
    reference.add_request(PROMPT, _greedy(NUM_TOKENS), req_id="r")
    expected = _drive(reference, "r")

    source = _engine(smollm2_model, tok)
    target = LLMEngine(
        JaxModelRunner(smollm2_checkpoint, "float32", progress=False),
        tok,
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=4, max_model_len=512),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=16),
    )
    source.add_request(PROMPT, _greedy(NUM_TOKENS), req_id="r")
    before = _drive(source, "r", until=NUM_BEFORE)
    exported = export_for_migration(source, "r")
    (kv,) = anyio.run(_ship, exported, accept_spec_for(target))  # the JAX target's spec accepts it
    state = exported.state
    assert import_migrated_kv(target, state.token_ids, kv) == len(state.block_ids)
    target.add_request(state.token_ids, _greedy(NUM_TOKENS - NUM_BEFORE), req_id="r")
    after = _drive(target, "r")
    assert before + after == expected
    assert target.make_stats().prefix_cache_hits_total == len(state.block_ids) * 4


def test_a_salted_request_moves_with_its_kv_keyed_under_its_salt(smollm2_model, smollm2_checkpoint):
    """vLLM's cache_salt: the moved blocks are a hit for the request (same salt) and for no request without it, so
    the move leaves no unsalted copy another tenant could probe by its latency."""
    tok = smollm2_checkpoint.tokenizer
    salted = SamplingParams(temperature=0, max_tokens=NUM_TOKENS, ignore_eos=True, cache_salt="tenant-a")
    reference = _engine(smollm2_model, tok)
    reference.add_request(PROMPT, salted, req_id="r")
    expected = _drive(reference, "r")

    source, target = _engine(smollm2_model, tok), _engine(smollm2_model, tok)
    source.add_request(PROMPT, salted, req_id="r")
    before = _drive(source, "r", until=NUM_BEFORE)
    exported = export_for_migration(source, "r")
    state = exported.state
    assert state.block_ids and exported.kv is not None  # the KV goes along
    (kv,) = anyio.run(_ship, exported, accept_spec_for(source))
    assert import_migrated_kv(target, state.token_ids, kv, "tenant-a") == len(state.block_ids)

    def first_cached(req_id: str, params: SamplingParams) -> int:
        target.add_request(state.token_ids, params, req_id=req_id)
        (first,) = [out for out in target.step() if out.req_id == req_id]
        target.abort([req_id])
        return first.num_cached_tokens

    assert first_cached("plain", _greedy(2)) == 0  # the same tokens, no salt: none of the moved blocks
    other = SamplingParams(temperature=0, max_tokens=2, ignore_eos=True, cache_salt="tenant-b")
    assert first_cached("other", other) == 0
    remaining = SamplingParams(
        temperature=0, max_tokens=NUM_TOKENS - NUM_BEFORE, ignore_eos=True, cache_salt="tenant-a"
    )
    target.add_request(state.token_ids, remaining, req_id="r")
    after = _drive(target, "r")
    assert before + after == expected  # the salted KV continues token-identical
    assert target.make_stats().prefix_cache_hits_total == len(state.block_ids) * 4  # its hits: the moved blocks


def test_a_lora_request_moves_with_its_kv_and_continues_token_identical(tiny, tmp_path):
    """An adapter on k_proj and v_proj changes the KV itself: the moved blocks are the adapter's, keyed under it on
    the target (a hit for it alone), and decoding continues as if it had never moved (the tiny model, fp32)."""
    from backends.checkpoint.peft_writer import random_peft_adapter
    from backends.fake.byte_tokenizer import ByteTokenizer

    config, _, model = tiny
    path = random_peft_adapter(tmp_path / "kv", config, rank=4, target_modules=("k_proj", "v_proj"), seed=3, b_std=0.3)
    adapter = LoraRequest("kv", str(path))
    prompt = list(range(20, 50))  # 30 tokens: 7 full blocks of 4

    def engine() -> LLMEngine:
        runner = TorchModelRunner(model, progress=False, lora_config=LoraConfig(2, 8))
        built = LLMEngine(runner, ByteTokenizer(), SchedulerConfig(max_model_len=128), CacheConfig(4, 64, 0))
        built.add_lora(adapter)
        return built

    reference = engine()
    reference.add_request(prompt, _greedy(NUM_TOKENS), req_id="r", lora_name="kv")
    expected = _drive(reference, "r")
    reference.add_request(prompt, _greedy(NUM_TOKENS), req_id="base")
    assert _drive(reference, "base") != expected  # the adapter changes the answer

    source, target = engine(), engine()
    source.add_request(prompt, _greedy(NUM_TOKENS), req_id="r", lora_name="kv")
    before = _drive(source, "r", until=NUM_BEFORE)
    exported = export_for_migration(source, "r")
    state = exported.state
    assert state.lora_id == adapter.lora_id and len(state.block_ids) == (len(state.token_ids) - 1) // 4
    (kv,) = anyio.run(_ship, exported, accept_spec_for(source))
    assert kv.lora_id == adapter.lora_id  # it travels with the transfer
    assert import_migrated_kv(target, state.token_ids, kv) == 0  # never keyed as the base model's
    assert import_migrated_kv(target, state.token_ids, kv, lora_id=adapter.lora_id) == len(state.block_ids)

    target.add_request(state.token_ids, _greedy(1), req_id="on-base")
    (first,) = [out for out in target.step() if out.req_id == "on-base"]
    assert first.num_cached_tokens == 0  # the adapter's KV is no hit for the base model
    target.abort(["on-base"])
    target.add_request(state.token_ids, _greedy(NUM_TOKENS - NUM_BEFORE), req_id="r", lora_name="kv")
    assert before + _drive(target, "r") == expected
    assert target.make_stats().prefix_cache_hits_total == len(state.block_ids) * 4
