"""How a tensor-parallel group plugs into one engine: rank 0 runs the engine core, the others follow.

Only rank 0 has a scheduler, a block manager and a tokenizer; its runner is a ``TPLeaderRunner``, which
meets the ModelRunner protocol by sending every call to the followers before running its own shard::

    rank 0 (agent: engine core, scheduler, sampler)        ranks 1..N-1 (``follow``)
    initialize_kv_cache(spec) --("init", spec)------->     initialize_kv_cache(spec)   its KV heads only
    execute(batch)            --("step", batch)------->    execute(batch)              same block moves,
        forward: all-reduce x 2 per layer  <===========>       forward                 same rows
        sample on rank 0 -> RunnerOutput                   (output dropped)
    close()                   --("stop", None)-------->    return

The batch (a SchedulerOutput: token ids, positions, block tables, block moves) is pickled over the
gloo cpu group; the activations' all-reduces go over the device group. Every rank applies the same
block moves to its slice of the KV cache, so block ids mean the same blocks everywhere. All ranks reach
the same reduced hidden state, so a follower's sampling would agree with the leader's; only rank 0's is
used. A batch the runner refuses before computing (a position past the context, say) is refused by every
rank alike: rank 0 raises to the engine, the followers log it and wait for the next command. A rank that
dies leaves the others' next collective to fail with the torch.distributed error after its timeout (a TP
group lives and dies together, as in vLLM and SGLang).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from backends.sleep_levels import WAKE_TAGS
from backends.torch.runner_sleep import TP_UNSUPPORTED
from backends.torch.tp_group import TPGroup
from engine.batch import RunnerOutput, SchedulerOutput
from engine.model_runner import KVCacheSpec

log = logging.getLogger(__name__)


class TPLeaderRunner:
    """The ModelRunner protocol on rank 0 over a TorchModelRunner built with ``tp=group``."""

    def __init__(self, runner: Any, group: TPGroup) -> None:
        if group.rank != 0:
            raise ValueError(f"the leader runs on rank 0, not {group.rank}")
        self.runner = runner
        self.group = group
        self.processes: list = []  # the followers' processes, when this process started them (tp_serve.py)
        self.on_close: list[Callable[[], None]] = []  # run after the followers were told to stop
        self._closed = False

    def __getattr__(self, name: str) -> Any:
        """Rank 0's runner's data (e.g. what it reports about its kernels); a method that is not forwarded
        here would run on rank 0 only, so it is refused."""
        if name.startswith("__") or name in ("runner", "group"):
            raise AttributeError(name)
        value = getattr(self.runner, name)
        if callable(value):
            raise AttributeError(f"TPLeaderRunner does not forward {name}() to its followers")
        return value

    @property
    def max_model_len(self) -> int:
        return self.runner.max_model_len

    @property
    def config(self) -> Any:
        return self.runner.config

    def kv_bytes_per_block(self, block_size: int) -> int:
        """Bytes of one block on each rank (its 1/N of the KV heads): each rank's memory holds the blocks."""
        return self.runner.kv_bytes_per_block(block_size)

    def initialize_kv_cache(self, spec: KVCacheSpec) -> None:
        self.group.broadcast_object(("init", spec))
        self.runner.initialize_kv_cache(spec)

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        self.group.broadcast_object(("step", batch))
        return self.runner.execute(batch)

    def compute_logits(self, batch: SchedulerOutput) -> dict[str, Any]:
        self.group.broadcast_object(("logits", batch))
        return self.runner.compute_logits(batch)

    def sleep(self, level: int) -> int:
        """Refused (runner_sleep.py): every rank would have to free and restore its shard in step."""
        raise RuntimeError(TP_UNSUPPORTED)

    def wake_up(self, tags: tuple[str, ...] = WAKE_TAGS) -> None:
        raise RuntimeError(TP_UNSUPPORTED)

    def close(self) -> None:
        """Tell the followers to stop (idempotent), then run ``on_close``."""
        if self._closed:
            return
        self._closed = True
        try:
            self.group.broadcast_object(("stop", None))
        finally:
            for fn in self.on_close:
                fn()


def follow(runner: Any, group: TPGroup) -> int:
    """A follower's life: run rank 0's commands on this rank's shard until "stop"; returns steps run."""
    if group.rank == 0:
        raise ValueError("rank 0 leads; it does not follow")
    steps = 0
    while True:
        command, arg = group.broadcast_object(None)
        if command == "stop":
            return steps
        try:
            if command == "init":
                runner.initialize_kv_cache(arg)
            elif command == "step":
                steps += 1
                runner.execute(arg)
            elif command == "logits":
                runner.compute_logits(arg)
            else:
                raise ValueError(f"unknown TP command {command!r}")
        except Exception:
            # a batch the runner refuses (checked before any collective) is refused on rank 0 alike, which
            # reports it; the group stays in step, so this rank carries on with the next command
            log.exception("TP rank %d: %s failed", group.rank, command)
