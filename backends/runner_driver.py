"""Driving a ModelRunner directly, without the scheduler: a toy block allocator and a request that
schedules its own chunks. Used by backend parity tests and by benchmarks that time runner steps.

Framework-free (numpy only), so the torch and JAX backends are driven the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.checkpoint import ModelConfig
from engine.batch import ScheduledRequest, SchedulerOutput
from engine.model_runner import KVCacheSpec
from engine.request import Request
from engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=64)


def tiny_config(**overrides: Any) -> ModelConfig:
    """A 2-layer Llama small enough for exact tests (GQA: 6 query heads over 2 KV heads)."""
    fields = dict(
        name="tiny-llama",
        vocab_size=97,
        hidden_size=48,
        intermediate_size=80,
        num_hidden_layers=2,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=8,
        rms_norm_eps=1e-5,
        rope_theta=10000.0,
        rope_scaling=None,
        max_position_embeddings=256,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
    )
    fields.update(overrides)
    return ModelConfig(**fields)


class BlockAllocator:
    """Hands out device block ids in a scrambled order, so block tables are non-contiguous."""

    def __init__(self, num_blocks: int, seed: int = 0) -> None:
        self.free: list[int] = np.random.default_rng(seed).permutation(num_blocks).tolist()

    def grow(self, block_ids: list[int], num_tokens: int, block_size: int) -> list[int]:
        while len(block_ids) * block_size < num_tokens:
            block_ids.append(self.free.pop())
        return block_ids


@dataclass
class Seq:
    """A request as a test drives it: all known tokens and how many have KV."""

    req_id: str
    token_ids: list[int]
    params: SamplingParams
    num_computed: int = 0
    block_ids: list[int] | None = None
    num_output: int = 0

    def schedule(self, alloc: BlockAllocator, block_size: int, max_tokens: int | None = None) -> ScheduledRequest:
        n = len(self.token_ids) - self.num_computed
        if max_tokens is not None:
            n = min(n, max_tokens)
        self.block_ids = alloc.grow(self.block_ids or [], self.num_computed + n, block_size)
        return ScheduledRequest(
            req_id=self.req_id,
            token_ids=self.token_ids[self.num_computed : self.num_computed + n],
            start_pos=self.num_computed,
            block_ids=list(self.block_ids),
            sample=self.num_computed + n == len(self.token_ids),
            sampling_params=self.params,
            num_output_tokens=self.num_output,
        )

    def advance(self, sched: ScheduledRequest, sampled: list[int] | None) -> None:
        self.num_computed += len(sched.token_ids)
        if sampled:
            self.token_ids.extend(sampled)
            self.num_output += len(sampled)


def sampled_step(request: Request) -> ScheduledRequest:
    """``request``'s next step as the scheduler hands it to a runner's sampler: its last known token run and sampled,
    with the logits inputs its params need (Request.logits_inputs); no block table (a sampler reads none)."""
    history = request.all_token_ids
    return ScheduledRequest(
        request.req_id, history[-1:], len(history) - 1, [], True, request.sampling_params, request.num_output_tokens,
        logits_inputs=request.logits_inputs(),
    )  # fmt: skip


def make_step(step_id: int, requests: list[ScheduledRequest], **moves: Any) -> SchedulerOutput:
    return SchedulerOutput(step_id=step_id, requests=requests, **moves)


def drive_greedy(
    runner: Any,
    prompts: list[list[int]],
    num_new: int,
    block_size: int = 4,
    num_blocks: int = 256,
    *,
    initialize: bool = True,
    tag: str = "r",
) -> tuple[list[list[int]], list[float]]:
    """Prefill every prompt in one step, then decode ``num_new - 1`` steps of the whole batch, greedily.

    Returns (the generated ids per prompt, each step's ``step_time_s``). The runner's KV cache is
    initialised here (``num_blocks`` device blocks of ``block_size``), unless ``initialize`` is False: then the
    cache it has is used (a woken runner's, say: it must hold ``num_blocks`` of ``block_size``). ``tag`` prefixes
    the request ids (a runner's sampler keeps nothing of ids it has not seen)."""
    if initialize:
        runner.initialize_kv_cache(KVCacheSpec(num_device_blocks=num_blocks, num_host_blocks=0, block_size=block_size))
    alloc = BlockAllocator(num_blocks)
    seqs = [Seq(f"{tag}{i}", list(p), GREEDY) for i, p in enumerate(prompts)]
    times: list[float] = []
    for step in range(num_new):
        scheduled = [s.schedule(alloc, block_size) for s in seqs]
        out = runner.execute(make_step(step, scheduled))
        times.append(out.step_time_s)
        for s, sched in zip(seqs, scheduled):
            s.advance(sched, out.sampled_token_ids.get(s.req_id))
    return [s.token_ids[len(p) :] for s, p in zip(seqs, prompts)], times


def drive_embed(runner: Any, prompts: list[list[int]], block_size: int = 4, num_blocks: int = 256) -> list[list[float]]:
    """Each prompt's embedding (engine/embeddings.py), every prompt prefilled in one step."""
    runner.initialize_kv_cache(KVCacheSpec(num_device_blocks=num_blocks, num_host_blocks=0, block_size=block_size))
    alloc = BlockAllocator(num_blocks)
    embed = SamplingParams(temperature=0.0, max_tokens=1, embed=True)
    seqs = [Seq(f"r{i}", list(p), embed) for i, p in enumerate(prompts)]
    out = runner.execute(make_step(0, [s.schedule(alloc, block_size) for s in seqs]))
    return [out.embeddings[s.req_id] for s in seqs]
