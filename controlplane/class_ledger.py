"""Per traffic class: what the control plane routed, refused and served, and how fast (P50/P99 TTFT, TPOT).

    placed ─► on_routed(class, cell, spilled)     refused ─► on_refused(class)
    request done (completed / cancelled / failed) ─► on_done(class, Inflight, outcome)
    summary() ─► {class: {ttft_ms_p50, ttft_ms_p99, tpot_ms_p50, tpot_ms_p99, requests_*}}   (ControlPlane.stats)

TTFT is the control plane's (arrival → first token relayed, routing and both hops included), as in
node_latency.py. Sans-IO.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.node_latency import NodeLatency


@dataclass(slots=True)
class _ClassRecord:
    latency: NodeLatency = field(default_factory=NodeLatency)
    num_routed: int = 0
    num_spilled: int = 0  # placed in a cell its class borrowed, not its home
    num_refused: int = 0
    num_cancelled: int = 0
    cells: dict[str, int] = field(default_factory=dict)  # cell → requests placed there


class ClassLedger:
    def __init__(self) -> None:
        self._classes: dict[str, _ClassRecord] = {}

    def _get(self, traffic_class: str) -> _ClassRecord:
        record = self._classes.get(traffic_class)
        if record is None:
            record = self._classes[traffic_class] = _ClassRecord()
        return record

    def on_routed(self, traffic_class: str, cell: str | None, spilled: bool) -> None:
        record = self._get(traffic_class)
        record.num_routed += 1
        record.num_spilled += spilled
        key = cell or ""
        record.cells[key] = record.cells.get(key, 0) + 1

    def on_refused(self, traffic_class: str) -> None:
        self._get(traffic_class).num_refused += 1

    def on_done(self, traffic_class: str, inflight, outcome: str) -> None:
        """``inflight``: the request_table.Inflight that ended; ``outcome``: completed | cancelled | failed."""
        record = self._get(traffic_class)
        if outcome == "completed":
            record.latency.record_served(
                inflight.arrival_ns, inflight.first_token_ns, inflight.last_token_ns, inflight.num_output_tokens
            )
        elif outcome == "failed":
            record.latency.num_failed += 1
        else:
            record.num_cancelled += 1

    def summary(self) -> dict[str, dict]:
        return {
            name: {
                **record.latency.summary(),
                "requests_routed": record.num_routed,
                "requests_spilled": record.num_spilled,
                "requests_refused": record.num_refused,
                "requests_cancelled": record.num_cancelled,
                "cells": dict(record.cells),
            }
            for name, record in sorted(self._classes.items())
        }
