"""The fast hardware_aware decision chooses exactly as the old one (bench/hardware_aware_baseline.py).

Hypothesis drives a real ClusterRegistry through random histories (joins with mixed GPUs, load reports,
routing, first tokens, finishes, suspect/restore, drains, leaves, rejoins) and, at every request, asks both
policies on the same snapshot: the registry's own (with its change-log mark), a hand-filtered one (no mark,
the tuple-comparison path), or another cell's, sometimes after a report has already replaced one of its
views (the fast policy derives rows as views are logged, so it must fall back to the snapshot's). The
chosen node ids must be equal, every time; the fast policy's choice must also be a least-``predict_cost_s``
node (the scalar formula).
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.gpu_table import gpu_profile, power_score
from bench.hardware_aware_baseline import HardwareAwareBaseline
from controlplane.registry import ClusterRegistry
from controlplane.router.node_changes import NodeChangeLog
from controlplane.router.policies.cost_reference import lost_cause_fastest_rate, predict_cost_s, triage_spares_capable
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from transport.messages import KVInfo, LoadReport, NodeHello

GPUS = ("h200", "h100-sxm", "a100-80gb", "a100-40gb", "l40s", "l4", "a10", "t4")
NODE_IDS = tuple(f"n{i:02d}" for i in range(12))
ADAPTERS = ("a", "b", "c")
BLOCK = 16

CONFIGS = (
    RouterConfig(default_model_params_b=8.0),
    # the defaults before the tenth and eleventh tuning grids: sacrifice off, the 30 s KV charge
    RouterConfig(default_model_params_b=8.0, slo_sacrifice_weight=0.0, kv_full_penalty_s=30.0),
    RouterConfig(default_model_params_b=1.0, slo_tpot_miss_penalty_s=10.0, kv_reserve_output_tokens=64),
    RouterConfig(slo_ttft_miss_penalty_s=0.0, kv_full_penalty_s=0.0, tpot_weight=0.0),
    RouterConfig(hardware_aware_use_prefix=False, slo_ttft_s=0.05, lora_load_estimate_s=0.3),
    RouterConfig(tpot_weight=1.0, tpot_horizon_tokens=8, prefix_max_candidates=2, kv_reserve_running_tokens=0),
    RouterConfig(default_model_params_b=8.0, slo_triage_penalty_s=5.0, slo_tpot_harm_penalty_s=3.0, slo_tpot_s=0.02),
    RouterConfig(slo_ttft_miss_penalty_s=0.0, slo_triage_penalty_s=2.0, slo_ttft_s=0.05, slo_tpot_harm_penalty_s=0.5),
    RouterConfig(default_model_params_b=8.0, slo_pack_weight=2.0, slo_ttft_s=0.5),  # bin packing
    RouterConfig(
        default_model_params_b=8.0, slo_pack_weight=2.0, slo_ttft_s=0.5, slo_pack_needs_tpot=True, slo_tpot_s=0.02
    ),
    RouterConfig(default_model_params_b=8.0, slo_ttft_s=0.2, slo_triage_penalty_s=5.0, slo_sacrifice_weight=20.0),
    RouterConfig(
        default_model_params_b=8.0,
        slo_ttft_s=0.2,
        slo_triage_penalty_s=5.0,
        slo_sacrifice_weight=20.0,
        slo_sacrifice_max_ttft_s=0.5,
    ),
    RouterConfig(
        default_model_params_b=8.0,
        slo_ttft_s=0.2,
        slo_triage_penalty_s=5.0,
        slo_sacrifice_weight=20.0,
        slo_sacrifice_max_rate_ratio=0.2,
    ),
    RouterConfig(
        default_model_params_b=8.0,
        slo_ttft_s=0.2,
        slo_sacrifice_weight=10.0,
        slo_sacrifice_max_ttft_s=0.5,
        slo_sacrifice_max_rate_ratio=0.4,
    ),
    RouterConfig(default_model_params_b=8.0, slo_ttft_s=0.2, slo_ttft_late_weight=2.0),  # lateness priced
    RouterConfig(default_model_params_b=8.0, slo_ttft_late_weight=0.5, slo_tpot_harm_count=True),
)
# the old decision (bench/hardware_aware_baseline.py) predates sacrificing long prompts (GRID_29): compared with it off
CONFIGS = tuple(replace(c, slo_sacrifice_long_share=0.0) for c in CONFIGS)

hellos = st.builds(
    lambda node_id, gpu, cell, blocks, max_len, max_loras, rate, step_ms: NodeHello(
        node_id=node_id,
        model="m",
        backend="sim",
        hardware=gpu_profile(gpu),
        kv=KVInfo(blocks, 0, BLOCK, 0),
        max_model_len=max_len,
        power_score=power_score(gpu_profile(gpu)),
        cell=cell,
        prefill_tok_per_s=rate,
        decode_step_ms=step_ms,
        max_loras=max_loras,
    ),
    st.sampled_from(NODE_IDS),
    st.sampled_from(GPUS),
    st.sampled_from(("east", "east", "west")),
    st.integers(8, 4096),
    st.sampled_from((256, 2048, 8192)),
    st.sampled_from((0, 2)),
    st.sampled_from((0.0, 0.0, 1500.0, 40_000.0)),
    st.sampled_from((0.0, 0.0, 7.5, 60.0)),
)

reports = st.builds(
    lambda node_id, running, waiting, swapped, free, queued, batch, rate, step_ms, resident, load_s, received: (
        LoadReport(
            node_id=node_id,
            num_running=running,
            num_waiting=waiting,
            num_swapped=swapped,
            kv_usage=0.5,
            num_free_device_blocks=free,
            queued_prefill_tokens=queued,
            decode_batch_size=batch,
            recent_step_ms=[],
            prefill_tok_per_s=rate,
            decode_step_ms=step_ms,
            num_preemptions_total=0,
            num_requests_finished_total=0,
            prefix_cache_hit_rate=0.0,
            num_requests_received_total=received,
            lora_resident=resident,
            lora_load_s=load_s,
        )
    ),
    st.sampled_from(NODE_IDS),
    st.integers(0, 64),
    st.integers(0, 16),
    st.sampled_from((0, 0, 0, 1)),
    st.integers(0, 4096),
    st.integers(0, 30_000),
    st.integers(0, 64),
    st.sampled_from((0.0, 900.0, 12_000.0, 60_000.0)),
    st.sampled_from((0.0, 5.0, 25.0, 90.0)),
    st.lists(st.sampled_from(ADAPTERS), max_size=2, unique=True),
    st.sampled_from((0.0, 0.0, 0.02, 1.5)),
    st.sampled_from((-1, 0, 3)),
)

PREFIXES = (tuple(range(10, 14)), tuple(range(20, 100)), tuple(range(1000, 1300)))  # 4, 80, 300 blocks
requests = st.tuples(
    st.integers(1, 9000),  # prompt tokens (some longer than a node can take)
    st.integers(1, 3000),  # max tokens
    st.sampled_from((None, *range(len(PREFIXES)))),
    st.sampled_from((None, None, None, "a", "b", "d")),
    st.sampled_from(("default", "default", "gold")),
    st.sampled_from((None, 0.2, 4.0)),  # the class's TTFT SLO
    st.sampled_from(("registry", "registry", "registry", "filtered", "cell", "lora")),
    st.one_of(st.none(), st.none(), reports),  # a report that lands between the snapshot and the decision
)

events = st.one_of(
    st.tuples(st.just("join"), hellos),
    st.tuples(st.just("report"), reports),
    st.tuples(st.just("request"), requests),
    st.tuples(st.just("request"), requests),
    st.tuples(st.just("request"), requests),
    st.tuples(st.sampled_from(("first_token", "finish")), st.integers(0, 10**6)),
    st.tuples(st.sampled_from(("leave", "suspect", "heartbeat", "drain", "blip")), st.sampled_from(NODE_IDS)),
)


def _request(i: int, spec: tuple) -> RouteRequest:
    num_prompt_tokens, max_tokens, prefix, lora_name, traffic_class, slo_ttft_s, _, _ = spec
    num_blocks = num_prompt_tokens // BLOCK
    chain = (
        ()
        if prefix is None
        else (PREFIXES[prefix] + tuple(10**6 * (i + 1) + k for k in range(num_blocks)))[:num_blocks]
    )
    return RouteRequest(
        f"r{i}", "m", num_prompt_tokens, max_tokens, chain, traffic_class, slo_ttft_s=slo_ttft_s, lora_name=lora_name
    )


def _snapshot_for(registry: ClusterRegistry, how: str, i: int) -> ClusterSnapshot:
    if how == "cell":
        return registry.snapshot(model="m", cell="west")
    snapshot = registry.snapshot(model="m")
    if how == "filtered":  # as request_intake does for refusals: a tuple of its own, no mark
        return ClusterSnapshot(snapshot.now_s, tuple(v for k, v in enumerate(snapshot.nodes) if (k + i) % 3))
    if how == "lora":  # as request_intake does for LoRA requests: a subgroup on a hello fact, with its mark
        lora_nodes = tuple(v for v in snapshot.nodes if v.max_loras > 0)
        return ClusterSnapshot(snapshot.now_s, lora_nodes, snapshot.changes.subgroup("max_loras>0"))
    return snapshot


def _check_least_cost(
    chosen: str | None, request: RouteRequest, snapshot: ClusterSnapshot, config, long_ok: bool = True
) -> None:
    if config.hardware_aware_use_prefix and request.block_hashes:
        return  # the prefix index's credit is the policy's own memory; the baseline comparison covers it
    fits = [
        v for v in snapshot.nodes if request.num_prompt_tokens <= min(v.max_model_len - 1, v.num_device_blocks * BLOCK)
    ]
    if not fits:
        assert chosen is None
        return
    scalar_config = replace(config, slo_ttft_s=request.slo_ttft_s or config.slo_ttft_s)
    spare = triage_spares_capable(snapshot.nodes, request.num_prompt_tokens, scalar_config, scalar_config.slo_ttft_s)
    lost = lost_cause_fastest_rate(snapshot.nodes, request, scalar_config, scalar_config.slo_ttft_s, long_ok)
    costs = {v.node_id: predict_cost_s(v, request, scalar_config, 0, spare, lost, long_ok) for v in fits}
    assert costs[chosen] == pytest.approx(min(costs.values()), rel=1e-9, abs=1e-12)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CONFIGS), st.lists(events, min_size=5, max_size=60), st.lists(hellos, min_size=1, max_size=8))
def test_fast_choice_equals_the_old_decision_on_random_registry_histories(config, history, first_nodes):
    _replay(config, history, first_nodes)


def _replay(config, history, first_nodes) -> None:
    registry = ClusterRegistry(ManualClock(), heartbeat_timeout_s=1e9)
    for hello in first_nodes:
        registry.join(hello)
    fast, old = HardwareAwarePolicy(config), HardwareAwareBaseline(config)
    routed: list[tuple[str, str]] = []
    for i, (kind, arg) in enumerate(history):
        if kind == "join":
            registry.join(arg)
            for policy in (fast, old):
                policy.on_node_removed(arg.node_id)  # a restart: its cache is gone
        elif kind == "report":
            registry.report(arg)
        elif kind in ("first_token", "finish") and routed:
            node_id, request_id = routed[arg % len(routed)]
            if kind == "first_token":
                registry.on_first_token(node_id, request_id)
            else:
                registry.on_finished(node_id, request_id)
                routed.remove((node_id, request_id))
        elif kind == "leave":
            registry.leave(arg)
            for policy in (fast, old):
                policy.on_node_removed(arg)
        elif kind in ("suspect", "heartbeat", "drain"):
            getattr(registry, kind)(arg)
        elif kind == "blip":  # a failed send, then a heartbeat: same members, but marks no longer comparable
            registry.suspect(arg)
            registry.heartbeat(arg)
        elif kind == "request":
            request = _request(i, arg)
            snapshot = _snapshot_for(registry, arg[-2], i)
            if arg[-1] is not None:
                registry.report(arg[-1])  # the snapshot is now stale: both must decide on it as it is
            chosen = fast.choose(request, snapshot)
            assert chosen == old.choose(request, snapshot), (i, request)
            _check_least_cost(chosen, request, snapshot, config, fast._long_ok)
            if chosen is not None:
                for policy in (fast, old):
                    policy.on_routed(request, chosen)
                registry.on_routed(chosen, request.request_id, request.num_prompt_tokens)
                routed.append((chosen, request.request_id))


def test_the_change_log_names_what_changed_and_forgets_old_positions(make_node_view):
    log = NodeChangeLog(capacity=4)
    seen = []
    log.watch(seen.append)
    first = log.mark(("m", None))
    for node_id in ("a", "b", "a"):
        log.record(make_node_view(node_id))
    assert [v.node_id for v in seen] == ["a", "b", "a"]
    second = log.mark(("m", None))
    assert second.changed_since(first) == ["a", "b", "a"]
    assert second.changed_since(second) == []
    log.record(make_node_view("c"))
    assert second.changed_since(first) == ["a", "b", "a"]  # what changed between the two marks
    assert second.changed_since(first, to_now=True) == ["a", "b", "a", "c"]  # and since
    assert first.changed_since(second) is None  # taken out of order: not comparable
    assert log.mark(("m", "east")).changed_since(first) is None  # another group
    assert second.changed_since(None) is None
    log.reorder()
    assert log.mark(("m", None)).changed_since(second) is None  # membership changed
    for k in range(10):
        log.record(make_node_view(f"x{k}"))
    assert log.mark(("m", None)).changed_since(log.mark(("m", None))) == []
    assert log.since(first.seq) is None  # forgotten: the table compares tuples instead
    with pytest.raises(ValueError):
        NodeChangeLog(capacity=0)


def test_registry_snapshots_mark_view_changes_and_membership(make_hello, make_report):
    registry = ClusterRegistry(ManualClock())
    for node_id in ("a", "b", "c"):
        registry.join(make_hello(node_id))
    before = registry.snapshot(model="m")
    registry.report(make_report("b", num_running=3))
    registry.on_routed("c", "r1", 100)
    after = registry.snapshot(model="m")
    assert after.changes.changed_since(before.changes) == ["b", "c"]
    assert [v is w for v, w in zip(before.nodes, after.nodes)] == [True, False, False]
    registry.report(make_report("b", num_running=3))  # the same values: the view is kept, nothing logged
    assert registry.snapshot(model="m").changes.changed_since(after.changes) == []
    registry.suspect("a")
    assert registry.snapshot(model="m").changes.changed_since(after.changes) is None


def test_rows_are_derived_when_the_registry_logs_a_view_not_at_the_decision(
    make_hello, make_report, make_route_request
):
    registry = ClusterRegistry(ManualClock())
    for k in range(50):
        registry.join(make_hello(f"n{k:02d}", gpu=GPUS[k % len(GPUS)]))
    policy = HardwareAwarePolicy(RouterConfig(hardware_aware_use_prefix=False))
    derived: list[str] = []
    derive = policy._derive
    policy._tables = type(policy._tables)(
        lambda v: derived.append(v.node_id) or derive(v), policy._tables._num_columns, lambda v: v.lora_resident
    )
    request = make_route_request(num_prompt_tokens=500)
    policy.choose(request, registry.snapshot(model="m"))
    assert len(derived) == 50  # built once
    derived.clear()
    registry.report(make_report("n07", queued_prefill_tokens=5000, lora_resident=["a"]))
    registry.on_routed("n31", "r1", 200)
    assert derived == ["n07", "n31"]  # as the registry logged the views
    policy.choose(request, registry.snapshot(model="m"))
    assert derived == ["n07", "n31"]  # nothing left to derive at the decision
    table = policy._tables.get("m", "default", registry.snapshot(model="m").changes.group)
    assert table.tagged("a") == {7} and table.num_rebuilds == 1
    # a snapshot taken before a change, decided on after it: its own (older) view is used
    stale = registry.snapshot(model="m")
    registry.on_routed("n31", "r2", 9000)
    derived.clear()
    policy.choose(request, stale)
    assert derived == ["n31"]
    assert list(table.values[:, 31]) == list(derive(stale.nodes[31]))
    assert stale.nodes[31] is not registry.snapshot(model="m").nodes[31]
    # the same when the snapshot's mark is not comparable (membership blip): the tuple comparison path
    registry.suspect("n40")
    registry.heartbeat("n40")
    stale = registry.snapshot(model="m")
    registry.report(make_report("n07", queued_prefill_tokens=100))
    policy.choose(request, stale)
    assert list(table.values[:, 7]) == list(derive(stale.nodes[7]))
