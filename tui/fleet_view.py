"""What ``zoo top`` shows, without Textual: the latest FleetStats, rates from successive snapshots,
sparkline histories, sorting and filtering. The app only renders this (and tests drive it directly).

Rates divide counter deltas by the publisher's own clock (``FleetStats.sent_ns``), so a slow dashboard
never distorts them; a new ``started_ns`` (the control plane restarted) drops the baseline.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import msgspec

from transport.messages import FleetStats, LatencyFigure, NodeStats

HISTORY_LEN = 120  # sparkline points kept per series


@dataclass(frozen=True, slots=True)
class Column:
    key: str
    title: str
    sort_key: Callable[[NodeStats], object]
    cell: Callable[[NodeStats], str]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f}"


def _percent(fraction: float) -> str:
    """A decode roofline fraction as a percentage; "-" when the node has not measured one."""
    return f"{100 * fraction:.0f}" if fraction > 0 else "-"


def _none_last(value: float | None) -> tuple[bool, float]:
    return (value is None, value or 0.0)


COLUMNS: tuple[Column, ...] = (
    Column("node", "Node", lambda n: n.node_id, lambda n: n.node_id),
    Column("gpu", "GPU", lambda n: n.gpu_type, lambda n: n.gpu_type),
    Column("cell", "Cell", lambda n: n.cell, lambda n: n.cell),
    Column("power", "Power", lambda n: -n.power_score, lambda n: f"{n.power_score:.2f}"),
    Column("running", "Run", lambda n: -n.num_running, lambda n: str(n.num_running)),
    Column("waiting", "Wait", lambda n: -n.num_waiting, lambda n: str(n.num_waiting)),
    Column("kv", "KV %", lambda n: -n.kv_usage, lambda n: f"{100 * n.kv_usage:.0f}"),
    Column("swapped", "Swapped", lambda n: -n.num_swapped, lambda n: str(n.num_swapped)),
    Column("ttft_p50", "TTFT p50 ms", lambda n: _none_last(n.ttft_p50_s), lambda n: _ms(n.ttft_p50_s)),
    Column("ttft_p99", "TTFT p99 ms", lambda n: _none_last(n.ttft_p99_s), lambda n: _ms(n.ttft_p99_s)),
    Column("tpot_p50", "TPOT p50 ms", lambda n: _none_last(n.tpot_p50_s), lambda n: _ms(n.tpot_p50_s)),
    Column("tpot_p99", "TPOT p99 ms", lambda n: _none_last(n.tpot_p99_s), lambda n: _ms(n.tpot_p99_s)),
    Column("state", "State", lambda n: n.state, lambda n: describe_state(n.state, n.sleep_level)),
    Column("roofline", "Roof %", lambda n: -n.decode_roofline_fraction, lambda n: _percent(n.decode_roofline_fraction)),
    Column("drafter", "Drafter", lambda n: (not n.spec_drafter, n.spec_drafter), lambda n: describe_pair(n)),
)

# the latency series the dashboard plots: (figure name, title)
SERIES = (
    ("router_queue_wait", "queue wait"),
    ("router_to_node_hop", "router→node hop"),
    ("node_to_router_return", "node→router return"),
)
EBPF_SERIES = ("router_to_node_hop", "node_to_router_return")  # what the probes can see: messages between processes
SOURCES = ("app", "ebpf")
SOURCE_TITLES = {"app": "app", "ebpf": "eBPF"}


@dataclass(frozen=True, slots=True)
class Rates:
    requests_per_s: float = 0.0
    preemptions_per_s: float = 0.0
    rejected_per_s: float = 0.0
    migrations_per_s: float = 0.0
    kv_migrated_mb_per_s: float = 0.0  # MB (1e6 bytes) of KV moved by live migrations, per second


@dataclass(frozen=True, slots=True)
class CellSummary:
    cell: str
    num_up: int
    num_nodes: int
    num_running: int
    num_waiting: int
    worst_ttft_p99_s: float | None

    def describe(self) -> str:
        return (
            f"{self.cell or '-'}: {self.num_up}/{self.num_nodes} up, run {self.num_running}, wait {self.num_waiting}, "
            f"TTFT p99 {_ms(self.worst_ttft_p99_s)} ms"
        )


class FleetView:
    def __init__(self, history_len: int = HISTORY_LEN) -> None:
        self.stats: FleetStats | None = None
        self.rates = Rates()
        self.sort_index = 0
        self.sort_reverse = False
        self.cell_filter: str | None = None
        self.gpu_filter: str | None = None
        self.num_snapshots = 0
        self.num_restarts = 0  # control-plane restarts seen (a new started_ns)
        self._history: dict[tuple[str, str, str], deque[float]] = {}
        self._history_len = history_len

    # -- input --------------------------------------------------------------------------------------

    def update(self, stats: FleetStats) -> None:
        previous = self.stats
        if previous is not None and previous.started_ns != stats.started_ns:
            self.num_restarts += 1
            previous = None
        if previous is not None and stats.sent_ns > previous.sent_ns:
            dt_s = (stats.sent_ns - previous.sent_ns) / 1e9

            def rate(now: int, before: int) -> float:
                return max(now - before, 0) / dt_s

            routed, routed_before = (s.num_requests_total.get("routed", 0) for s in (stats, previous))
            rejected, rejected_before = (sum(s.rejected_requests_total.values()) for s in (stats, previous))
            self.rates = Rates(
                requests_per_s=rate(routed, routed_before),
                preemptions_per_s=rate(stats.num_preemptions_total, previous.num_preemptions_total),
                rejected_per_s=rate(rejected, rejected_before),
                migrations_per_s=rate(*(sum(s.migrations_total.values()) for s in (stats, previous))),
                kv_migrated_mb_per_s=rate(stats.kv_migrated_bytes_total, previous.kv_migrated_bytes_total) / 1e6,
            )
        elif previous is None:
            self.rates = Rates()
        for f in stats.latencies:
            key = (f.name, f.source, f.node_id)
            history = self._history.get(key)
            if history is None:
                history = self._history[key] = deque(maxlen=self._history_len)
            history.append(1e3 * (f.interval_p50_s or 0.0))
        self.stats = stats
        self.num_snapshots += 1

    # -- sorting and filtering ------------------------------------------------------------------------

    @property
    def sort_column(self) -> Column:
        return COLUMNS[self.sort_index]

    def cycle_sort(self) -> None:
        self.sort_index = (self.sort_index + 1) % len(COLUMNS)

    def reverse_sort(self) -> None:
        self.sort_reverse = not self.sort_reverse

    def cells(self) -> list[str]:
        return sorted({n.cell for n in self.stats.nodes}) if self.stats else []

    def gpu_types(self) -> list[str]:
        """The GPU types present in the cell filtered on (all cells when none)."""
        if self.stats is None:
            return []
        return sorted({n.gpu_type for n in self.stats.nodes if self.cell_filter in (None, n.cell)})

    def cycle_cell_filter(self) -> None:
        self.cell_filter = _next_of(self.cells(), self.cell_filter)

    def cycle_gpu_filter(self) -> None:
        self.gpu_filter = _next_of(self.gpu_types(), self.gpu_filter)

    def clear_filters(self) -> None:
        self.cell_filter = self.gpu_filter = None

    def rows(self) -> list[NodeStats]:
        if self.stats is None:
            return []
        nodes = [
            n
            for n in self.stats.nodes
            if (self.cell_filter is None or n.cell == self.cell_filter)
            and (self.gpu_filter is None or n.gpu_type == self.gpu_filter)
        ]
        key = self.sort_column.sort_key  # grouped by cell, then the sort column within each cell
        return sorted(nodes, key=lambda n: (n.cell, key(n), n.node_id), reverse=self.sort_reverse)

    def cell_summaries(self) -> list[CellSummary]:
        """One line per cell, in cell order: its live nodes, what runs and waits there, its worst TTFT P99."""
        if self.stats is None:
            return []
        summaries = []
        for cell in self.cells():
            nodes = [n for n in self.stats.nodes if n.cell == cell]
            p99s = [n.ttft_p99_s for n in nodes if n.ttft_p99_s is not None]
            summaries.append(
                CellSummary(
                    cell,
                    num_up=sum(n.state == "up" for n in nodes),
                    num_nodes=len(nodes),
                    num_running=sum(n.num_running for n in nodes),
                    num_waiting=sum(n.num_waiting for n in nodes),
                    worst_ttft_p99_s=max(p99s) if p99s else None,
                )
            )
        return summaries

    def node(self, node_id: str) -> NodeStats | None:
        if self.stats is None:
            return None
        return next((n for n in self.stats.nodes if n.node_id == node_id), None)

    # -- latency figures ----------------------------------------------------------------------------

    def figure(self, name: str, source: str, node_id: str = "") -> LatencyFigure | None:
        if self.stats is None:
            return None
        return next((f for f in self.stats.latencies if (f.name, f.source, f.node_id) == (name, source, node_id)), None)

    def history(self, name: str, source: str, node_id: str = "") -> list[float]:
        """Interval p50s in ms, oldest first (0.0 for an interval without samples)."""
        return list(self._history.get((name, source, node_id), ()))

    def figures_of(self, node_id: str) -> list[LatencyFigure]:
        if self.stats is None:
            return []
        return sorted((f for f in self.stats.latencies if f.node_id == node_id), key=lambda f: (f.name, f.source))


def _next_of(values: list[str], current: str | None) -> str | None:
    """None → values[0] → values[1] → … → None."""
    if not values:
        return None
    if current not in values:
        return values[0]
    i = values.index(current) + 1
    return values[i] if i < len(values) else None


def describe_figure(f: LatencyFigure | None) -> str:
    if f is None:
        return "no data"
    return f"p50 {_ms(f.p50_s)} ms · p99 {_ms(f.p99_s)} ms · n={f.count_total}"


def describe_pair(n: NodeStats) -> str:
    """A verifier's drafter and measured acceptance ("l4-1 78%"), "-" when it drafts with no fleet node."""
    if not n.spec_drafter:
        return "-"
    return n.spec_drafter + (f" {100 * n.spec_acceptance_rate:.0f}%" if n.spec_acceptance_rate >= 0 else "")


def describe_migrations(stats: FleetStats, rates: Rates) -> str:
    """Live migrations and the KV they moved (FleetStats totals, rates from successive snapshots)."""
    total = sum(stats.migrations_total.values())
    ok = sum(n for key, n in stats.migrations_total.items() if key.endswith(":ok"))
    return (
        f"migrations {total} ({ok} ok, {rates.migrations_per_s:.1f}/s)   "
        f"KV moved {stats.kv_migrated_bytes_total / 1e6:.1f} MB ({rates.kv_migrated_mb_per_s:.1f} MB/s)"
    )


def describe_status(stats: FleetStats, where: str) -> str:
    """The status line of a snapshot from the control plane at ``where``: draining, policy, nodes up, eBPF."""
    live = sum(n.state == "up" for n in stats.nodes)
    ebpf = f"eBPF: {stats.ebpf_status}" if stats.ebpf_status else "eBPF: not attached (app-level figures only)"
    nodes = f"{live}/{len(stats.nodes)} nodes up"
    draining = " · DRAINING (shutting down: new requests refused)" if stats.draining else ""
    return f"control plane {where}{draining} · policy {describe_router(stats)} · {nodes} · {ebpf}"


def describe_rates(view: FleetView) -> str:
    """The rates line (from the last two snapshots), then the fleet by cell."""
    stats, r = view.stats, view.rates
    assert stats is not None
    overload = " (OVERLOAD MODE)" if stats.overload_mode else ""  # hardware_aware's (router/overload.py)
    if stats.tpot_lost_redirects_total is not None:  # its goodput-first rule, on (router/policies/tpot_lost.py)
        overload += f"   TPOT lost causes moved {stats.tpot_lost_redirects_total}"
    tokenizing = f" ({stats.num_tokenizing} tokenizing)" if stats.num_tokenizing else ""  # long prompts, off the loop
    return (
        f"requests/s {r.requests_per_s:.1f}   preemptions/s {r.preemptions_per_s:.1f}   "
        f"rejected/s {r.rejected_per_s:.1f}   in flight {stats.num_inflight}{tokenizing}   "
        f"completed {stats.num_requests_total.get('completed', 0)}   "
        f"forecast late {stats.slo_forecast_late_share:.0%}{overload}   "
        f"{describe_migrations(stats, r)}\n"
        + "   ".join(s.describe() for s in view.cell_summaries())  # the fleet by cell
        + describe_capacity(stats)
    )


def describe_capacity(stats: FleetStats) -> str:
    """The capacity plan's line (controlplane/capacity_plan.py): each GPU type's nodes, and the nodes it wants where
    that differs ("H100 2 (wants 3)"); named by cell, and by model, where there are several; then the pools whose
    arrivals grow, by the growth forecast a node's start ahead ("arrivals x1.3": controlplane/demand_trend.py); then
    the requests held for a first node of a model ("2 waiting for a first node": controlplane/cold_start.py)."""
    if not stats.capacity:
        return ""
    many_cells = len({(model, cell) for model, cell, *_ in stats.capacity}) > 1
    many_models = len({model for model, *_ in stats.capacity}) > 1

    def named(model: str, cell: str, what: str) -> str:
        return "/".join([*([model] if many_models else []), *([cell] if many_cells else []), what])

    parts = [
        named(model, cell, f"{gpu_type} {nodes}") + (f" (wants {wanted})" if wanted != nodes else "")
        for model, cell, gpu_type, nodes, wanted in stats.capacity
    ]
    growing = [named(model, cell, f"arrivals x{growth:.2f}") for model, cell, growth in stats.capacity_growth]
    growing += [
        "/".join([*([model] if many_models else []), f"{n} waiting for a first node"])
        for model, n in sorted(stats.capacity_waiting.items())
    ]
    return "\ncapacity plan: " + ", ".join(parts) + ("; " + ", ".join(growing) if growing else "")


def describe_router(stats: FleetStats, width: int = 90) -> str:
    """The policy and the router knobs set off their defaults ("hardware_aware (slo_ttft_s=2.0, slo_tpot_s=0.05)"),
    cut to about ``width`` characters with the number left out ("…+3 more"), and its reloads once there were any
    ("reloaded 2×, 1 refused")."""
    reloads = stats.router_reloads
    if any(reloads.values()):
        refused = f", {reloads.get('refused', 0)} refused" if reloads.get("refused") else ""
        return f"{_describe_knobs(stats, width)}, reloaded {reloads.get('ok', 0)}×{refused}"
    return _describe_knobs(stats, width)


def _describe_knobs(stats: FleetStats, width: int) -> str:
    if not stats.router_knobs:
        return stats.policy
    shown: list[str] = []
    length = 0
    for name, value in stats.router_knobs.items():
        text = f"{name}={msgspec.json.encode(value).decode()}"
        if shown and length + len(text) > width:
            return f"{stats.policy} ({', '.join(shown)}, …+{len(stats.router_knobs) - len(shown)} more)"
        shown.append(text[:width])
        length += len(text) + 2
    return f"{stats.policy} ({', '.join(shown)})"


def describe_state(state: str, sleep_level: int) -> str:
    """The State cell: the routing state, and a sleeping node's level (POST /sleep: "asleep:1", "asleep:2"; "to sleep"
    while it waits for its requests), which is what drains it."""
    if sleep_level > 0:
        return f"asleep:{sleep_level}"
    return "to sleep" if sleep_level < 0 else state
