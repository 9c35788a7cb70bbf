"""The control plane's /metrics: router queue wait, node → router return hop, routing decisions,
refusals, malformed messages and the SLO forecast (each placement's TTFT forecast, in time or late).

    ControlPlane.take_events() ─► FleetObserver.poll() ─► observe(kind, node labels, seconds)   histograms
    ControlPlane.stats()  ─────────────────────────────► scrape-time counters and gauges      (snapshot)

Served on the control plane's HTTP port: ``create_app(cp, metrics_app=exporter.asgi_app(observer.poll))``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import msgspec
from prometheus_client import Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from observe import metrics_names as m
from observe.exporter import PrometheusExporter, SnapshotCollector
from observe.spec_pair_metrics import spec_pair_metrics

# LatencySample.kind (controlplane/server.py LatencyKind) → the histogram it feeds here; router → node hops
# are exported by the agent that measured them (one exporter per metric: sums never double count)
_HISTOGRAMS = {
    "router_queue_wait": (m.ROUTER_QUEUE_WAIT, "Router queue wait: routed_ns - arrival_ns."),
    "node_to_router_return": (m.NODE_TO_ROUTER_RETURN, "Node → router return hop: receipt - TokenChunk.sent_ns."),
    "predicted_ttft": (m.ROUTER_PREDICTED_TTFT, "TTFT forecast on the chosen node at placement (nothing cached)."),
}
_BUCKETS = {"predicted_ttft": m.TTFT_BUCKETS_S}  # a TTFT, not a hop: vLLM's TTFT buckets


class ControlPlaneExporter(PrometheusExporter):
    """``stats_fn``: ControlPlane.stats (a plain dict snapshot), called at every scrape."""

    def __init__(self, stats_fn: Callable[[], dict]) -> None:
        super().__init__()
        self._stats_fn = stats_fn
        self._histograms = {
            kind: Histogram(
                name, doc, m.ZOO_NODE_LABELS, registry=self.registry, buckets=_BUCKETS.get(kind, m.HOP_BUCKETS_S)
            )
            for kind, (name, doc) in _HISTOGRAMS.items()
        }
        self.registry.register(SnapshotCollector(self._collect_snapshot))

    def observe(self, kind: str, node_labels: dict[str, str], seconds: float) -> None:
        """``node_labels``: model, node, gpu_type, cell. Kinds this exporter does not export are ignored."""
        histogram = self._histograms.get(kind)
        if histogram is not None:
            histogram.labels(**node_labels).observe(max(seconds, 0.0))

    def _collect_snapshot(self) -> Iterable[Metric]:
        stats = self._stats_fn()
        policy = stats["policy"]
        decisions = CounterMetricFamily(m.ROUTER_DECISIONS, "Requests routed, by policy and node.",
                                        labels=["policy", "node"])  # fmt: skip
        up = GaugeMetricFamily(m.NODE_UP, "1: the node is live; 0: it left or missed its heartbeats.",
                               labels=list(m.ZOO_NODE_LABELS))  # fmt: skip
        state = GaugeMetricFamily(m.NODE_STATE, "1 for the node's routing state (up, suspect: a send failed, "
                                  "draining: routed nothing new, leaving: draining to stop, dead), 0 for the others.",
                                  labels=[*m.ZOO_NODE_LABELS, "state"])  # fmt: skip
        info = GaugeMetricFamily(m.NODE_INFO, "1 per node known: its backend and serving digest (the configuration "
                                 "deciding its tokens; nodes alike share it, as their replies' system_fingerprint).",
                                 labels=[*m.ZOO_NODE_LABELS, "backend", "config_digest"])  # fmt: skip
        profiling = GaugeMetricFamily(m.NODE_PROFILING, "1 while the node's profiler runs (POST /start_profile): "
                                      "its trace grows until /stop_profile or its max_iterations.",
                                      labels=[*m.ZOO_NODE_LABELS, "state"])  # fmt: skip
        sleep = GaugeMetricFamily(m.ENGINE_SLEEP_STATE, "Engine sleep state (POST /sleep); awake = 1 means the node "
                                  "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means sleep "
                                  "level 2.", labels=["model_name", "engine", "sleep_state"])  # fmt: skip
        for node_id, node in stats["nodes"].items():
            if node.get("requests_routed"):
                decisions.add_metric([policy, node_id], node["requests_routed"])
            labels = [node.get("model") or "", node_id, node.get("gpu_type") or "", node.get("cell") or ""]
            up.add_metric(labels, 1.0 if node["alive"] else 0.0)
            info.add_metric([*labels, node.get("backend") or "", node.get("config_digest") or ""], 1.0)
            if node.get("profiling"):  # only while it runs (waiting for its delay, or recording)
                profiling.add_metric([*labels, node["profiling"]], 1.0)
            for name in _NODE_STATES:
                state.add_metric([*labels, name], 1.0 if node.get("state") == name else 0.0)
            level = max(0, node.get("sleep_level", 0))
            for i, name in enumerate(_SLEEP_STATES):
                sleep.add_metric([labels[0], node_id, name], 1.0 if level == i else 0.0)
        yield decisions
        yield up
        yield info
        yield state
        yield profiling
        yield sleep
        events = CounterMetricFamily(m.NODE_MEMBERSHIP_EVENTS, "Nodes' membership events since start: joins, "
                                     "rejoins (a restarted agent), leaves, expired (heartbeats missed), suspected "
                                     "(a send failed), drains, resumes.", labels=["event"])  # fmt: skip
        registry = stats.get("registry") or {}
        for event in _MEMBERSHIP_EVENTS:
            if f"num_{event}_total" in registry:
                events.add_metric([event], registry[f"num_{event}_total"])
        yield events
        yield from _router_config(policy, stats.get("router"))
        draining = GaugeMetricFamily(m.CONTROLPLANE_DRAINING, "1 while the control plane shuts down: new requests "
                                     "refused, those in flight finishing (--shutdown-timeout).")  # fmt: skip
        draining.add_metric([], 1.0 if stats.get("draining") else 0.0)
        yield draining
        tokenizing = stats.get("tokenizing") or {}
        waiting = GaugeMetricFamily(m.TOKENIZE_WAITING, "Requests whose long prompt waits for (or is in) a tokenizing "
                                    "worker thread; counted in flight.")  # fmt: skip
        waiting.add_metric([], tokenizing.get("waiting", 0))
        yield waiting
        offloaded = CounterMetricFamily(m.TOKENIZE_OFFLOADED, "Long prompts tokenized in a worker thread, off the "
                                        "event loop.")  # fmt: skip
        offloaded.add_metric([], tokenizing.get("tokenized_total", 0))
        yield offloaded
        rejected = CounterMetricFamily(m.REJECTED_REQUESTS, "Requests refused before reaching a node, by reason.",
                                       labels=["reason"])  # fmt: skip
        for reason, n in sorted(stats["refused"].items()):
            rejected.add_metric([reason], n)
        yield rejected
        malformed = CounterMetricFamily(m.MALFORMED_MESSAGES, "Messages refused unread, by kind and socket.",
                                        labels=["kind", "socket"])  # fmt: skip
        for socket_name, by_kind in sorted(stats["rejected_messages"].items()):
            for kind, n in sorted(by_kind.items()):
                malformed.add_metric([kind, socket_name], n)
        yield malformed
        migrations = CounterMetricFamily(m.MIGRATIONS, "Live migrations of running requests, by reason and outcome.",
                                         labels=["reason", "outcome"])  # fmt: skip
        for key, n in sorted(stats.get("migrations", {}).items()):
            reason, _, outcome = key.partition(":")
            migrations.add_metric([reason, outcome], n)
        yield migrations
        yield from _class_and_tenant_metrics(stats)
        yield from spec_pair_metrics(stats)
        yield from _forecast_metrics(stats.get("slo_forecast"))
        yield from _capacity_metrics(stats.get("capacity") or [])


# controlplane/registry.py NodeState, "leaving" (draining to stop: its agent's SIGTERM, no resume undoes it), and gone
_NODE_STATES = ("up", "suspect", "draining", "leaving", "dead")
_SLEEP_STATES = ("awake", "weights_offloaded", "discard_all")  # vLLM's, by sleep level
_MEMBERSHIP_EVENTS = ("joins", "rejoins", "leaves", "expired", "suspected", "drains", "resumes")  # RegistryStats
_CLASS_OUTCOMES = {
    "routed": "requests_routed",
    "spilled": "requests_spilled",
    "refused": "requests_refused",
    "served": "requests_served",
    "failed": "requests_failed",
    "cancelled": "requests_cancelled",
}


def _router_config(policy: str, router: dict | None) -> Iterable[Metric]:
    """The router as configured (ControlPlane.stats()["router"]: its SLO and the knobs set off their defaults), as
    vLLM exports its engine's settings (vllm:cache_config_info: a gauge of 1 whose labels are the settings), and
    its reloads (controlplane/router_reload.py) by outcome."""
    info = GaugeMetricFamily(m.ROUTER_CONFIG_INFO, "The router's policy, SLO and the RouterConfig fields set off their "
                             "defaults (knobs, one JSON object).",
                             labels=["policy", "slo_ttft_s", "slo_tpot_s", "knobs"])  # fmt: skip
    if router is not None:
        knobs = msgspec.json.encode(router["knobs"]).decode()
        info.add_metric([policy, repr(float(router["slo_ttft_s"])), repr(float(router["slo_tpot_s"])), knobs], 1.0)
    yield info
    reloads = CounterMetricFamily(m.ROUTER_CONFIG_RELOADS, "Router reloads (SIGHUP with --router-knobs-file), by "
                                  "outcome: ok, or refused (the router left as it was).",
                                  labels=["outcome"])  # fmt: skip
    for outcome, n in sorted(((router or {}).get("reloads") or {}).items()):
        reloads.add_metric([outcome], n)
    yield reloads


def _capacity_metrics(pools: list[dict]) -> Iterable[Metric]:
    """controlplane/capacity_plan.py's plan: per variant its nodes and the nodes it should have (what KEDA or an
    HPA scales each GPU type's agents to), per pool its utilisation."""
    labels = ["model_name", "cell", "gpu_type"]
    nodes = GaugeMetricFamily(m.CAPACITY_NODES, "Nodes of a GPU type counted as a pool's capacity (up, or asleep).",
                              labels=labels)  # fmt: skip
    desired = GaugeMetricFamily(m.CAPACITY_DESIRED_NODES, "Nodes of a GPU type the pool should have for its load "
                                "at the target utilisation (scale-ups at once, scale-downs after the window).",
                                labels=labels)  # fmt: skip
    utilisation = GaugeMetricFamily(m.CAPACITY_UTILISATION, "A pool's load over its capacity, each node's load (KV "
                                    "use, queued prefill against the TTFT target) weighted by its power score.",
                                    labels=["model_name", "cell"])  # fmt: skip
    growth = GaugeMetricFamily(m.CAPACITY_ARRIVAL_GROWTH, "A pool's arrival rate forecast a node's start ahead over "
                               "its rate now (controlplane/demand_trend.py; 1: steady or falling): the wanted "
                               "capacity is load x growth / target.", labels=["model_name", "cell"])  # fmt: skip
    waiting = GaugeMetricFamily(m.CAPACITY_COLD_START_WAITING, "Requests held for a first node of a model whose pool "
                                "is at zero nodes (controlplane/cold_start.py): a cold start under way.",
                                labels=["model_name"])  # fmt: skip
    for model in dict.fromkeys(pool["model"] for pool in pools):
        waiting.add_metric([model], next(p.get("waiting", 0) for p in pools if p["model"] == model))
    for pool in pools:
        utilisation.add_metric([pool["model"], pool["cell"]], pool["utilisation"])
        growth.add_metric([pool["model"], pool["cell"]], pool.get("growth", 1.0))
        for v in pool["variants"]:
            nodes.add_metric([pool["model"], pool["cell"], v["gpu_type"]], v["nodes"])
            desired.add_metric([pool["model"], pool["cell"], v["gpu_type"]], v["desired"])
    yield nodes
    yield desired
    yield utilisation
    yield growth
    yield waiting


def _forecast_metrics(forecast: dict | None) -> Iterable[Metric]:
    """controlplane/slo_forecast.py's summary: placements forecast in time or late per class, the recent share."""
    if forecast is None:
        return
    counts = CounterMetricFamily(m.ROUTER_SLO_FORECAST, "Placements by TTFT forecast on the chosen node vs the "
                                 "class's TTFT target.", labels=["class", "forecast"])  # fmt: skip
    for key, n in forecast["decisions"].items():
        cls, _, outcome = key.rpartition(":")
        counts.add_metric([cls, outcome], n)
    yield counts
    share = GaugeMetricFamily(m.ROUTER_SLO_FORECAST_LATE_SHARE, "Share of the recent placements forecast to miss "
                              "their TTFT target (an overload shows here first).")  # fmt: skip
    share.add_metric([], forecast["recent_late_share"])
    yield share
    targets = GaugeMetricFamily(m.CLASS_SLO_TARGET, "Each traffic class's latency targets (its slo_ttft_s and "
                                "slo_tpot_s, else the router's), for alerts on the class's quantiles.",
                                labels=["class", "kind"])  # fmt: skip
    for cls, target in forecast.get("targets", {}).items():
        targets.add_metric([cls, "ttft"], target["ttft"])
        targets.add_metric([cls, "tpot"], target["tpot"])
    yield targets
    overload = forecast.get("overload")
    if overload is not None:  # hardware_aware's overload mode, configured on
        mode = GaugeMetricFamily(m.ROUTER_OVERLOAD_MODE, "1 while hardware_aware decides with its overload charges "
                                 "(most recent placements forecast late).")  # fmt: skip
        mode.add_metric([], 1.0 if overload["on"] else 0.0)
        yield mode
        switched = CounterMetricFamily(m.ROUTER_OVERLOAD_ACTIVATIONS, "Times hardware_aware's overload mode "
                                       "switched on.")  # fmt: skip
        switched.add_metric([], overload["activations"])
        yield switched
    gate = forecast.get("long_prompt_gate")
    if gate is not None:  # hardware_aware's long-prompt gate, configured on
        median = GaugeMetricFamily(m.ROUTER_LATE_PROMPT_MEDIAN, "Median prompt (tokens) of the placements forecast "
                                   "late in overload mode's window: hardware_aware sacrifices a long prompt only "
                                   "above it (+Inf: too few late placements).")  # fmt: skip
        median.add_metric([], math.inf if gate["median_late_tokens"] is None else gate["median_late_tokens"])
        yield median
    lost = forecast.get("tpot_lost")
    if lost is not None:  # hardware_aware's TPOT lost-cause rule, configured on
        moved = CounterMetricFamily(m.ROUTER_TPOT_LOST_REDIRECTS, "Requests hardware_aware sent to a node that misses "
                                    "their TPOT target at any load, as no node was predicted to meet it "
                                    "(goodput first: slo_tpot_lost_to_doomed).")  # fmt: skip
        moved.add_metric([], lost["redirects"])
        yield moved


def _class_and_tenant_metrics(stats: dict) -> Iterable[Metric]:
    """Per traffic class: P50/P99 TTFT and TPOT (gauges with a ``quantile`` label, of the recent requests),
    request outcomes; per tenant: requests and tokens (controlplane/class_ledger.py, controlplane/tenants.py)."""
    classes = stats.get("classes", {})
    ttft = GaugeMetricFamily(m.CLASS_TTFT, "TTFT by traffic class (control plane: arrival → first token).",
                             labels=["class", "quantile"])  # fmt: skip
    tpot = GaugeMetricFamily(m.CLASS_TPOT, "Time per output token by traffic class.", labels=["class", "quantile"])
    outcomes = CounterMetricFamily(
        m.CLASS_REQUESTS, "Requests by traffic class and outcome.", labels=["class", "outcome"]
    )
    for name, row in classes.items():
        for quantile, key in (("0.5", "p50"), ("0.99", "p99")):
            if row.get(f"ttft_ms_{key}") is not None:
                ttft.add_metric([name, quantile], row[f"ttft_ms_{key}"] / 1e3)
            if row.get(f"tpot_ms_{key}") is not None:
                tpot.add_metric([name, quantile], row[f"tpot_ms_{key}"] / 1e3)
        for outcome, key in _CLASS_OUTCOMES.items():
            outcomes.add_metric([name, outcome], row.get(key, 0))
    yield ttft
    yield tpot
    yield outcomes
    requests = CounterMetricFamily(m.TENANT_REQUESTS, "Requests by tenant: admitted, or refused by its rate limits.",
                                   labels=["tenant", "outcome"])  # fmt: skip
    tokens = CounterMetricFamily(m.TENANT_TOKENS, "Tokens used by tenant.", labels=["tenant", "kind"])
    for tenant, usage in stats.get("tenants", {}).items():
        requests.add_metric([tenant, "admitted"], usage["num_requests"])
        requests.add_metric([tenant, "rate_limited"], usage["num_refused"])
        tokens.add_metric([tenant, "prompt"], usage["num_prompt_tokens"])
        tokens.add_metric([tenant, "completion"], usage["num_completion_tokens"])
    yield requests
    yield tokens
