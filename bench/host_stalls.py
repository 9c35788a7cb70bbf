"""The host's stalls, as a thread sees them: gaps in a tight clock-reading loop.

A virtual machine's vCPU can stop for tens of microseconds at a time (the hypervisor runs something else, an
interrupt is handled outside the guest) without the guest seeing it: no context switch, no steal time in
``/proc/stat``. Measured on this project's build machines (2026-12-06, a C loop of ``clock_gettime``): about one
gap of 10-50 µs per millisecond, ~2% of the time. A timed call of length ``d`` then contains such a gap with a
probability of about ``1 - exp(-rate * d)``; once that is above 1%, a p99 of ``d`` measures ``d`` plus a gap.

``probe_host_stalls`` reads the clock in a Python loop (~0.1 µs per read) for ``duration_s`` and keeps every gap
above ``threshold_us``; ``expected_hit_share`` is the Poisson estimate above. A benchmark reports both beside its
own percentiles, in the same run, so a reader can tell the code's tail from the host's.
"""

from __future__ import annotations

import gc
import math
import time
from collections.abc import Callable

from bench.stats import percentile


def probe_host_stalls(
    duration_s: float = 0.5, threshold_us: float = 5.0, clock: Callable[[], int] = time.perf_counter_ns
) -> dict:
    """{"duration_s", "threshold_us", "num_stalls", "stalls_per_ms", "stalled_share", "stall_p50_us",
    "stall_p99_us", "stall_max_us", "loop_read_ns"}: the gaps above ``threshold_us`` in ``duration_s`` of clock reads
    (the collector off meanwhile, so none of them is Python's own). ``clock``: nanoseconds (tests script one)."""
    perf = clock
    threshold_ns = int(threshold_us * 1e3)
    gaps: list[int] = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        start = prev = perf()
        end = start + int(duration_s * 1e9)
        num_reads = 0
        while prev < end:
            now = perf()
            if now - prev > threshold_ns:
                gaps.append(now - prev)
            prev = now
            num_reads += 1
    finally:
        if was_enabled:
            gc.enable()
    elapsed_ns = prev - start
    return {
        "duration_s": elapsed_ns / 1e9,
        "threshold_us": threshold_us,
        "num_stalls": len(gaps),
        "stalls_per_ms": len(gaps) / (elapsed_ns / 1e6),
        "stalled_share": sum(gaps) / elapsed_ns,
        "stall_p50_us": percentile(gaps, 50) / 1e3 if gaps else 0.0,
        "stall_p99_us": percentile(gaps, 99) / 1e3 if gaps else 0.0,
        "stall_max_us": max(gaps, default=0) / 1e3,
        "loop_read_ns": (elapsed_ns - sum(gaps)) / max(num_reads, 1),
    }


def expected_hit_share(stalls_per_ms: float, call_us: float) -> float:
    """The share of calls of ``call_us`` that contain a stall, stalls arriving at ``stalls_per_ms`` at random."""
    return 1.0 - math.exp(-stalls_per_ms * call_us / 1e3)
