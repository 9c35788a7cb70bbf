"""`zoo bench kv`'s migration figure: move a running request of ``context_tokens`` tokens between two engines
on the real model (torch, fp32, CPU here) and compare the pause in its token stream with recomputing it.

    reference   the request run whole on the source (its greedy tokens: what ``identical`` compares to)
    migrated    the same request on the source until NUM_BEFORE tokens, then: export (read its KV blocks)
                → KV data plane over loopback TCP (both planes in this process) → import into the target's
                prefix cache → target steps until its next token.   pause_ms = export start → that token
    recompute   a third engine with an empty cache re-prefills prompt + NUM_BEFORE tokens (what a resume
                without KV does) until its next token.              recompute_ms
    speedup     recompute_ms / pause_ms
"""

from __future__ import annotations

import time

import anyio
import zmq.asyncio

from agent.kv_data_plane import DataPlaneConfig, KVDataPlane, accept_spec_for
from agent.kv_migration import export_for_migration, import_migrated_kv
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

NUM_BEFORE = 4
NUM_TOKENS = 8


def _engines(num_blocks: int, max_model_len: int, count: int) -> list[LLMEngine]:
    from backends.checkpoint import default_model_path, load_checkpoint
    from backends.torch import TorchModelRunner, build_model
    from engine.config import CacheConfig, SchedulerConfig

    checkpoint = load_checkpoint(default_model_path())
    model = build_model(checkpoint, "float32", progress=False)
    return [
        LLMEngine(
            TorchModelRunner(model, progress=False),
            checkpoint.tokenizer,
            SchedulerConfig(max_num_batched_tokens=max_model_len, max_num_seqs=4, max_model_len=max_model_len),
            CacheConfig(block_size=16, num_device_blocks=num_blocks, num_host_blocks=0),
        )
        for _ in range(count)
    ]


def _until(engine: LLMEngine, req_id: str, num_tokens: int | None) -> list[int]:
    tokens: list[int] = []
    while engine.has_unfinished_requests() and (num_tokens is None or len(tokens) < num_tokens):
        for out in engine.step():
            if out.req_id == req_id:
                tokens += out.new_token_ids
    return tokens


async def _ship(exported, spec) -> tuple[object, float]:
    ctx = zmq.asyncio.Context()
    received: list = []
    try:
        async with anyio.create_task_group() as tg:
            a = KVDataPlane("source", spec, lambda kv: None, DataPlaneConfig(), context=ctx)
            b = KVDataPlane("target", spec, received.append, DataPlaneConfig(), context=ctx)
            await tg.start(a.run)
            await tg.start(b.run)
            s = exported.state
            seconds = await a.send(b.endpoint, s.req_id, s.block_ids, exported.layout, exported.kv_bytes())
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    return received[0], seconds


def bench_migration(context_tokens: int) -> dict:
    num_blocks = context_tokens // 16 + 16
    source, target, cold = _engines(num_blocks, context_tokens + 64, 3)
    vocab = source.tokenizer.vocab_size
    prompt = [100 + (i * 7919) % (vocab - 200) for i in range(context_tokens)]
    params = SamplingParams(temperature=0, max_tokens=NUM_TOKENS, ignore_eos=True)
    for i, engine in enumerate((target, cold)):  # one-time costs (first forward passes) out of the timings
        engine.add_request([50 + i] * 40, SamplingParams(temperature=0, max_tokens=2), req_id="warmup")
        _until(engine, "warmup", None)
    # the target's first step after a move is a short prefill over a cached prefix: warm that kind of step too
    warm = [60 + (i * 31) % 5000 for i in range(64)]
    for n, req_id in ((64, "warm-prefix"), (69, "warm-tail")):  # the second hits the first's 4 cached blocks
        target.add_request([*warm, *[61] * (n - 64)], SamplingParams(temperature=0, max_tokens=2), req_id=req_id)
        _until(target, req_id, None)

    source.add_request(prompt, params, req_id="ref")
    reference = _until(source, "ref", None)

    source.add_request(prompt, params, req_id="r")  # prefix-cache hit on the source: only the run-up is timed out
    before = _until(source, "r", NUM_BEFORE)
    start = time.perf_counter()
    exported = export_for_migration(source, "r")
    export_s = time.perf_counter() - start
    kv, transfer_s = anyio.run(_ship, exported, accept_spec_for(source))
    state = exported.state
    t = time.perf_counter()
    num_written = import_migrated_kv(target, state.token_ids, kv)
    import_s = time.perf_counter() - t
    rest = SamplingParams(temperature=0, max_tokens=NUM_TOKENS - NUM_BEFORE, ignore_eos=True)
    target.add_request(state.token_ids, rest, req_id="r")
    t = time.perf_counter()
    after = _until(target, "r", 1)
    first_step_s = time.perf_counter() - t
    pause_s = time.perf_counter() - start
    after += _until(target, "r", None)

    start = time.perf_counter()
    cold.add_request(state.token_ids, rest, req_id="r")
    _until(cold, "r", 1)
    recompute_s = time.perf_counter() - start
    return {
        "context_tokens": len(state.token_ids),
        "kv_bytes": kv.nbytes,
        "blocks_moved": num_written,
        "export_ms": 1e3 * export_s,
        "transfer_ms": 1e3 * transfer_s,
        "import_ms": 1e3 * import_s,
        "first_step_ms": 1e3 * first_step_s,
        "pause_ms": 1e3 * pause_s,
        "recompute_ms": 1e3 * recompute_s,
        "speedup": recompute_s / pause_s,
        "identical": before + after == reference,
        "engine": "torch fp32 on CPU, SmolLM2-135M, block 16; data plane over loopback TCP in one process",
    }
