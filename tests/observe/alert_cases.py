"""The alerting rules' cases for ``promtool test rules`` (tests/observe/test_alert_rules.py): for every alert of
deploy/prometheus/silicon_zoo_rules.yml, a history of series where it fires (its labels and rendered summary
expected) and one where it must not (the condition that tells the two apart: a node asleep, too few peers, a
client error rather than a capacity refusal, ...). Series names and labels are the exporters' own
(observe/metrics_names.py); counters are given by their increments per minute (promtool's ``a+bxN``)."""

from __future__ import annotations

from dataclasses import dataclass, field

CP = {"job": "zoo-controlplane", "instance": "cp:8000"}
NODE = {"model": "m", "node": "a", "gpu_type": "L4", "cell": "west"}
AGENT = {"job": "silicon-zoo/zoo-agents", "instance": "a:9100"}  # the PodMonitor's job name
VLLM_NODE = {"model_name": "m", "node": "a", "gpu_type": "L4", "cell": "west"}
CAPACITY = {"model_name": "m", "cell": "west", "gpu_type": "L4"}  # a variant of the capacity plan


def series(name: str, labels: dict[str, str], values: str) -> tuple[str, str]:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{name}{{{inner}}}", values


@dataclass(frozen=True)
class Case:
    """``fires``: each alert expected at ``eval_time``, as (its labels without alertname and severity, its
    summary); empty: none may be active (pending ones are not counted by promtool, so a quiet case is evaluated
    long after the rule's ``for``)."""

    alert: str
    input_series: list[tuple[str, str]]
    eval_time: str
    fires: list[tuple[dict[str, str], str]] = field(default_factory=list)


def _sleep(node: str, state: str) -> list[tuple[str, str]]:
    return [
        series("vllm:engine_sleep_state", {"model_name": "m", "engine": node, "sleep_state": name, **CP}, "1x80")
        if name == state
        else series("vllm:engine_sleep_state", {"model_name": "m", "engine": node, "sleep_state": name, **CP}, "0x80")
        for name in ("awake", "weights_offloaded", "discard_all")
    ]


def _node_states(node: str, state: str, gpu_type: str = "L4", up: int = 1) -> list[tuple[str, str]]:
    labels = {**NODE, "node": node, "gpu_type": gpu_type, **CP}
    rows = [series("zoo:node_up", labels, f"{up}x80")]
    for name in ("up", "suspect", "draining", "leaving", "dead"):
        rows.append(series("zoo:node_state", {**labels, "state": name}, "1x80" if name == state else "0x80"))
    return rows


def _counter(name: str, labels: dict[str, str], per_minute: str) -> tuple[str, str]:
    return series(name, labels, f"0+{per_minute}x40")


def _placed(*forecasts: str) -> list[tuple[str, str]]:
    """Placements all along, 10 a minute per forecast outcome (in_time, late)."""
    labels = {**CP, "class": "default"}
    return [_counter("zoo:router_slo_forecast_total", {**labels, "forecast": f}, "10") for f in forecasts]


def _served(*classes: str) -> list[tuple[str, str]]:
    """The classes served all along: 10 requests a minute each."""
    return [_counter("zoo:class_requests_total", {**CP, "class": c, "outcome": "served"}, "10") for c in classes]


def _roofline(fractions: dict[str, float], gpu_type: str) -> list[tuple[str, str]]:
    return [
        series("zoo:decode_roofline_fraction", {**NODE, "node": node, "gpu_type": gpu_type}, f"{value}x40")
        for node, value in fractions.items()
    ]


def _gc_pauses(instance: str, slow: bool) -> list[tuple[str, str]]:
    """One collection a second; slow: every pause between 10 and 100 ms (P99 ~99 ms), else under 10 ms."""
    labels = {"job": "zoo-agents", "instance": instance, "generation": "2"}
    fast_bucket = "0+0x30" if slow else "0+60x30"
    return [
        series("zoo:process_gc_pause_seconds_bucket", {**labels, "le": "0.01"}, fast_bucket),
        series("zoo:process_gc_pause_seconds_bucket", {**labels, "le": "0.1"}, "0+60x30"),
        series("zoo:process_gc_pause_seconds_bucket", {**labels, "le": "+Inf"}, "0+60x30"),
    ]


CASES: list[Case] = [
    # -- availability --------------------------------------------------------------------------------------------
    Case("ZooControlPlaneDown", [series("up", CP, "1 1 0 0 0 0")], "4m",
         [(CP, "The control plane at cp:8000 does not answer its /metrics.")]),
    Case("ZooControlPlaneDown", [series("up", CP, "1 1 0 1 1 1")], "4m"),
    Case("ZooControlPlaneDown", [series("up", {"job": "zoo-controlplane", "instance": "k8s:8000"}, "0x5")], "4m",
         [({"job": "zoo-controlplane", "instance": "k8s:8000"},
           "The control plane at k8s:8000 does not answer its /metrics.")]),
    Case("ZooControlPlaneMissing", [series("up", {"job": "node", "instance": "n:9100"}, "1x20")], "15m",
         [({}, "Prometheus has no control plane target.")]),
    Case("ZooControlPlaneMissing", [series("up", CP, "0x20")], "15m"),
    # every node of model m drained or suspect, none asleep: nothing can be routed
    Case("ZooNoRoutableNode", [*_node_states("a", "draining"), *_node_states("b", "suspect"), *_sleep("a", "awake")],
         "5m", [({"model": "m"}, "Model m: no node can be routed to.")]),
    Case("ZooNoRoutableNode", [*_node_states("a", "draining"), *_node_states("b", "up")], "5m"),
    # an operator (or --sleep-idle-ttl) put the drained node to sleep: the next request wakes it
    Case("ZooNoRoutableNode", [*_node_states("a", "draining"), *_sleep("a", "weights_offloaded")], "5m"),
    # every node of the model died, and requests are refused as NO_NODE
    Case("ZooNoRoutableNode", [*_node_states("a", "dead", up=0), *_node_states("b", "dead", up=0),
                               _counter("zoo:rejected_requests_total", {**CP, "reason": "no_node"}, "3")], "5m",
         [({"model": "m"}, "Model m: no node can be routed to.")]),
    # its nodes all left and nobody asks for it any more (a model taken out of service): quiet
    Case("ZooNoRoutableNode", [*_node_states("a", "dead", up=0),
                               _counter("zoo:rejected_requests_total", {**CP, "reason": "unknown_model"}, "3")], "5m"),
    Case("ZooNodeHeartbeatsLost",
         [series("zoo:node_membership_events_total", {**CP, "event": "expired"}, "0 0 1 1 1")], "4m",
         [({**CP, "event": "expired"}, "Nodes stopped sending heartbeats in the last 10 minutes.")]),
    Case("ZooNodeHeartbeatsLost",
         [series("zoo:node_membership_events_total", {**CP, "event": "expired"}, "3x20"),
          series("zoo:node_membership_events_total", {**CP, "event": "leaves"}, "0 0 1 1 1")], "4m"),
    Case("ZooNodeSuspect", _node_states("a", "suspect"), "5m",
         [({**NODE, **CP, "state": "suspect"}, "Node a (L4) has been suspect for 2 minutes.")]),
    Case("ZooNodeSuspect", [series("zoo:node_state", {**NODE, **CP, "state": "suspect"}, "0 1 0 1 0 1 0")], "6m"),
    Case("ZooNodeDrainedLong", [*_node_states("a", "draining"), *_sleep("a", "awake")], "70m",
         [({**NODE, **CP, "state": "draining"}, "Node a (L4) has been drained for an hour.")]),
    Case("ZooNodeDrainedLong", [*_node_states("a", "draining"), *_sleep("a", "discard_all")], "70m"),
    Case("ZooAgentMetricsDown", [series("up", AGENT, "0x10")], "8m",
         [(AGENT, "The agent at a:9100 does not answer its /metrics.")]),
    Case("ZooAgentMetricsDown", [series("up", AGENT, "0 0 1x10")], "8m"),
    Case("ZooControlPlaneShutdownStuck", [series("zoo:controlplane_draining", CP, "1x15")], "12m",
         [(CP, "The control plane at cp:8000 has been shutting down for 10 minutes.")]),
    Case("ZooControlPlaneShutdownStuck", [series("zoo:controlplane_draining", CP, "1x5 0x10")], "12m"),
    # -- latency -----------------------------------------------------------------------------------------------
    Case("ZooSloForecastLate",
         [series("zoo:router_slo_forecast_late_share", CP, "0.5x10"), *_placed("late", "in_time")], "8m",
         [(CP, "50% of the recent placements are forecast to miss their TTFT target.")]),
    Case("ZooSloForecastLate", [series("zoo:router_slo_forecast_late_share", CP, "0.05x10"), *_placed("in_time")],
         "8m"),
    # half the last placements were late, then nothing was placed for over 10 minutes: the share stays, not the alert
    Case("ZooSloForecastLate",
         [series("zoo:router_slo_forecast_late_share", CP, "0.5x30"),
          series("zoo:router_slo_forecast_total", {**CP, "class": "default", "forecast": "late"}, "0+5x3 15x27")],
         "25m"),
    Case("ZooClassTtftOverSlo",
         [series("zoo:class_time_to_first_token_seconds", {**CP, "class": "vip", "quantile": "0.99"}, "0.8x15"),
          series("zoo:class_time_to_first_token_seconds", {**CP, "class": "vip", "quantile": "0.5"}, "0.2x15"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "ttft"}, "0.5x15"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "tpot"}, "0.05x15"),
          series("zoo:class_time_to_first_token_seconds", {**CP, "class": "batch", "quantile": "0.99"}, "20x15"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "batch", "kind": "ttft"}, "30x15"),
          *_served("vip", "batch")], "12m",
         [({**CP, "class": "vip", "quantile": "0.99"}, "Traffic class vip: P99 TTFT 800ms is over its target.")]),
    # the class's last requests were slow, then its traffic stopped: its quantile stays, the alert does not
    Case("ZooClassTtftOverSlo",
         [series("zoo:class_time_to_first_token_seconds", {**CP, "class": "vip", "quantile": "0.99"}, "0.8x30"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "ttft"}, "0.5x30"),
          series("zoo:class_requests_total", {**CP, "class": "vip", "outcome": "served"}, "0+10x5 50x25")], "28m"),
    Case("ZooClassTtftOverSlo",
         [series("zoo:class_time_to_first_token_seconds", {**CP, "class": "vip", "quantile": "0.99"}, "0.8x3 0.3x12"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "ttft"}, "0.5x15"),
          *_served("vip")], "12m"),
    Case("ZooClassTpotOverSlo",
         [series("zoo:class_time_per_output_token_seconds", {**CP, "class": "vip", "quantile": "0.99"}, "0.07x15"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "tpot"}, "0.05x15"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "ttft"}, "0.01x15"),
          *_served("vip")], "12m",
         [({**CP, "class": "vip", "quantile": "0.99"},
           "Traffic class vip: P99 time per output token 70ms is over its target.")]),
    Case("ZooClassTpotOverSlo",  # its TTFT target is below the TPOT: only the TPOT target counts
         [series("zoo:class_time_per_output_token_seconds", {**CP, "class": "vip", "quantile": "0.99"}, "0.04x15"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "tpot"}, "0.05x15"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "ttft"}, "0.01x15"),
          *_served("vip")], "12m"),
    Case("ZooClassTpotOverSlo",  # slow, then no traffic for over 10 minutes
         [series("zoo:class_time_per_output_token_seconds", {**CP, "class": "vip", "quantile": "0.99"}, "0.07x30"),
          series("zoo:class_slo_target_seconds", {**CP, "class": "vip", "kind": "tpot"}, "0.05x30"),
          series("zoo:class_requests_total", {**CP, "class": "vip", "outcome": "served"}, "0+10x5 50x25")], "28m"),
    Case("ZooRouterOverloadMode", [series("zoo:router_overload_mode", CP, "1x20")], "17m",
         [(CP, "hardware_aware has been in its overload mode for 15 minutes.")]),
    Case("ZooRouterOverloadMode", [series("zoo:router_overload_mode", CP, "1x10 0 1x9")], "17m"),
    # -- requests ----------------------------------------------------------------------------------------------
    # 10 refused for capacity a minute beside 100 routed: 10 / 110
    Case("ZooRequestsRefusedForCapacity",
         [_counter("zoo:rejected_requests_total", {**CP, "reason": "overloaded"}, "10"),
          _counter("zoo:router_decisions_total", {**CP, "policy": "hardware_aware", "node": "a"}, "100")], "12m",
         [({}, "9.091% of requests are refused for want of capacity.")]),
    # refusals for the client's own errors are not the fleet's capacity
    Case("ZooRequestsRefusedForCapacity",
         [_counter("zoo:rejected_requests_total", {**CP, "reason": "invalid_request"}, "50"),
          _counter("zoo:rejected_requests_total", {**CP, "reason": "no_node"}, "1"),
          _counter("zoo:router_decisions_total", {**CP, "policy": "hardware_aware", "node": "a"}, "100")], "12m"),
    Case("ZooRequestsFailing",
         [_counter("zoo:class_requests_total", {**CP, "class": "default", "outcome": "failed"}, "2"),
          _counter("zoo:class_requests_total", {**CP, "class": "default", "outcome": "served"}, "98")], "12m",
         [({}, "2% of the requests that ended failed.")]),
    Case("ZooRequestsFailing",  # cancelled by their clients: not failures
         [_counter("zoo:class_requests_total", {**CP, "class": "default", "outcome": "cancelled"}, "30"),
          _counter("zoo:class_requests_total", {**CP, "class": "default", "outcome": "failed"}, "0"),
          _counter("zoo:class_requests_total", {**CP, "class": "default", "outcome": "served"}, "70")], "12m"),
    Case("ZooMalformedMessages",
         [_counter("zoo:malformed_messages_total", {**CP, "kind": "malformed", "socket": "clients"}, "5")], "12m",
         [({"kind": "malformed", "socket": "clients"},
           "Malformed messages on the clients socket (malformed): over 10 in 10 minutes.")]),
    Case("ZooMalformedMessages",
         [series("zoo:malformed_messages_total", {**CP, "kind": "malformed", "socket": "clients"}, "0 0 3x20")], "12m"),
    Case("ZooTokenizeBacklog", [series("zoo:controlplane_tokenize_waiting_requests", CP, "40x10")], "8m",
         [(CP, "40 requests wait for a tokenizing thread.")]),
    Case("ZooTokenizeBacklog", [series("zoo:controlplane_tokenize_waiting_requests", CP, "10x10")], "8m"),
    # -- nodes -------------------------------------------------------------------------------------------------
    Case("ZooKvCacheThrashing",
         [series("vllm:kv_cache_usage_perc", VLLM_NODE, "0.97x40"),
          _counter("vllm:num_preemptions_total", VLLM_NODE, "5"),
          _counter("vllm:request_success_total", {**VLLM_NODE, "finished_reason": "stop"}, "6"),
          _counter("vllm:request_success_total", {**VLLM_NODE, "finished_reason": "length"}, "4")], "25m",
         [(VLLM_NODE, "Node a (L4): KV cache full, a preemption per 10 requests.")]),
    Case("ZooKvCacheThrashing",  # full, but preempting one request in twenty
         [series("vllm:kv_cache_usage_perc", VLLM_NODE, "0.97x40"),
          _counter("vllm:num_preemptions_total", VLLM_NODE, "0.5"),
          _counter("vllm:request_success_total", {**VLLM_NODE, "finished_reason": "stop"}, "10")], "25m"),
    Case("ZooGpuBelowItsPeers",
         [*_roofline({"a": 0.8, "b": 0.78, "c": 0.82, "d": 0.3, "e": 0.0}, "H100")], "35m",
         [({**NODE, "node": "d", "gpu_type": "H100"},
           "Node d: its H100 decodes at 30% of its roofline, well below its peers.")]),
    Case("ZooGpuBelowItsPeers",  # two measured L4s (the third has not decoded yet) are too few to call one slow
         [*_roofline({"a": 0.8, "b": 0.3, "c": 0.0}, "L4"), *_roofline({"h1": 0.9, "h2": 0.85, "h3": 0.88}, "H100")],
         "35m"),
    Case("ZooCapacityShort",
         [series("zoo:capacity_desired_nodes", {**CAPACITY, **CP}, "4x30"),
          series("zoo:capacity_nodes", {**CAPACITY, **CP}, "2x30")], "20m",
         [(CAPACITY, "L4 nodes of m in cell west: 2 more wanted for 15 minutes.")]),
    Case("ZooCapacityShort",  # asked for, and the nodes joined within 10 minutes: the autoscaler works
         [series("zoo:capacity_desired_nodes", {**CAPACITY, **CP}, "4x30"),
          series("zoo:capacity_nodes", {**CAPACITY, **CP}, "2x10 4x20")], "25m"),
    Case("ZooMigrationsFailing",
         [series("zoo:migrations_total", {**CP, "reason": "drain", "outcome": "failed"}, "0 0 1 1 1")], "4m",
         [({"reason": "drain"}, "Live migrations (drain) failed in the last 15 minutes.")]),
    Case("ZooMigrationsFailing",
         [_counter("zoo:migrations_total", {**CP, "reason": "drain", "outcome": "ok"}, "3"),
          series("zoo:migrations_total", {**CP, "reason": "drain", "outcome": "failed"}, "2x20")], "12m"),
    Case("ZooKvTransfersRefused",
         [series("zoo:kv_transfer_refused_total", {**NODE, "reason": "checksum"}, "0 0 2 2 2")], "4m",
         [({"node": "a", "reason": "checksum"}, "Node a refused KV transfers (checksum) in the last 15 minutes.")]),
    Case("ZooKvTransfersRefused", [series("zoo:kv_transfer_refused_total", {**NODE, "reason": "checksum"}, "2x30")],
         "25m"),
    Case("ZooKvEventsDropped",
         [series("zoo:kv_events_batches_total", {**NODE, "outcome": "dropped"}, "0 0 1 1 1"),
          _counter("zoo:kv_events_batches_total", {**NODE, "outcome": "sent"}, "100")], "4m",
         [({"node": "a"}, "Node a dropped KV event batches in the last 10 minutes.")]),
    Case("ZooKvEventsDropped", [_counter("zoo:kv_events_batches_total", {**NODE, "outcome": "sent"}, "100")], "4m"),
    # -- operations --------------------------------------------------------------------------------------------
    Case("ZooRouterReloadRefused",
         [series("zoo:router_config_reloads_total", {**CP, "outcome": "refused"}, "0 0 1 1")], "3m",
         [({**CP, "outcome": "refused"}, "A reload of the router's knobs (SIGHUP) was refused.")]),
    Case("ZooRouterReloadRefused",
         [series("zoo:router_config_reloads_total", {**CP, "outcome": "ok"}, "0 0 1 1"),
          series("zoo:router_config_reloads_total", {**CP, "outcome": "refused"}, "0 0 0 0")], "3m"),
    Case("ZooApiKeysReloadRefused",
         [series("zoo:api_key_reloads_total", {**CP, "outcome": "refused"}, "0 0 1 1")], "3m",
         [({**CP, "outcome": "refused"}, "A reload of the API keys (SIGHUP) was refused.")]),
    Case("ZooApiKeysReloadRefused", [series("zoo:api_key_reloads_total", {**CP, "outcome": "ok"}, "0 0 1 1")], "3m"),
    Case("ZooGatewayStoreWriteErrors",
         [series("zoo:gateway_store_write_errors_total", {**CP, "store": "files"}, "0 0 4 4")], "3m",
         [({"store": "files"}, "Writes to the --files-dir store files failed in the last 10 minutes.")]),
    Case("ZooGatewayStoreWriteErrors",
         [series("zoo:gateway_store_write_errors_total", {**CP, "store": "files"}, "4x30")], "25m"),
    Case("ZooTraceExportFailing",
         [_counter("zoo:trace_exports_total", {**CP, "service": "zoo-controlplane", "result": "failure"}, "1")],
         "25m", [({"service": "zoo-controlplane"},
                  "zoo-controlplane cannot export its spans to the OpenTelemetry collector.")]),
    Case("ZooTraceExportFailing",
         [_counter("zoo:trace_exports_total", {**CP, "service": "zoo-controlplane", "result": "success"}, "10")],
         "25m"),
    Case("ZooGcPausesLong", _gc_pauses("a:9100", slow=True), "25m",
         [({"job": "zoo-agents", "instance": "a:9100"}, "a:9100: the P99 garbage collector pause is over 50 ms.")]),
    Case("ZooGcPausesLong", _gc_pauses("a:9100", slow=False), "25m"),
]  # fmt: skip


# the recording rules' values on a small history (promtool's promql_expr_test)
RECORDS: list[tuple[list[tuple[str, str]], str, str, list[tuple[str, float]]]] = [
    ([*_sleep("a", "weights_offloaded"), *_sleep("b", "awake")], "zoo:node_asleep", "2m",
     [('zoo:node_asleep{model="m",node="a"}', 1), ('zoo:node_asleep{model="m",node="b"}', 0)]),
    ([_counter("zoo:rejected_requests_total", {**CP, "reason": "overloaded"}, "10"),
      _counter("zoo:rejected_requests_total", {**CP, "reason": "no_node"}, "15"),
      _counter("zoo:router_decisions_total", {**CP, "policy": "p", "node": "a"}, "75")],
     "zoo:requests_refused_capacity:ratio_rate5m", "10m",
     [("zoo:requests_refused_capacity:ratio_rate5m", 0.25)]),
]  # fmt: skip
