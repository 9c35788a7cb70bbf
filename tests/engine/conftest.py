"""Factories and fake runners for the engine-core tests (no torch).

Under ``--import-mode=importlib`` a test module cannot import this file, so everything is exposed as
fixtures that return the factory or class.

``PagedKVRunner`` is the fake that catches bookkeeping bugs: it stores one "KV" value per physical
(block, slot) of each tier, applies block moves in the documented order, and computes each position's
KV from the previous position's KV *read back through the block table*, so the sampled token depends
on the whole context as seen through the cache. A wrong block id, slot, swap pair, copy or counter
changes every later token of that request.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from engine.batch import RunnerOutput, SchedulerOutput
from engine.clock import ManualClock
from engine.config import CacheConfig, PreemptionMode, SchedulerConfig
from engine.request import FinishReason, Request
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler

_MODULUS = (1 << 61) - 1
_ROOT_KV = 0x5EED


def _mix(prev_kv: int, token_id: int, pos: int) -> int:
    return (prev_kv * 1_000_003 + token_id * 7_919 + pos * 104_729 + 1) % _MODULUS


class PagedKVRunner:
    """Fake runner with a real paged KV store (see module docstring). Greedy and deterministic."""

    def __init__(self, num_device_blocks: int, num_host_blocks: int, block_size: int, vocab_size: int = 97) -> None:
        self.block_size = block_size
        self.vocab_size = vocab_size
        self.device: list[list[int | None]] = [[None] * block_size for _ in range(num_device_blocks)]
        self.host: list[list[int | None]] = [[None] * block_size for _ in range(num_host_blocks)]
        self.num_steps = 0
        self.num_computed_tokens = 0  # known + draft tokens run through the "model"
        self.finished_req_ids: list[str] = []

    @classmethod
    def for_scheduler(cls, scheduler: Scheduler, vocab_size: int = 97) -> PagedKVRunner:
        c = scheduler.cache_config
        return cls(c.num_device_blocks, c.num_host_blocks, c.block_size, vocab_size)

    def next_token(self, kv: int) -> int:
        return kv % self.vocab_size

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        self.num_steps += 1
        self.finished_req_ids.extend(batch.finished_req_ids)
        for device_id, host_id in batch.blocks_to_swap_out:
            self.host[host_id] = list(self.device[device_id])
        for host_id, device_id in batch.blocks_to_swap_in:
            self.device[device_id] = list(self.host[host_id])
        for src_id, dst_id in batch.blocks_to_copy:
            self.device[dst_id] = list(self.device[src_id])
        sampled = {}
        for r in batch.requests:
            tokens = r.token_ids + r.spec_token_ids
            assert len(r.block_ids) * self.block_size >= r.start_pos + len(tokens), "block table too short"
            predictions = []  # next-token predictions after the last known token and after each draft
            for i, token_id in enumerate(tokens):
                pos = r.start_pos + i
                prev_kv = _ROOT_KV if pos == 0 else self._read(r.block_ids, pos - 1)
                kv = _mix(prev_kv, token_id, pos)
                self.device[r.block_ids[pos // self.block_size]][pos % self.block_size] = kv
                if i >= len(r.token_ids) - 1:
                    predictions.append(self.next_token(kv))
            self.num_computed_tokens += len(tokens)
            if r.sample:
                out = [predictions[0]]
                for j, draft in enumerate(r.spec_token_ids):
                    if draft != out[-1]:
                        break
                    out.append(predictions[j + 1])
                sampled[r.req_id] = out
        return RunnerOutput(sampled_token_ids=sampled)

    def _read(self, block_ids: list[int], pos: int) -> int:
        kv = self.device[block_ids[pos // self.block_size]][pos % self.block_size]
        assert kv is not None, f"read of an unwritten KV slot at position {pos}"
        return kv


class ConstantRunner:
    """Samples ``token_id`` for every request that samples; records what it was given."""

    def __init__(self, token_id: int = 7) -> None:
        self.token_id = token_id
        self.batches: list[SchedulerOutput] = []

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        self.batches.append(batch)
        return RunnerOutput(sampled_token_ids={r.req_id: [self.token_id] for r in batch.requests if r.sample})


@dataclass
class RunResult:
    outputs: dict[str, list[int]] = field(default_factory=dict)
    finish_reasons: dict[str, FinishReason | None] = field(default_factory=dict)
    stop_reasons: dict[str, int | str | None] = field(default_factory=dict)
    num_steps: int = 0


def run_to_completion(
    scheduler: Scheduler,
    runner,
    clock: ManualClock | None = None,
    max_steps: int = 20_000,
    before_step: Callable[[Scheduler], None] | None = None,
    check: Callable[[Scheduler, SchedulerOutput], None] | None = None,
    more_coming: Callable[[], bool] | None = None,
) -> RunResult:
    """Drive schedule -> execute -> update until every request finished (and, with ``more_coming``,
    until it says no more requests will be added by ``before_step``)."""
    result = RunResult()
    while scheduler.has_unfinished_requests() or (more_coming is not None and more_coming()):
        assert result.num_steps < max_steps, "no progress (livelock?)"
        if before_step is not None:
            before_step(scheduler)
        scheduler_output = scheduler.schedule()
        if check is not None:
            check(scheduler, scheduler_output)
        runner_output = runner.execute(scheduler_output)
        for update in scheduler.update_from_output(scheduler_output, runner_output):
            result.outputs.setdefault(update.req_id, []).extend(update.new_token_ids)
            if update.finished:
                result.finish_reasons[update.req_id] = update.finish_reason
                result.stop_reasons[update.req_id] = update.stop_reason
        result.num_steps += 1
        if clock is not None:
            clock.advance(0.01)
    return result


def _make_request(
    req_id: str = "r0",
    prompt: list[int] | int = 8,
    max_tokens: int = 4,
    arrival_time_s: float = 0.0,
    eos_token_id: int | None = None,
    lora_id: int | None = None,
    **params,
) -> Request:
    """``prompt`` is a token list, or a length (tokens 1000 + i, distinct per request id)."""
    if isinstance(prompt, int):
        base = 1000 + 100 * (zlib.crc32(req_id.encode()) % 1000)
        prompt = [base + i for i in range(prompt)]
    return Request(
        req_id, prompt, SamplingParams(max_tokens=max_tokens, **params), arrival_time_s, eos_token_id, lora_id
    )


def _make_scheduler(
    clock: ManualClock | None = None,
    block_size: int = 4,
    num_device_blocks: int = 64,
    num_host_blocks: int = 64,
    enable_prefix_caching: bool = True,
    max_num_batched_tokens: int = 64,
    max_num_seqs: int = 16,
    max_model_len: int = 256,
    enable_chunked_prefill: bool = True,
    preemption_mode: PreemptionMode = PreemptionMode.SWAP,
) -> Scheduler:
    return Scheduler(
        SchedulerConfig(
            max_num_batched_tokens=max_num_batched_tokens,
            max_num_seqs=max_num_seqs,
            max_model_len=max_model_len,
            enable_chunked_prefill=enable_chunked_prefill,
            preemption_mode=preemption_mode,
        ),
        CacheConfig(
            block_size=block_size,
            num_device_blocks=num_device_blocks,
            num_host_blocks=num_host_blocks,
            enable_prefix_caching=enable_prefix_caching,
        ),
        clock or ManualClock(),
    )


@pytest.fixture(scope="session")
def make_request():
    return _make_request


@pytest.fixture(scope="session")
def make_scheduler():
    return _make_scheduler


@pytest.fixture(scope="session")
def kv_runner_cls():
    return PagedKVRunner


@pytest.fixture(scope="session")
def constant_runner_cls():
    return ConstantRunner


@pytest.fixture(scope="session")
def run():
    return run_to_completion


def _run_batch(engine, requests: list[tuple[list[int], SamplingParams]], field: str) -> list[tuple]:
    """Each request's (its outputs' ``field``, which must come once; cached prompt tokens; output ids), the requests
    run in one batch."""
    ids = [engine.add_request(prompt, params) for prompt, params in requests]
    got = {i: [None, 0, []] for i in ids}
    while engine.has_unfinished_requests():
        for out in engine.step():
            value = getattr(out, field)
            if value is not None:
                assert got[out.req_id][0] is None  # once
                got[out.req_id][0] = value
            got[out.req_id][1] = out.num_cached_tokens
            got[out.req_id][2] += out.new_token_ids
    return [tuple(got[i]) for i in ids]


@pytest.fixture
def run_batch() -> Callable[..., list[tuple]]:
    """``run_batch(engine, [(prompt ids, params), ...], "prompt_logprobs" | "embedding")``: see ``_run_batch``."""
    return _run_batch


def _smollm2_engine(model, checkpoint, step_tokens: int):
    """SmolLM2 on the torch runner: 4 sequences, 512 positions, 64 blocks of 16, ``step_tokens`` a step."""
    from backends.torch import TorchModelRunner
    from engine.llm_engine import LLMEngine

    return LLMEngine(
        TorchModelRunner(model, progress=False),
        checkpoint.tokenizer,
        SchedulerConfig(max_num_batched_tokens=step_tokens, max_num_seqs=4, max_model_len=512),
        CacheConfig(block_size=16, num_device_blocks=64, num_host_blocks=0),
    )


@pytest.fixture(scope="module")
def smollm2_engine(smollm2_model, smollm2_checkpoint):
    """SmolLM2 with a 256-token step budget (a prompt in one step), one per test module."""
    return _smollm2_engine(smollm2_model, smollm2_checkpoint, 256)


def _greedy(engine, prompt: list[int], max_tokens: int, **params) -> list[int]:
    req_id = engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True, **params))
    out: list[int] = []
    while engine.has_unfinished_requests():
        out += [t for o in engine.step() if o.req_id == req_id for t in o.new_token_ids]
    return out


@pytest.fixture
def greedy() -> Callable[..., list[int]]:
    """``greedy(engine, prompt ids, max_tokens, **sampling params)``: the tokens one greedy request generates (EOS
    ignored), run alone to its end."""
    return _greedy


@pytest.fixture(scope="module")
def smollm2_chunked_engine(smollm2_model, smollm2_checkpoint):
    """SmolLM2 with a 16-token step budget (a prompt runs in chunks), one per test module."""
    return _smollm2_engine(smollm2_model, smollm2_checkpoint, 16)
