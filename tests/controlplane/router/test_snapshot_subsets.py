"""Snapshots of a subset of a group (LoRA-capable nodes, an admission retry without the refused node) keep the
policies' and admission's tables incremental: a subgroup on a hello fact keeps the registry's change mark
(router/node_changes.py), each group has its own table, and a table rebuilt for an unmarked subset reuses the
rows it derived already."""

from __future__ import annotations

from controlplane.admission import AdmissionControl
from controlplane.registry import ClusterRegistry
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_table import NodeTable
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock

GPUS = ("h100-sxm", "a100-80gb", "l4", "t4")


def _registry(make_hello, num_nodes: int = 40) -> ClusterRegistry:
    registry = ClusterRegistry(ManualClock(), heartbeat_timeout_s=1e9)
    for k in range(num_nodes):
        registry.join(make_hello(f"n{k:02d}", gpu=GPUS[k % len(GPUS)], max_loras=2 if k % 2 else 0))
    return registry


def _lora_snapshot(registry: ClusterRegistry) -> ClusterSnapshot:
    snapshot = registry.snapshot(model="m")
    nodes = tuple(v for v in snapshot.nodes if v.max_loras > 0)
    return ClusterSnapshot(snapshot.now_s, nodes, snapshot.changes.subgroup("max_loras>0"))


def test_lora_and_plain_requests_alternating_derive_only_the_changed_nodes(make_hello, make_report, make_route_request):
    registry = _registry(make_hello)
    policy = HardwareAwarePolicy(RouterConfig(hardware_aware_use_prefix=False))
    derived: list[str] = []
    derive = policy._derive
    policy._tables = type(policy._tables)(
        lambda v: derived.append(v.node_id) or derive(v), policy._tables._num_columns, lambda v: ()
    )
    admission = AdmissionControl()
    plain, lora = make_route_request(num_prompt_tokens=300), make_route_request(num_prompt_tokens=300, lora_name="a")
    for request, snapshot in ((plain, registry.snapshot(model="m")), (lora, _lora_snapshot(registry))):
        assert policy.choose(request, snapshot) is not None
        assert admission.check(snapshot) is None
    assert len(derived) == 40 + 20  # each table built once
    for step in range(6):
        derived.clear()
        node_id = f"n{(7 * step) % 40:02d}"
        registry.report(make_report(node_id, queued_prefill_tokens=1000 * (step + 1)))
        full, sub = registry.snapshot(model="m"), _lora_snapshot(registry)
        assert policy.choose(plain, full) is not None
        assert policy.choose(lora, sub) is not None
        assert admission.check(full) is None and admission.check(sub) is None
        assert derived == [node_id]  # derived once as logged (shared by the tables holding it); no rebuild
    assert sorted(t.num_rebuilds for t in admission._tables.values()) == [1, 1]
    lora_table = policy._tables.get("m", "default", _lora_snapshot(registry).changes.group)
    assert lora_table.node_ids == [f"n{k:02d}" for k in range(1, 40, 2)]
    assert list(lora_table.values[:, 3]) == list(derive(_lora_snapshot(registry).nodes[3]))


def test_a_rebuilt_table_reuses_the_rows_of_views_it_derived_already(make_hello, make_report):
    registry = _registry(make_hello, 30)
    derived: list[str] = []
    policy = HardwareAwarePolicy(RouterConfig())
    table = NodeTable(
        lambda v: derived.append(v.node_id) or policy._derive(v), policy._tables._num_columns, lambda v: v.lora_resident
    )
    registry.report(make_report("n05", lora_resident=["x"]))
    full = registry.snapshot(model="m").nodes
    table.sync(full)
    derived.clear()
    registry.report(make_report("n20", num_running=5, lora_resident=["x"]))
    for refused in ("n05", "n11"):  # admission retries: the snapshot less the refused node, no mark
        nodes = tuple(v for v in registry.snapshot(model="m").nodes if v.node_id != refused)
        table.sync(nodes)
        assert [v.node_id for v in table.nodes] == [v.node_id for v in nodes]
        for i, view in enumerate(nodes):
            assert list(table.values[:, i]) == list(policy._derive(view)) and table.rows[i] == policy._derive(view)
        assert table.tagged("x") == {i for i, v in enumerate(nodes) if v.node_id in ("n05", "n20")}
        assert table.rank.tolist() == list(range(29))
    # the new view, and n05 back after the table held the set without it; every other row reused
    assert derived == ["n20", "n05"]
    assert table.num_rebuilds == 3
