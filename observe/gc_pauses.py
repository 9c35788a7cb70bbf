"""The process's garbage collector: its pauses measured, and its start-up heap frozen out of them.

A CPython process stops every thread while its cyclic collector runs: the control plane's event loop (routing,
relaying tokens) and an agent's engine thread alike. A full (generation 2) collection walks every tracked object. A
control plane holds ~150,000 of them once started (the tokenizer's vocabulary and merges, the modules), so each full
collection took 30-40 ms there (measured: bench/gc_pauses.py), a stall every request in flight waits out.

    settle_heap()      collect once, then ``gc.freeze()``: what start-up made moves to the permanent generation,
                       which no later collection walks (CPython's own advice for long-running servers: the gc
                       module's docs, ``gc.freeze``). Called once a process has started (zoo/serve.py, zoo/
                       agent_cmd.py; ``--no-gc-freeze`` leaves it out, to measure what it saves).
    GcPauses.install() a ``gc.callbacks`` hook timing every collection by generation
    gc_metrics(p)      its collect function (observe/exporter.py SnapshotCollector):

        zoo:process_gc_pause_seconds{generation}       histogram: each collection's pause
        zoo:process_gc_pause_max_seconds{generation}   gauge: the longest since start
        zoo:process_gc_frozen_objects                  gauge: objects in the permanent generation

The hook runs inside the collector, in whichever thread triggered it, so it takes no lock (a prometheus_client
Histogram's would deadlock against an observe() the collection interrupted): it adds to plain counters, read at
scrape time.
"""

from __future__ import annotations

import bisect
import gc
import time
from collections.abc import Iterable

from prometheus_client.core import GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.metrics_core import Metric

from observe import metrics_names as m

BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5)
GENERATIONS = (0, 1, 2)


def settle_heap() -> int:
    """Collect, then freeze every object that survived (the start-up heap); how many were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


class GcPauses:
    """Every collection's pause, by generation (``install`` hooks it; ``close`` unhooks it)."""

    def __init__(self) -> None:
        self.bucket_counts = {g: [0] * (len(BUCKETS_S) + 1) for g in GENERATIONS}  # the last: past every bound
        self.sum_s = dict.fromkeys(GENERATIONS, 0.0)
        self.max_s = dict.fromkeys(GENERATIONS, 0.0)
        self._started_ns = 0

    def install(self) -> GcPauses:
        gc.callbacks.append(self._callback)
        return self

    def close(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def count(self, generation: int) -> int:
        return sum(self.bucket_counts[generation])

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._started_ns = time.perf_counter_ns()
            return
        generation = info.get("generation", 2)
        if generation not in self.sum_s or not self._started_ns:
            return
        pause_s = (time.perf_counter_ns() - self._started_ns) / 1e9
        self._started_ns = 0
        self.bucket_counts[generation][bisect.bisect_left(BUCKETS_S, pause_s)] += 1
        self.sum_s[generation] += pause_s
        if pause_s > self.max_s[generation]:
            self.max_s[generation] = pause_s


def gc_metrics(pauses: GcPauses):
    """The collect function for ``pauses`` and the frozen heap."""

    def collect() -> Iterable[Metric]:
        histogram = HistogramMetricFamily(
            m.PROCESS_GC_PAUSE, "Pauses of the cyclic garbage collector, by generation.", labels=["generation"]
        )
        longest = GaugeMetricFamily(
            m.PROCESS_GC_PAUSE_MAX, "The longest collector pause since start, by generation.", labels=["generation"]
        )
        for generation in GENERATIONS:
            counts, cumulative, buckets = pauses.bucket_counts[generation], 0, []
            for bound, n in zip((*BUCKETS_S, float("inf")), counts, strict=True):
                cumulative += n
                buckets.append((repr(bound) if bound != float("inf") else "+Inf", cumulative))
            histogram.add_metric([str(generation)], buckets, pauses.sum_s[generation])
            longest.add_metric([str(generation)], pauses.max_s[generation])
        yield histogram
        yield longest
        yield GaugeMetricFamily(m.PROCESS_GC_FROZEN, "Objects frozen out of collection.", value=gc.get_freeze_count())

    return collect
