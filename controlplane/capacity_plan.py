"""How many nodes of each GPU type the fleet should have: the signal an autoscaler (KEDA, an HPA) scales each
GPU type's agent Deployment by. Sans-IO: the control plane feeds it the router's node views at every stats
snapshot; the fleet simulator can feed it the same views on virtual time.

A *variant* is one (model, cell, GPU type): the nodes of one type serving one model in one cell, as one
Deployment in Kubernetes (llm-d's workload-variant-autoscaler calls it the same). Traffic for a (model, cell)
goes to any of its variants, so a (model, cell) is planned as one pool of capacity:

    node i:  c_i = power_score (backends/gpu_table.py: relative serving power; H100 SXM 2.28, L4 0.24)
             ρ_i = max(kv_usage / kv_threshold,                   the KV cache it holds
                       backlog_s / (ttft_s · backlog_share),      the prefill work queued on it, in seconds of
                                                                  its own measured prefill speed, against the TTFT
                                                                  target (0 until its speed is measured)
                       num_waiting / queue_threshold)             requests a full batch or KV holds back (WVA's)
    pool:    load L = Σ ρ_i c_i        capacity C = Σ c_i        utilisation U = L / C
             wanted capacity W = L · g / target_utilisation, g: the growth of the pool's arrivals forecast
                                                           forecast_lead_s ahead (controlplane/demand_trend.py; 1
                                                           while they hold steady or fall)

    W > C: add nodes of the variant whose capacity costs least (gpu_cost / c), up to its max_nodes, then the next
    W < C: take nodes off the variant whose capacity costs most, while what is left still covers W, to min_nodes

Scale-up is published at once; scale-down only once every raw plan over the last ``scale_down_window_s`` agreed
(Kubernetes' HPA scale-down stabilisation, whose default is 300 s), so a lull does not shed nodes that the next
burst needs. The forecast makes a ramp's scale-up early by the time a node takes to join, rather than late by it:
the load of now says what the pool needs now, the arrivals' trend what it will need by the time a node asked for
now serves. The anchor's rule, for comparison, is controlplane/capacity_wva.py: it counts every replica alike
and steps one replica at a time.

Nodes counted: up and asleep (a sleeping node is a replica its Deployment has; the next request wakes it, with
no load until then). Draining, leaving, suspect and dead nodes are not capacity: they are on their way out.

Scale to zero and back: a variant whose min_nodes is 0 may be shed to none once its pool has had no arrivals for the
scale-down window (a pool asked for anything within it keeps at least one node published: its cheapest capacity;
KEDA's cooldownPeriod holds a Deployment's last replica the same way). The plan remembers such a variant once its
last node is gone (its node capacity, MAX_IDLE_VARIANTS at most) and goes on planning it, desired 0; the control
plane goes on listing its model. A request for the pool then is refused for want of capacity (503, Retry-After),
which counts as an arrival, so the plan asks for nodes again: as much capacity as the pool held per arrival a second
while its load sized it, times the rate of those arrivals now (controlplane/wake_sizing.py); at least one node of the
pool's cheapest capacity, held while a request waits for it (``waiting``). A variant whose min_nodes is above 0 is
forgotten when its last node goes, as before. A variant first seen (a fresh fleet, a restarted control plane) is held
for a window before any scale-down.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.capacity_variants import DeclaredVariant, declared_variants
from controlplane.demand_trend import DemandTrend
from controlplane.router.policy import NodeView
from controlplane.wake_sizing import WAKE_RATE_SPAN_S, WakeSizing


@dataclass(slots=True)
class CapacityPlanConfig:
    """kv_threshold: KV use at which a node counts as full (llm-d WVA's kvCacheThreshold default, 0.8).
    queue_threshold: waiting requests at which a node counts as full (WVA's queueLengthThreshold default, 5).
    backlog_share: the share of the TTFT target a node's queued prefill may take before it counts as full.
    target_utilisation: the pool's planned load / capacity (the rest is headroom for bursts).
    scale_down_window_s: a scale-down is published only when every raw plan in this window wanted it.
    gpu_cost: cost of one node of a GPU type (its hello's gpu_type, any case), any unit (per hour, say); a type not
        listed costs ``default_cost``.
        Equal costs (the default) add the strongest type first: the fewest nodes for the capacity.
    min_nodes / max_nodes: per GPU type (a type not listed: ``default_min_nodes``, no maximum).
    forecast_lead_s: how long a node takes from being asked for to serving (a pod scheduled, its weights loaded):
        the arrivals' growth is projected that far ahead; 0: no forecast, the plan follows the load of now.
    trend_window_s: the arrivals the growth is measured over (controlplane/demand_trend.py); at least
        forecast_lead_s, so the growth is at most 1 + 8/3 (twice the lead, the default ratio: at most 2.33).
    cold_start_wait_s: how long a request for a model the plan holds at zero nodes may wait for its first node
        (controlplane/cold_start.py); 0: refused at once (503, Retry-After).
    cold_start_max_waiting: the requests that may wait for a first node of one model at once; more are refused at
        once (Knative's activator queues 10,000 per revision before its 503s: knative/serving
        pkg/activator/net/throttler.go, breakerQueueDepth; here fewer, for each holds its parsed prompt).
    """

    kv_threshold: float = 0.8
    queue_threshold: int = 5
    backlog_share: float = 0.5
    target_utilisation: float = 0.7
    scale_down_window_s: float = 300.0
    gpu_cost: dict[str, float] = field(default_factory=dict)
    default_cost: float = 1.0
    min_nodes: dict[str, int] = field(default_factory=dict)
    max_nodes: dict[str, int] = field(default_factory=dict)
    default_min_nodes: int = 1
    forecast_lead_s: float = 60.0
    trend_window_s: float = 120.0
    cold_start_wait_s: float = 300.0
    cold_start_max_waiting: int = 1000
    variants: tuple[DeclaredVariant, ...] = ()  # declared: planned before any node of them joins

    def __post_init__(self) -> None:
        for name in ("gpu_cost", "min_nodes", "max_nodes"):  # GPU types are matched without case: "L4" = "l4"
            setattr(self, name, {k.lower(): v for k, v in getattr(self, name).items()})
        for name in ("kv_threshold", "backlog_share", "target_utilisation"):
            value = getattr(self, name)
            if not 0 < value <= 1:
                raise ValueError(f"capacity plan: {name} must be in (0, 1], got {value!r}")
        if self.cold_start_max_waiting < 0:
            raise ValueError(f"capacity plan: cold_start_max_waiting must be >= 0, got {self.cold_start_max_waiting!r}")
        if self.queue_threshold < 1:
            raise ValueError(f"capacity plan: queue_threshold must be >= 1, got {self.queue_threshold!r}")
        if not 0 <= self.cold_start_wait_s < math.inf:
            raise ValueError(f"capacity plan: cold_start_wait_s must be >= 0, got {self.cold_start_wait_s!r}")
        if not 0 <= self.scale_down_window_s < math.inf:
            raise ValueError(f"capacity plan: scale_down_window_s must be >= 0, got {self.scale_down_window_s!r}")
        if not 0 <= self.forecast_lead_s <= self.trend_window_s < math.inf or self.trend_window_s <= 0:
            raise ValueError(  # a trend measured over less than the lead is not projected that far (noise, x3.7+)
                f"capacity plan: forecast_lead_s must be >= 0 and at most trend_window_s, which must be > 0; got "
                f"{self.forecast_lead_s!r}, {self.trend_window_s!r}"
            )
        if self.default_min_nodes < 0:
            raise ValueError(f"capacity plan: default_min_nodes must be >= 0, got {self.default_min_nodes!r}")
        for gpu_type, cost in [*self.gpu_cost.items(), ("default", self.default_cost)]:
            if not 0 < cost < math.inf:
                raise ValueError(f"capacity plan: the cost of {gpu_type} must be > 0, got {cost!r}")
        for gpu_type, n in [*self.min_nodes.items(), *self.max_nodes.items()]:
            if n < 0:
                raise ValueError(f"capacity plan: node counts must be >= 0, got {gpu_type}={n!r}")
        for gpu_type, top in self.max_nodes.items():
            if top < self.min_nodes.get(gpu_type, 0):
                raise ValueError(f"capacity plan: {gpu_type}'s max_nodes {top} is below its min_nodes")

    def cost(self, gpu_type: str) -> float:
        return self.gpu_cost.get(gpu_type.lower(), self.default_cost)

    def bounds(self, gpu_type: str) -> tuple[int, int | None]:
        low = self.min_nodes.get(gpu_type.lower(), self.default_min_nodes)
        high = self.max_nodes.get(gpu_type.lower())
        return (low if high is None else min(low, high)), high

    @classmethod
    def from_table(cls, table: Mapping) -> CapacityPlanConfig:
        """From a TOML table (``--capacity-plan FILE``'s ``[capacity]``); ValueError on unknown or mistyped keys."""
        if not isinstance(table, Mapping):
            raise ValueError(f"capacity plan: a table of settings is needed, got {type(table).__name__}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(table) - known)
        if unknown:
            raise ValueError(f"capacity plan: unknown keys {unknown}; known: {sorted(known)}")
        values = {}
        for key, value in table.items():
            if key == "variants":
                values[key] = declared_variants(value)
            elif key in ("gpu_cost", "min_nodes", "max_nodes"):
                kind = float if key == "gpu_cost" else int
                if not isinstance(value, Mapping) or not all(
                    isinstance(k, str) and _is_number(v, kind) for k, v in value.items()
                ):
                    raise ValueError(f"capacity plan: {key} must be a table of GPU type = {kind.__name__}")
                values[key] = {k: kind(v) for k, v in value.items()}
            else:
                kind = type(getattr(cls(), key))
                if not _is_number(value, kind):
                    raise ValueError(f"capacity plan: {key} must be a {kind.__name__}, got {value!r}")
                values[key] = kind(value)
        return cls(**values)


def _is_number(value: object, kind: type) -> bool:
    if isinstance(value, bool):
        return False
    if kind is int:
        return isinstance(value, int)
    return isinstance(value, float) or (isinstance(value, int) and abs(value) < 2**1023)  # float() would overflow


@dataclass(frozen=True, slots=True)
class PlanNode:
    """What the planner reads of one node (``plan_nodes`` builds these from the router's views)."""

    node_id: str
    model: str
    cell: str
    gpu_type: str
    power_score: float
    kv_usage: float
    num_waiting: int
    queued_prefill_tokens: int  # its last report's, plus those routed to it since
    prefill_tok_per_s: float  # 0: not measured yet


@dataclass(frozen=True, slots=True)
class VariantPlan:
    """One (model, cell, GPU type): its nodes now and the nodes it should have."""

    model: str
    cell: str
    gpu_type: str
    num_nodes: int
    desired_nodes: int  # published: scale-ups at once, scale-downs after the window
    raw_desired_nodes: int  # this snapshot's plan, before the window
    node_capacity: float  # mean power_score of its nodes
    cost: float


@dataclass(frozen=True, slots=True)
class PoolPlan:
    """One (model, cell): its load and capacity in power-score units, and its variants."""

    model: str
    cell: str
    load: float
    capacity: float
    wanted_capacity: float
    variants: tuple[VariantPlan, ...]
    # the forecast growth of its arrivals (controlplane/demand_trend.py): wanted = load · growth / target
    growth: float = 1.0

    @property
    def utilisation(self) -> float:
        return self.load / self.capacity if self.capacity > 0 else 0.0


MAX_NODES_ADDED = 1_000_000  # nodes of one type one plan may add: a finite answer whatever the figures
MAX_IDLE_VARIANTS = 256  # variants remembered at zero nodes (the oldest forgotten past it): a bounded memory
MAX_NODE_LOAD = 100.0  # ρ is capped here: a report's absurd figure (a queue of 10^18) must not ask for 10^17 nodes


def node_load(node: PlanNode, ttft_s: float, config: CapacityPlanConfig) -> float:
    """ρ: the node's load as a share of what it holds before it counts as full (can exceed 1, at most
    MAX_NODE_LOAD). A figure that is not a finite number (a broken report) counts as nothing."""
    kv = _finite(node.kv_usage) / config.kv_threshold
    queue = max(node.num_waiting, 0) / config.queue_threshold  # held back by a full batch or KV, whatever the speed
    rate = _finite(node.prefill_tok_per_s)
    if rate > 0:
        backlog_s = max(node.queued_prefill_tokens, 0) / rate
        queue = max(queue, backlog_s / (ttft_s * config.backlog_share))
    return min(max(kv, queue), MAX_NODE_LOAD)


def _finite(value: float) -> float:
    """``value`` when it is a finite number at least 0, else 0."""
    return value if 0 < value < math.inf else 0.0


def _power(value: float) -> float:
    """A hello's power score (an A100-80GB is 1.0); one outside [MIN_POWER_SCORE, MAX_POWER_SCORE] is a broken hello,
    and counts as none (summed over a pool, such figures would overflow to infinity; divided by, to nodes past any
    integer a float holds)."""
    return value if MIN_POWER_SCORE <= value <= MAX_POWER_SCORE else 0.0


MIN_POWER_SCORE, MAX_POWER_SCORE = 1e-6, 1e6


def plan_nodes(views: Iterable[NodeView], rows: Mapping[str, Mapping]) -> list[PlanNode]:
    """``views``: the registry's; ``rows``: ControlPlane.stats()'s node rows (their ``state`` and ``sleep_level``):
    the nodes that are capacity are those up, and those asleep (drained to sleep, woken by the next request)."""
    counted = {
        node_id
        for node_id, row in rows.items()
        if row.get("state") == "up" or (row.get("state") == "draining" and row.get("sleep_level"))
    }
    return [
        PlanNode(
            v.node_id,
            v.model,
            v.cell,
            v.gpu_type,
            v.power_score,
            v.kv_usage,
            v.num_waiting,
            v.queued_prefill_tokens + v.inflight_prefill_tokens,
            v.prefill_tok_per_s,
        )
        for v in views
        if v.node_id in counted
    ]


class CapacityPlanner:
    """``plan(now_s, nodes, ttft_s, arrivals)`` → one PoolPlan per (model, cell), in key order. ``arrivals``: the
    requests that asked each (model, cell) so far, placed or refused for want of its capacity, a counter (None: no
    forecast; a cell of None: requests of the model that named no cell, counted for its first pool, live or idle).
    Keeps only the raw plans of the last ``scale_down_window_s`` per variant and the arrivals of the last
    ``trend_window_s`` per pool (at most one sample per second each), and the variants at zero nodes that may scale
    from zero (``idle``)."""

    def __init__(self, config: CapacityPlanConfig | None = None) -> None:
        self.config = config or CapacityPlanConfig()
        self._history: dict[tuple[str, str, str], deque[tuple[float, int]]] = {}
        self._trends: dict[tuple[str, str], DemandTrend] = {}
        self._last_power: dict[tuple[str, str, str], float] = {}  # each variant with nodes at the last plan: its c
        self.idle: dict[tuple[str, str, str], float] = {}  # (model, cell, GPU type) at zero nodes → its node capacity
        self._asked: dict[tuple[str, str], tuple[int, float]] = {}  # each pool's arrivals, and when they last rose
        self.waiting: dict[str, int] = {}  # model → requests waiting for its first node (controlplane/cold_start.py)
        self._wakes: dict[tuple[str, str], WakeSizing] = {}  # each pool's capacity held per arrival a second

    def _at_zero(self) -> dict[tuple[str, str], dict[str, float]]:
        """Each pool's variants planned with no node to measure → their node capacity: declared in the config
        (controlplane/capacity_variants.py), or their last nodes' (``idle``, which wins)."""
        pools: dict[tuple[str, str], dict[str, float]] = {}
        for (model, cell, gpu_type), power in [
            *((v.key, v.power_score) for v in self.config.variants),
            *self.idle.items(),
        ]:
            pools.setdefault((model, cell), {})[gpu_type] = power
        return pools

    def plan(
        self,
        now_s: float,
        nodes: Iterable[PlanNode],
        ttft_s: float,
        arrivals: Mapping[tuple[str, str | None], int] | None = None,
    ) -> tuple[PoolPlan, ...]:
        if not ttft_s > 0:
            raise ValueError(f"capacity plan: the TTFT target must be > 0, got {ttft_s!r}")
        pools: dict[tuple[str, str], list[PlanNode]] = {}
        for node in nodes:
            pools.setdefault((node.model, node.cell), []).append(node)
        self._remember_idle(pools)
        at_zero = self._at_zero()
        keys = sorted(set(pools) | set(at_zero))
        arrivals = None if arrivals is None else _attributed(arrivals, keys)
        plans = tuple(
            self._plan_pool(
                now_s,
                key,
                pools.get(key, []),
                at_zero.get(key, {}),
                ttft_s,
                self._trend(now_s, key, arrivals),
                self._was_asked(now_s, key, arrivals),
            )
            for key in keys
        )
        seen = {(p.model, p.cell, v.gpu_type) for p in plans for v in p.variants}
        for key in [k for k in self._history if k not in seen]:  # a variant gone: its window goes too
            del self._history[key]
        for store in (self._trends, self._asked, self._wakes):  # a pool gone: its arrivals go too
            for key in [k for k in store if k not in keys]:
                del store[key]
        return plans

    def served_models(self, live: Iterable[str]) -> list[str]:
        """``live`` (the models some node serves), then those of the variants at zero nodes that may scale from
        zero: still served, by nodes to come (a request for one is refused for want of capacity, and asks for one)."""
        declared = (v.model for v in self.config.variants)
        return list(dict.fromkeys([*live, *(model for model, _, _ in self.idle), *declared]))

    def cold_start_wait_s(self, model: str) -> float:
        """How long a request for ``model`` may wait for a node: ``cold_start_wait_s`` while the plan holds a variant
        of it at zero nodes or declares one, else 0 (a model with no live node otherwise is refused at once)."""
        planned = any(m == model for m, _, _ in self.idle) or any(v.model == model for v in self.config.variants)
        return self.config.cold_start_wait_s if planned else 0.0

    def _remember_idle(self, pools: Mapping[tuple[str, str], list[PlanNode]]) -> None:
        """A variant of min_nodes 0 whose nodes are all gone is remembered (its last node capacity); one with nodes
        again, or whose min_nodes is now above 0, is not idle."""
        live: dict[tuple[str, str, str], list[float]] = {}
        for key, nodes in pools.items():
            for node in nodes:
                live.setdefault((*key, node.gpu_type), []).append(_power(node.power_score))
        for variant, power in self._last_power.items():  # had nodes at the last plan, has none now
            if variant not in live and power > 0 and self.config.bounds(variant[2])[0] == 0:
                self.idle.pop(variant, None)
                self.idle[variant] = power  # the newest last: the oldest is forgotten first
        for variant in [v for v in self.idle if v in live or self.config.bounds(v[2])[0] > 0]:
            del self.idle[variant]
        while len(self.idle) > MAX_IDLE_VARIANTS:
            del self.idle[next(iter(self.idle))]
        self._last_power = {v: sum(ps) / len(ps) for v, ps in live.items()}

    def _was_asked(self, now_s: float, key: tuple[str, str], arrivals: Mapping[tuple[str, str], int] | None) -> bool:
        """Whether the pool was asked for anything (requests placed, or refused for want of its capacity) within the
        scale-down window, whatever the call rate, or a request waits for a node of its model now."""
        if self.waiting.get(key[0], 0) > 0:
            return True
        if arrivals is None or key not in arrivals:
            return False
        before, rose_s = self._asked.get(key, (0, -math.inf))
        if arrivals[key] != before:
            rose_s = now_s if arrivals[key] > before else rose_s  # a counter that went back: a restart, not a request
            self._asked[key] = (arrivals[key], rose_s)
        return now_s - rose_s <= self.config.scale_down_window_s

    def _trend(
        self, now_s: float, key: tuple[str, str], arrivals: Mapping[tuple[str, str], int] | None
    ) -> DemandTrend | None:
        """The pool's arrivals, sampled now (None: no arrivals given for it)."""
        if arrivals is None or key not in arrivals:
            return None
        trend = self._trends.get(key)
        if trend is None:
            trend = self._trends[key] = DemandTrend(self.config.trend_window_s, self.config.forecast_lead_s)
        trend.observe(now_s, arrivals[key])
        return trend

    def summary(
        self,
        now_s: float,
        views: Iterable[NodeView],
        rows: Mapping[str, Mapping],
        ttft_s: float,
        arrivals: Mapping[tuple[str, str | None], int] | None = None,
    ) -> list:
        """``plan`` of the nodes counted (``plan_nodes``), as plain rows (``capacity_summary``), with the requests
        waiting for a first node of each pool's model."""
        return capacity_summary(self.plan(now_s, plan_nodes(views, rows), ttft_s, arrivals), self.waiting)

    def _plan_pool(
        self,
        now_s: float,
        key: tuple[str, str],
        nodes: list[PlanNode],
        at_zero: Mapping[str, float],
        ttft_s: float,
        trend: DemandTrend | None,
        asked: bool,
    ) -> PoolPlan:
        config = self.config
        growth = 1.0 if trend is None else trend.growth()
        by_type: dict[str, list[PlanNode]] = {t: [] for t in at_zero}  # GPU type → its nodes (none: at zero)
        for node in nodes:
            by_type.setdefault(node.gpu_type, []).append(node)
        power = {t: sum(_power(n.power_score) for n in ns) / len(ns) if ns else at_zero[t] for t, ns in by_type.items()}
        count = {t: len(ns) for t, ns in by_type.items()}
        load = sum(node_load(n, ttft_s, config) * _power(n.power_score) for n in nodes)
        capacity = sum(power[t] * count[t] for t in by_type)
        wanted = load * growth / config.target_utilisation
        raw = _resize(dict(count), power, capacity, wanted, config)
        if trend is not None:
            wake = self._wakes.setdefault(key, WakeSizing())
            if capacity > 0:  # learnt while the pool's load sizes it: the plan wants exactly what it holds
                wake.observe(now_s, capacity, trend.rate(), raw == count)
            elif (woken := wake.capacity(trend.rate(WAKE_RATE_SPAN_S))) > wanted:  # at zero: sized by who asks now
                wanted = woken
                raw = _resize(dict(count), power, capacity, wanted, config)
        desired = {t: self._stabilise(now_s, (*key, t), raw[t], count[t]) for t in sorted(by_type)}
        if asked and not any(desired.values()):  # asked for within the window: its cheapest capacity, one node
            desired = _one_node(desired, power, config)
        variants = [
            VariantPlan(*key, t, count[t], desired[t], raw[t], power[t], config.cost(t)) for t in sorted(by_type)
        ]
        return PoolPlan(*key, load, capacity, wanted, tuple(variants), growth)

    def _stabilise(self, now_s: float, key: tuple[str, str, str], raw: int, held: int) -> int:
        """The most nodes any raw plan in the window wanted: up at once, down once the whole window agrees. A variant
        first seen counts its ``held`` nodes as wanted then: a fresh fleet, or one a restarted control plane finds,
        is not shed before a window has shown its nodes unneeded."""
        window = self._history.get(key)
        if window is None:
            window = self._history[key] = deque([(now_s, held)] if self.config.scale_down_window_s > 0 else [])
        while window and window[0][0] < now_s - self.config.scale_down_window_s:
            window.popleft()
        if window and now_s - window[-1][0] < 1.0:  # one entry per second: bounded whatever the call rate
            window[-1] = (window[-1][0], max(window[-1][1], raw))
        else:
            window.append((now_s, raw))
        return max(n for _, n in window)


def _resize(
    count: dict[str, int], power: dict[str, float], capacity: float, wanted: float, config: CapacityPlanConfig
) -> dict[str, int]:
    """Node counts per type for ``wanted`` capacity: add the cheapest capacity, shed the dearest (ties: the
    type name, for a plan that does not change from call to call)."""
    usable = [t for t in count if power[t] > 0]

    def cost_per_power(t: str) -> float:
        return config.cost(t) / power[t]

    for gpu_type in usable:  # a type below its min_nodes (declared, or its nodes still joining): raised to it
        low, _ = config.bounds(gpu_type)
        capacity += max(low - count[gpu_type], 0) * power[gpu_type]
        count[gpu_type] = max(count[gpu_type], low)
    for gpu_type in sorted(usable, key=lambda t: (cost_per_power(t), t)):  # grow: cheapest first
        if capacity >= wanted:
            break
        _, high = config.bounds(gpu_type)
        room = math.inf if high is None else max(high - count[gpu_type], 0)
        need = (wanted - capacity) / power[gpu_type] - 1e-9
        add = min(math.ceil(need) if need < MAX_NODES_ADDED else MAX_NODES_ADDED, room)  # NaN, inf: the most
        count[gpu_type] += int(add)
        capacity += add * power[gpu_type]
    for gpu_type in sorted(usable, key=lambda t: (-cost_per_power(t), t)):  # shrink: dearest first
        low, high = config.bounds(gpu_type)
        if high is not None and count[gpu_type] > high:  # over its maximum: shed whatever the load
            capacity -= (count[gpu_type] - high) * power[gpu_type]
            count[gpu_type] = high
        spare = math.floor((capacity - wanted) / power[gpu_type] + 1e-9)
        shed = max(min(spare, count[gpu_type] - low), 0)
        count[gpu_type] -= shed
        capacity -= shed * power[gpu_type]
    for gpu_type in count:  # a type with no measured power: held at its bounds
        if gpu_type not in usable:
            low, high = config.bounds(gpu_type)
            count[gpu_type] = max(low, count[gpu_type] if high is None else min(count[gpu_type], high))
    return count


def _attributed(
    arrivals: Mapping[tuple[str, str | None], int], keys: list[tuple[str, str]]
) -> dict[tuple[str, str], int]:
    """``arrivals`` with those of no cell added to the first planned pool of their model (none: dropped)."""
    out = {key: n for key, n in arrivals.items() if key[1] is not None}
    for (model, cell), n in arrivals.items():
        if cell is None:
            pool = next((key for key in keys if key[0] == model), None)
            if pool is not None:
                out[pool] = out.get(pool, 0) + n
    return out


def _one_node(count: dict[str, int], power: dict[str, float], config: CapacityPlanConfig) -> dict[str, int]:
    """``count`` (all 0) with one node of the type whose capacity costs least and whose max_nodes allows one."""
    usable = [t for t in count if power[t] > 0 and config.bounds(t)[1] != 0]
    if usable:
        count[min(usable, key=lambda t: (config.cost(t) / power[t], t))] = 1
    return count


def capacity_summary(plans: Iterable[PoolPlan], waiting: Mapping[str, int] | None = None) -> list[dict]:
    """Plain rows for ControlPlane.stats()["capacity"] (the exporter and the dashboard read these). ``waiting``: model
    → requests waiting for a first node of it (controlplane/cold_start.py), told in each of its pools' rows."""
    waiting = waiting or {}
    return [
        {
            "model": p.model,
            "cell": p.cell,
            "waiting": waiting.get(p.model, 0),
            "load": p.load,
            "capacity": p.capacity,
            "wanted_capacity": p.wanted_capacity,
            "utilisation": p.utilisation,
            "growth": p.growth,
            "variants": [
                {
                    "gpu_type": v.gpu_type,
                    "nodes": v.num_nodes,
                    "desired": v.desired_nodes,
                    "raw_desired": v.raw_desired_nodes,
                    "node_capacity": v.node_capacity,
                    "cost": v.cost,
                }
                for v in p.variants
            ],
        }
        for p in plans
    ]


def load_capacity_plan(path: str) -> CapacityPlanConfig:
    """``--capacity-plan FILE``: its ``[capacity]`` table (a zoo.toml), else the whole file; ValueError naming the
    file when it is not TOML or a key is unknown or of the wrong type."""
    from controlplane.toml_file import load_toml

    table = load_toml(path)
    try:
        return CapacityPlanConfig.from_table(table.get("capacity", table))
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
