"""Static shapes for the jitted programs, and a counter of the XLA compiles they cause.

XLA compiles one program per distinct input shape. Every variable size of a step is therefore
rounded up to a bucket and the inputs padded, so a steady stream of decode steps reuses a handful
of programs (here 1.4–2.2 s of compile each on the real model, so the set is kept small)::

    decode program   (batch bucket, context-block bucket)        e.g. (32, 16)
    chunk program    (token bucket, key-block bucket, sample-row bucket)
    sampler          (row bucket)                                shared by both programs' outputs
    block moves      (power of two >= number of blocks moved)

Past the last listed bucket a size grows in powers of two, so any size runs (at the cost of one
compile per new power of two).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import jax.monitoring

try:  # the event name jax reports each backend (XLA) compile under
    from jax._src.dispatch import BACKEND_COMPILE_EVENT
except ImportError:  # pragma: no cover - a jax that moved it
    BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


def next_pow2(n: int) -> int:
    """Smallest power of two >= n (1 for n <= 1)."""
    return 1 << max(0, n - 1).bit_length()


def _pick(buckets: tuple[int, ...], n: int) -> int:
    for b in buckets:
        if b >= n:
            return b
    return next_pow2(n)


@dataclass(frozen=True, slots=True)
class BucketPolicy:
    """Bucket sizes of every padded dimension.

    token_buckets: rows of a chunk (prefill / speculative) program call.
    batch_buckets: rows of a decode program call (one per decoding request). Starts at 2: XLA
        rewrites a one-row scatter into a select over the whole KV array plus a dynamic update,
        which copies the cache every layer (7 s a step instead of 50 ms with 1,024 blocks); a
        padded second row keeps it an in-place scatter.
    sample_buckets: sampled rows of a chunk program call (output-head rows).
    min_context_blocks: smallest per-request block-table width of the decode program (16 blocks of
        16 tokens = 256 tokens: attention over a few hundred padded keys costs far less than a
        recompile); wider tables grow in powers of two.
    min_key_blocks: smallest number of gathered KV blocks of a chunk program call.
    """

    token_buckets: tuple[int, ...] = (16, 64, 256, 512)
    batch_buckets: tuple[int, ...] = (2, 4, 8, 16, 32, 64)
    sample_buckets: tuple[int, ...] = (1, 4, 16, 64)
    min_context_blocks: int = 16
    min_key_blocks: int = 16

    def __post_init__(self) -> None:
        for name in ("token_buckets", "batch_buckets", "sample_buckets"):
            buckets = getattr(self, name)
            if not buckets or any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
                raise ValueError(f"{name} must be strictly increasing positive ints, got {buckets!r}")
        for name in ("min_context_blocks", "min_key_blocks"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")

    def num_tokens(self, n: int) -> int:
        return _pick(self.token_buckets, n)

    def batch_size(self, n: int) -> int:
        return _pick(self.batch_buckets, n)

    def sample_rows(self, n: int) -> int:
        return _pick(self.sample_buckets, n)

    def context_blocks(self, n: int) -> int:
        return max(self.min_context_blocks, next_pow2(n))

    def key_blocks(self, n: int) -> int:
        return max(self.min_key_blocks, next_pow2(n))


# ---- compile counting -----------------------------------------------------------------------------
#
# jax reports compiles process-wide through jax.monitoring. One listener (installed once) hands each
# compile to the CompileCounter whose ``track()`` block is open on the compiling thread, so two
# runners in one process count their own compiles.

_tracking = threading.local()


def _on_duration_event(event: str, duration_s: float, **_kwargs: object) -> None:
    if event != BACKEND_COMPILE_EVENT:
        return
    counter = getattr(_tracking, "counter", None)
    if counter is not None:
        counter.num_compilations += 1
        counter.compile_time_s += duration_s


@functools.cache
def _install_listener() -> None:
    jax.monitoring.register_event_duration_secs_listener(_on_duration_event)


class CompileCounter:
    """XLA compiles (and their seconds) caused by calls made inside ``track()``."""

    def __init__(self) -> None:
        _install_listener()
        self.num_compilations = 0
        self.compile_time_s = 0.0

    @contextmanager
    def track(self) -> Iterator[None]:
        outer = getattr(_tracking, "counter", None)
        _tracking.counter = self
        try:
            yield
        finally:
            _tracking.counter = outer
