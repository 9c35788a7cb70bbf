"""`zoo bench kv`'s remote_swap figure: a preempted request's KV (``context_tokens`` tokens) goes to a peer's host
RAM and comes back, vs recomputing it. Real parts: the engine's REMOTE tier and mover (engine/scheduler_remote.py,
agent/kv_remote_io.py), two agents' data planes and swappers (owner and holder, agent/kv_remote_swap.py) over
loopback TCP in this process; the real model (torch fp32 on CPU, SmolLM2-135M, 16-token blocks).

    reference   the request run whole on the owner (its greedy tokens: what ``identical`` compares to)
    out         the request runs NUM_BEFORE tokens; a higher-priority request that does not fit preempts it, the
                owner's host tier is 0 blocks: its KV goes remote.   out_ms = read off the device → holder acked
    in          the preemptor is aborted; the scheduler asks the KV back: fetch → return transfer → device
                blocks → the request's next token.                   in_ms = fetch asked → that token
    recompute   an engine with an empty cache re-prefills its tokens so far until its next token.  recompute_ms
    speedup     recompute_ms / (out_ms + in_ms)
"""

from __future__ import annotations

import time

import anyio
import zmq.asyncio

from agent.kv_data_plane import DataPlaneConfig, KVDataPlane, accept_spec_for
from agent.kv_remote_io import AgentRemoteKV, RemoteReport
from agent.kv_remote_store import RemoteKVStore
from agent.kv_remote_swap import RemoteSwapper
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

NUM_BEFORE = 4
NUM_TOKENS = 8
STORE_BYTES = 4 << 30


def _engines(num_blocks: int, max_model_len: int) -> tuple[LLMEngine, LLMEngine]:
    from backends.checkpoint import default_model_path, load_checkpoint
    from backends.torch import TorchModelRunner, build_model
    from engine.config import CacheConfig, SchedulerConfig

    checkpoint = load_checkpoint(default_model_path())
    model = build_model(checkpoint, "float32", progress=False)

    def engine(remote_swap: str) -> LLMEngine:
        return LLMEngine(
            TorchModelRunner(model, progress=False),
            checkpoint.tokenizer,
            SchedulerConfig(max_num_batched_tokens=max_model_len, max_num_seqs=4, max_model_len=max_model_len),
            CacheConfig(block_size=16, num_device_blocks=num_blocks, num_host_blocks=0, remote_swap=remote_swap),
        )

    return engine("fallback"), engine("off")


class _Timed(AgentRemoteKV):
    """The agent's mover, noting when each move starts."""

    def __init__(self, engine: LLMEngine) -> None:
        super().__init__(engine)
        self.read_s = self.fetch_start_s = 0.0

    def swap_out(self, moves) -> None:
        start = time.perf_counter()
        super().swap_out(moves)
        self.read_s = time.perf_counter() - start

    def fetch(self, fetches) -> None:
        self.fetch_start_s = time.perf_counter()
        super().fetch(fetches)


def _step(engine: LLMEngine, req_id: str, tokens: list[int]) -> None:
    for out in engine.step():
        if out.req_id == req_id:
            tokens += out.new_token_ids


async def _swap_round_trip(owner: LLMEngine, prompt: list[int], num_blocks: int) -> dict:
    ctx = zmq.asyncio.Context()
    spec = accept_spec_for(owner)
    reports: list[RemoteReport] = []
    arrived = anyio.Event()

    def report(r: RemoteReport) -> None:
        nonlocal arrived
        reports.append(r)
        arrived.set()

    async def next_report() -> RemoteReport:
        nonlocal arrived
        await arrived.wait()
        arrived = anyio.Event()
        return reports.pop(0)

    mover = _Timed(owner)
    owner.set_remote_kv(mover)
    try:
        async with anyio.create_task_group() as tg:
            swappers = {}
            planes = {}
            for node_id in ("owner", "holder"):
                plane = planes[node_id] = KVDataPlane(
                    node_id,
                    spec,
                    lambda kv, n=node_id: swappers[n].on_received(kv),
                    DataPlaneConfig(),
                    context=ctx,
                    on_command=lambda sender, cmd, n=node_id: swappers[n].handle_command(sender, cmd),
                    admit=lambda sender, chunk, nbytes, n=node_id: swappers[n].admit(sender, chunk, nbytes),
                )
                sink = report if node_id == "owner" else (lambda r: None)
                swappers[node_id] = RemoteSwapper(node_id, plane, sink, RemoteKVStore(STORE_BYTES))
                await tg.start(plane.run)
                tg.start_soon(swappers[node_id].run)
            swappers["owner"].update_peers({"holder": planes["holder"].endpoint}, {"holder": STORE_BYTES})
            swappers["holder"].update_peers({"owner": planes["owner"].endpoint}, {})

            params = SamplingParams(temperature=0, max_tokens=NUM_TOKENS, ignore_eos=True)
            owner.add_request(prompt, params, req_id="r")  # a prefix-cache hit: the reference run computed it
            tokens: list[int] = []
            while len(tokens) < NUM_BEFORE:
                _step(owner, "r", tokens)
            # a higher-priority request that cannot fit next to it: "r" is swapped out, its host tier is 0 blocks
            big = [7 + i % 50 for i in range(16 * (num_blocks - len(prompt) // 16))]
            owner.add_request(big, SamplingParams(temperature=0, max_tokens=1), req_id="vip", priority=1)
            pending = owner.start_step()  # "r" out (its blocks read), then vip's prefill: not part of the move
            sent_s = time.perf_counter()
            for ask in mover.take_asks():
                swappers["owner"].submit(ask)
            stored = await next_report()
            out_s = mover.read_s + time.perf_counter() - sent_s
            assert stored.kind == "stored", stored
            owner.finish_step(pending)  # vip's one token: it finishes, its blocks are free
            mover.apply(stored)
            before = len(tokens)
            while len(tokens) == before:
                _step(owner, "r", tokens)  # the first: the fetch; then the swap-in and the next token
                for ask in mover.take_asks():
                    swappers["owner"].submit(ask)
                if owner.scheduler.is_waiting_on_remote():
                    fetched = await next_report()
                    assert fetched.kind == "fetched", fetched
                    mover.apply(fetched)
            in_s = time.perf_counter() - mover.fetch_start_s
            while owner.has_unfinished_requests():
                _step(owner, "r", tokens)
            kv_bytes = swappers["holder"].plane.stats.bytes_total.get(("in", "owner"), 0)
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    return {"out_s": out_s, "in_s": in_s, "tokens": tokens, "kv_bytes": kv_bytes, "moves": mover.num_in}


def bench_remote_swap(context_tokens: int) -> dict:
    num_blocks = context_tokens // 16 + 8
    owner, cold = _engines(num_blocks, context_tokens + 64)
    vocab = owner.tokenizer.vocab_size
    prompt = [100 + (i * 7919) % (vocab - 200) for i in range(context_tokens)]
    params = SamplingParams(temperature=0, max_tokens=NUM_TOKENS, ignore_eos=True)
    cold.add_request([51] * 40, SamplingParams(temperature=0, max_tokens=2), req_id="warmup")  # one-time costs
    while cold.has_unfinished_requests():
        cold.step()
    owner.add_request(prompt, params, req_id="ref")
    reference: list[int] = []
    while owner.has_unfinished_requests():
        _step(owner, "ref", reference)

    swap = anyio.run(_swap_round_trip, owner, prompt, num_blocks)

    so_far = prompt + reference[:NUM_BEFORE]
    start = time.perf_counter()
    cold.add_request(so_far, SamplingParams(temperature=0, max_tokens=1), req_id="r")
    while cold.has_unfinished_requests():
        cold.step()
    recompute_s = time.perf_counter() - start
    out_in_s = swap["out_s"] + swap["in_s"]
    return {
        "context_tokens": len(so_far),
        "kv_bytes": swap["kv_bytes"],
        "out_ms": 1e3 * swap["out_s"],
        "in_ms": 1e3 * swap["in_s"],
        "out_in_ms": 1e3 * out_in_s,
        "recompute_ms": 1e3 * recompute_s,
        "speedup": recompute_s / out_in_s,
        "identical": swap["tokens"] == reference,
        "swapped_in": swap["moves"] == 1,
        "engine": "torch fp32 on CPU, SmolLM2-135M, block 16, host tier 0 blocks; owner and holder data planes "
        "over loopback TCP in one process",
    }
