"""Autoscaling in the fleet simulator: the fleet's nodes are a pool of GPUs of each type, of which an autoscaler keeps
some joined, adds more (each joins ``provision_s`` after it is asked for: a pod scheduled, weights loaded) and drains
others (routed nothing new, they leave once their requests end). Two rules drive it, each as its users run it:

    zoo   controlplane/capacity_plan.py, planned at every sample (the control plane plans at every stats snapshot)
          with the requests that asked its pool so far, placed or refused for want of capacity (its arrivals'
          forecast: controlplane/demand_trend.py),
          scaled every 15 s (KEDA's pollingInterval in deploy/k8s/43-autoscaling.yaml) to the published plan, at most
          one node shed a minute per GPU type (the ScaledObject's HPA scaleDown policy)
    wva   controlplane/capacity_wva.py: each replica's KV use and waiting requests as their peak over the last
          minute (Prometheus max_over_time[1m]), every 60 s (its reconcile), no scale-up while a replica is pending

Both are given the same GPU costs, the same pool and the same start. Sans-IO: ``FleetSimulator`` calls ``tick`` every
``sample_s`` of virtual time and ``join`` when a node's provisioning ends.

A request refused for want of a node, of a model the plan holds at zero nodes, is held as the control plane holds it
(controlplane/cold_start.py): counted in the plan's ``waiting`` (its pool stays asked for), tried again each time a
node joins (``release``; the simulator places it again), and each ``HELD_RETRY_S`` while the pool's queues refuse it
once a node joined; refused only past ``cold_start_wait_s`` from its first refusal. Its first refusal is its pool's
arrival, its later tries are not. Its TTFT counts from its arrival, so the wait shows.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from controlplane.capacity_plan import CapacityPlanConfig, CapacityPlanner, plan_nodes
from controlplane.capacity_wva import WvaReplica, wva_targets
from controlplane.cold_start import HELD_RETRY_S
from controlplane.registry import NodeState
from transport.messages import ClientGenerate, ErrorCode, ErrorReply

RULES = ("zoo", "wva")


@dataclass
class AutoscaleConfig:
    """rule: "zoo" or "wva". start_nodes: each GPU type's nodes joined at the start (a type not listed: 1).
    ttft_s: the router's TTFT target (the zoo plan's backlog term reads it).
    count_unserved: the zoo plan's arrivals include the requests refused for want of capacity, as the control plane
        counts them; False: only those placed (an ablation: the rule before refused demand counted)."""

    rule: str
    ttft_s: float
    plan: CapacityPlanConfig = field(default_factory=CapacityPlanConfig)
    start_nodes: dict[str, int] = field(default_factory=dict)
    provision_s: float = 60.0
    sample_s: float = 5.0
    zoo_interval_s: float = 15.0
    zoo_scale_down_period_s: float = 60.0
    wva_interval_s: float = 60.0
    wva_window_s: float = 60.0
    count_unserved: bool = True

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"autoscale rule must be one of {RULES}, got {self.rule!r}")


@dataclass(slots=True)
class HeldRequest:
    """A request held for a first node of ``model`` (sim/des.py's RequestRecord and ClientGenerate), until
    ``deadline_s``."""

    rec: Any
    msg: ClientGenerate
    model: str
    deadline_s: float


class Autoscaler:
    """``gpu_types[i]``: node i's GPU type. Tracks which nodes are joined, pending and draining, and the node-seconds
    each type was held (joined or pending: a GPU paid for)."""

    def __init__(self, config: AutoscaleConfig, node_ids: list[str], gpu_types: list[str]) -> None:
        self.config = config
        self.node_ids, self.gpu_types = node_ids, gpu_types
        self.planner = CapacityPlanner(config.plan)
        self.joined: set[int] = set()
        self.pending: dict[int, float] = {}  # node → when it joins
        self.draining: set[int] = set()
        self._held_since: dict[int, float] = {}
        self.node_seconds: dict[str, float] = {t: 0.0 for t in gpu_types}
        self.actions = {"up": 0, "down": 0}
        self._next_act_s = 0.0
        self._last_shed_s: dict[str, float] = {}
        self._peaks: dict[int, deque[tuple[float, float, int]]] = {}  # wva: (t, kv, waiting) samples
        self.timeline: list[tuple[float, dict[str, int]]] = []  # (t, nodes held per type) after each change
        self.arrivals: dict[tuple[str, str | None], int] = {}  # (model, cell) → placed or refused there: the plan's
        self.held: dict[int, HeldRequest] = {}  # request index → waiting for a node (controlplane/cold_start.py)
        self.retrying: dict[int, HeldRequest] = {}  # taken to be placed again (``take``)
        self.num_held = {"held": 0, "served": 0, "refused": 0}  # requests held, and how their waits ended

    def start(self) -> list[int]:
        """The nodes joined at time 0."""
        wanted = dict(self.config.start_nodes)
        for i, gpu_type in enumerate(self.gpu_types):
            if wanted.get(gpu_type, 1) > 0:
                wanted[gpu_type] = wanted.get(gpu_type, 1) - 1
                self.joined.add(i)
                self._held_since[i] = 0.0
        self._record(0.0)
        return sorted(self.joined)

    def join(self, now: float, i: int) -> bool:
        """Node i's provisioning ended: it joins (False: it was cancelled meanwhile, or cancelled and asked for again,
        so this event is the first request's and its own join comes later)."""
        if self.pending.get(i) != now:
            return False
        del self.pending[i]
        self.joined.add(i)
        return True

    def tick(self, now: float, registry) -> tuple[list[tuple[float, int]], list[int], list[int]]:
        """One sample: (nodes to provision: (join time, node)), nodes to drain, nodes drained and idle to remove."""
        self._expire(now)
        gone = [i for i in self.draining if (v := registry.view(self.node_ids[i])) is None or v.num_inflight == 0]
        for i in gone:
            self.draining.discard(i)
            self.joined.discard(i)
            self._release(now, i)
        wanted = self._wanted(now, registry)
        starts: list[tuple[float, int]] = []
        drains: list[int] = []
        if wanted is not None:
            for gpu_type, target in sorted(wanted.items()):
                starts += self._grow(now, gpu_type, target)
                drains += self._shrink(now, gpu_type, target, registry)
        if gone or starts or drains:
            self._record(now)
        return starts, drains, gone

    def on_routed(self, view) -> None:
        """A request was routed to the node of ``view`` (its NodeView)."""
        self.on_arrival(view.model, view.cell)

    def on_unserved(self, model: str, cell: str | None) -> None:
        """A request refused for want of the pool's capacity (place_request's ``on_unserved``)."""
        if self.config.count_unserved:
            self.on_arrival(model, cell)

    def on_arrival(self, model: str, cell: str | None) -> None:
        """A request asked the pool (``model``, ``cell``): placed there, or refused for want of its capacity, as the
        control plane's FleetLedger.arrivals_by_pool counts it."""
        key = (model, cell)
        self.arrivals[key] = self.arrivals.get(key, 0) + 1

    @property
    def holding(self) -> bool:
        """Requests wait for a node (or are about to try again)."""
        return bool(self.held or self.retrying)

    def hold(
        self, now: float, index: int, rec, msg: ClientGenerate, refusal: ErrorReply, models: list[str]
    ) -> float | None:
        """When request ``index``, refused (``refusal``), tries again: never (None: refused), at the next join (inf:
        refused for want of a node, of a model the plan holds at zero nodes, its served ``models`` the default first),
        or ``HELD_RETRY_S`` from now (a try after its first refused for want of capacity: the pool's queues full);
        within ``cold_start_wait_s`` of its first refusal (controlplane/cold_start.py)."""
        before = self.retrying.pop(index, None)
        full = before is not None and refusal.code is ErrorCode.OVERLOADED
        if refusal.code is not ErrorCode.NO_NODE and not full:
            self.num_held["refused"] += before is not None
            return None
        if before is None:
            model = msg.model if msg.model in models else models[0]
            wait_s = self.planner.cold_start_wait_s(model)
            if wait_s <= 0:
                return None
            before = HeldRequest(rec, msg, model, now + wait_s)
            self.num_held["held"] += 1
        if before.deadline_s <= now:
            self.num_held["refused"] += 1
            return None
        self.held[index] = before
        self.planner.waiting[before.model] = self.planner.waiting.get(before.model, 0) + 1
        return now + HELD_RETRY_S if full else math.inf

    def take(self, index: int) -> HeldRequest | None:
        """Held request ``index``, to be placed again now (None: it is not held: placed or refused already)."""
        held = self.held.pop(index, None)
        if held is not None:
            self._unwait(held.model)
            self.retrying[index] = held
        return held

    def placed(self, index: int) -> None:
        """Request ``index`` was placed (a held one: its wait ended served)."""
        if self.retrying.pop(index, None) is not None:
            self.num_held["served"] += 1

    def release(self) -> list[int]:
        """A node joined: the held requests (their indices, in arrival order) try again (``take``)."""
        return sorted(self.held)

    def _expire(self, now: float) -> None:
        """The held requests past their wait: refused."""
        for index in [i for i, held in self.held.items() if held.deadline_s <= now]:
            held = self.held.pop(index)
            held.rec.refusal = ErrorCode.NO_NODE.value
            self._unwait(held.model)
            self.num_held["refused"] += 1

    def _unwait(self, model: str) -> None:
        waiting = self.planner.waiting
        waiting[model] -= 1
        if not waiting[model]:
            del waiting[model]

    def finish(self, now: float) -> None:
        for i in list(self._held_since):
            self._release(now, i)

    # -- the rules ---------------------------------------------------------------------------------

    def _wanted(self, now: float, registry) -> dict[str, int] | None:
        config = self.config
        up = [i for i in sorted(self.joined - self.draining) if registry.state(self.node_ids[i]) is NodeState.UP]
        if config.rule == "zoo":
            rows = {self.node_ids[i]: {"state": "up"} for i in up}
            plans = self.planner.plan(now, plan_nodes(registry.views(), rows), config.ttft_s, self.arrivals)
            if now < self._next_act_s:
                return None
            self._next_act_s = now + config.zoo_interval_s
            return {v.gpu_type: v.desired_nodes for p in plans for v in p.variants}
        for i in up:  # wva: Prometheus' samples of each replica, their peak over its window
            v = registry.view(self.node_ids[i])
            samples = self._peaks.setdefault(i, deque())
            samples.append((now, v.kv_usage, v.num_waiting))
            while samples[0][0] < now - config.wva_window_s:
                samples.popleft()
        if now < self._next_act_s:
            return None
        self._next_act_s = now + config.wva_interval_s
        replicas = [
            WvaReplica(self.gpu_types[i], max(s[1] for s in self._peaks[i]), max(s[2] for s in self._peaks[i]))
            for i in up
        ]
        targets = wva_targets(replicas, config.plan.cost)
        if self.pending:  # WVA blocks a scale-up while replicas are pending
            held = {t: sum(1 for i in up if self.gpu_types[i] == t) for t in targets}
            targets = {t: min(n, held[t] + sum(1 for i in self.pending if self.gpu_types[i] == t))
                       for t, n in targets.items()}  # fmt: skip
        return targets

    def _held(self, gpu_type: str) -> list[int]:
        return [i for i in sorted((self.joined - self.draining) | set(self.pending)) if self.gpu_types[i] == gpu_type]

    def _grow(self, now: float, gpu_type: str, target: int) -> list[tuple[float, int]]:
        held = self._held(gpu_type)
        free = [i for i, t in enumerate(self.gpu_types) if t == gpu_type and i not in self._held_since]
        starts = []
        for i in free[: max(target - len(held), 0)]:
            self.pending[i] = now + self.config.provision_s
            self._held_since[i] = now
            starts.append((self.pending[i], i))
            self.actions["up"] += 1
        return starts

    def _shrink(self, now: float, gpu_type: str, target: int, registry) -> list[int]:
        held = self._held(gpu_type)
        excess = len(held) - target
        drains = []
        for i in sorted((i for i in held if i in self.pending), reverse=True):  # pending first: not started yet
            if excess <= 0:
                break
            del self.pending[i]
            self._release(now, i)
            excess -= 1
        rate_limited = self.config.rule == "zoo"
        while excess > 0:
            if rate_limited and now - self._last_shed_s.get(gpu_type, -1e18) < self.config.zoo_scale_down_period_s:
                break
            up = [i for i in held if i in self.joined and i not in self.draining]
            if not up or (len(up) == 1 and self.config.rule != "zoo"):  # the zoo plan may scale a type to zero
                break
            i = min(up, key=lambda j: (registry.view(self.node_ids[j]).num_inflight, -j))  # the least busy
            self.draining.add(i)
            drains.append(i)
            self._last_shed_s[gpu_type] = now
            self.actions["down"] += 1
            excess -= 1
        return drains

    def _release(self, now: float, i: int) -> None:
        since = self._held_since.pop(i, None)
        if since is not None:
            self.node_seconds[self.gpu_types[i]] += now - since

    def _record(self, now: float) -> None:
        counts: dict[str, int] = {}
        for i in self._held_since:
            counts[self.gpu_types[i]] = counts.get(self.gpu_types[i], 0) + 1
        self.timeline.append((now, counts))

    def summary(self) -> dict:
        return {
            "rule": self.config.rule,
            "node_hours": {t: s / 3600 for t, s in sorted(self.node_seconds.items())},
            "actions": dict(self.actions),
            "cold_start": dict(self.num_held),
            "timeline": [{"t_s": round(t, 1), "nodes": n} for t, n in self.timeline],
        }
