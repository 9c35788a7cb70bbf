"""Latency figures for the stats stream: application samples in sliding windows, and eBPF histograms.

Two sources, one shape (transport.messages.LatencyFigure), so the dashboard can put them side by side::

    source "app"   ControlPlane.take_events() samples ─► LatencyWindows.add() ─► figures()
    source "ebpf"  ZooProbe.read() snapshot (cumulative histograms) ─► EbpfFigures.update() ─► figures

The eBPF snapshot contract is what ``observe.ebpf.ZooProbe.read()`` returns; the parts used here::

    {
      "status": "attached",                                    # optional (default: "attached (<hop_mode>)")
      "hop_mode": "wire" | "libzmq",
      "hops_by_node": {"node-a": {"router->agent": HIST,       #   → name "router_to_node_hop"
                                  "agent->router": HIST}},     #   → name "node_to_router_return"
      "sched": {"node-a": {"loop_runq_delay": HIST, "loop_offcpu": HIST, ...}}
                                                               #   → "engine_runq_delay", "engine_offcpu"
    }
    HIST = observe.ebpf.histogram.Histogram.to_dict(): {"count", "p50_ns", "p99_ns", "buckets": [[low_ns, high_ns, n]]}

Node keys may be node ids or ints (then shown as "#<int>"). Interval figures come from the difference of
two successive cumulative snapshots' buckets.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Mapping

from transport.messages import LatencyFigure

WINDOW_SAMPLES = 2048  # p50/p99 of a figure are over at most this many recent samples
FLEET = ""  # node_id of a fleet-wide figure

EBPF_HOP_NAMES = {"router->agent": "router_to_node_hop", "agent->router": "node_to_router_return"}
EBPF_SCHED_NAMES = {"loop_runq_delay": "engine_runq_delay", "loop_offcpu": "engine_offcpu"}


def percentile(ordered: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of an already sorted list; None when empty."""
    if not ordered:
        return None
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


class _Series:
    __slots__ = ("interval", "total", "window")

    def __init__(self) -> None:
        self.window: deque[float] = deque(maxlen=WINDOW_SAMPLES)
        self.interval: list[float] = []
        self.total = 0


class LatencyWindows:
    """Application-level samples by (name, node), plus a fleet-wide series per name."""

    def __init__(self) -> None:
        self._series: dict[tuple[str, str], _Series] = {}

    def add(self, name: str, node_id: str, value_s: float) -> None:
        for key in ((name, node_id), (name, FLEET)):
            series = self._series.get(key)
            if series is None:
                series = self._series[key] = _Series()
            series.window.append(value_s)
            series.interval.append(value_s)
            series.total += 1

    def figures(self) -> list[LatencyFigure]:
        """Every series' figure; starts a new interval."""
        out = []
        for (name, node_id), s in sorted(self._series.items()):
            window = sorted(s.window)
            interval = sorted(s.interval)
            out.append(
                LatencyFigure(
                    name=name,
                    source="app",
                    node_id=node_id,
                    count_total=s.total,
                    p50_s=percentile(window, 50),
                    p99_s=percentile(window, 99),
                    interval_count=len(interval),
                    interval_p50_s=percentile(interval, 50),
                )
            )
            s.interval = []
        return out


def _bucket_percentile(buckets: list[tuple[float, float, int]], q: float) -> float | None:
    """Value at quantile q (0..1) of [low, high, count] buckets sorted by low, interpolated inside a bucket."""
    total = sum(c for _, _, c in buckets)
    if total <= 0:
        return None
    rank, seen = q * total, 0
    for low, high, c in buckets:
        if c > 0 and seen + c >= rank:
            return low + (high - low) * max(rank - seen, 0) / c
        seen += c
    return buckets[-1][1]


def _buckets(hist: Mapping) -> dict[tuple[float, float], int]:
    return {(float(b[0]), float(b[1])): int(b[2]) for b in hist.get("buckets", ())}


class EbpfFigures:
    """Turns successive cumulative eBPF snapshots into LatencyFigures (source "ebpf")."""

    def __init__(self) -> None:
        self._previous: dict[tuple[str, str], dict[tuple[float, float], int]] = {}
        self.status = ""

    def update(self, snapshot: Mapping | None) -> list[LatencyFigure]:
        if not snapshot:
            self.status = ""
            return []
        self.status = str(snapshot.get("status", f"attached ({snapshot.get('hop_mode', 'ebpf')})"))
        series: dict[tuple[str, str], dict[tuple[float, float], int]] = {}

        def add(name: str, node, hist: Mapping) -> None:
            node_id = node if isinstance(node, str) else f"#{node}"
            for key in ((name, node_id), (name, FLEET)):
                merged = series.setdefault(key, {})
                for bounds, n in _buckets(hist).items():
                    merged[bounds] = merged.get(bounds, 0) + n

        for node, directions in snapshot.get("hops_by_node", {}).items():
            for direction, hist in directions.items():
                add(EBPF_HOP_NAMES.get(direction, direction), node, hist)
        for node, kinds in snapshot.get("sched", {}).items():
            for kind, name in EBPF_SCHED_NAMES.items():
                if isinstance(kinds.get(kind), Mapping):
                    add(name, node, kinds[kind])
        out = []
        for (name, node_id), counts in sorted(series.items()):
            previous = self._previous.get((name, node_id), {})
            total = sorted((lo, hi, n) for (lo, hi), n in counts.items())
            # a probe that restarted has smaller counts than before: its whole snapshot is the interval
            restarted = any(n < previous.get(b, 0) for b, n in counts.items())
            delta = total if restarted else [(lo, hi, n - previous.get((lo, hi), 0)) for lo, hi, n in total]
            interval_count = sum(n for _, _, n in delta)
            p50, p99, ip50 = (_bucket_percentile(total, 0.5), _bucket_percentile(total, 0.99),
                              _bucket_percentile(delta, 0.5))  # fmt: skip
            out.append(
                LatencyFigure(
                    name=name,
                    source="ebpf",
                    node_id=node_id,
                    count_total=sum(n for _, _, n in total),
                    p50_s=None if p50 is None else p50 / 1e9,
                    p99_s=None if p99 is None else p99 / 1e9,
                    interval_count=interval_count,
                    interval_p50_s=None if ip50 is None else ip50 / 1e9,
                )
            )
        self._previous = series
        return out
