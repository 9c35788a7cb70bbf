"""A counter of the XLA compiles the jitted programs cause; their static shapes are engine/buckets.py's.

XLA compiles one program per distinct input shape (here 1.4–2.2 s each on the real model), so the
bucket set of ``BucketPolicy`` (shared with the torch runner's CUDA graphs) is kept small.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import jax.monitoring

from engine.buckets import BucketPolicy, next_pow2

__all__ = ["BACKEND_COMPILE_EVENT", "BucketPolicy", "CompileCounter", "next_pow2"]

try:  # the event name jax reports each backend (XLA) compile under
    from jax._src.dispatch import BACKEND_COMPILE_EVENT
except ImportError:  # pragma: no cover - a jax that moved it
    BACKEND_COMPILE_EVENT = "/jax/core/compile/backend_compile_duration"


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
