"""What the scheduler reports: a plain stats snapshot and a drained list of request events.

The core only produces these; an exporter in ``observe/`` publishes them. ``*_total`` fields are
monotonically increasing counters since the scheduler was created.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True, frozen=True)
class SchedulerStats:
    """A snapshot taken by ``Scheduler.make_stats()``.

    kv_usage: fraction (0..1) of device blocks in use; evictable prefix-cached blocks count as free.
    num_recomputed_tokens_total: computed tokens whose KV was dropped by recompute preemptions (an upper
        bound on the recomputation: a prefix-cache hit on re-admission spares some).
    prefix_cache_queries_total / prefix_cache_hits_total: tokens looked up / served on admission.
    num_prompt_tokens_total: prompt tokens of admitted requests, counted once per request.
    num_generation_tokens_total: output tokens appended.
    num_cached_prompt_tokens_total: prompt tokens a request found computed when first admitted (its prefix cache
        hit then, KV a peer sent included; a re-admission's hits are prefix_cache_hits_total's only): vLLM's
        ``prompt_tokens_cached``, its local cache hits plus its external KV transfers.
    """

    num_running: int
    num_waiting: int
    num_swapped: int
    kv_usage: float
    num_free_device_blocks: int
    num_free_host_blocks: int
    num_preemptions_total: int
    num_swapped_out_blocks_total: int
    num_swapped_in_blocks_total: int
    num_recomputed_tokens_total: int
    prefix_cache_queries_total: int
    prefix_cache_hits_total: int
    num_prompt_tokens_total: int
    num_generation_tokens_total: int
    num_cached_prompt_tokens_total: int = 0

    @property
    def prefix_cache_hit_rate(self) -> float:
        queries = self.prefix_cache_queries_total
        return self.prefix_cache_hits_total / queries if queries else 0.0


@dataclass(slots=True)
class SchedulerCounters:
    """The scheduler's running totals (mutable; ``make_stats`` copies them into a snapshot)."""

    num_preemptions_total: int = 0
    num_swapped_out_blocks_total: int = 0
    num_swapped_in_blocks_total: int = 0
    num_recomputed_tokens_total: int = 0
    prefix_cache_queries_total: int = 0
    prefix_cache_hits_total: int = 0
    num_prompt_tokens_total: int = 0
    num_generation_tokens_total: int = 0
    num_cached_prompt_tokens_total: int = 0


class SchedulerEventKind(enum.StrEnum):
    QUEUED = "queued"  # details: num_prompt_tokens
    SCHEDULED = "scheduled"  # first admission only; details: queue_time_s, num_cached_tokens
    PREEMPTED = "preempted"  # details: mode ("swap" | "recompute")
    SWAPPED_OUT = "swapped_out"  # details: num_blocks
    SWAPPED_IN = "swapped_in"  # details: num_blocks
    FINISHED = "finished"  # details: reason ("stop" | "length" | "abort"), num_output_tokens


@dataclass(slots=True, frozen=True)
class SchedulerEvent:
    kind: SchedulerEventKind
    req_id: str
    time_s: float  # scheduler clock
    details: dict[str, Any] = field(default_factory=dict)
