"""Variants declared to the capacity plan (controlplane/capacity_variants.py): checked as read, planned before any
node of them joins."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.capacity_plan import CapacityPlanConfig, CapacityPlanner, PlanNode
from controlplane.capacity_variants import MAX_DECLARED_VARIANTS, DeclaredVariant, declared_variants, table_gpu


def test_a_gpu_type_is_named_as_its_nodes_report_it_and_priced_by_the_gpu_table():
    assert table_gpu("h100-sxm")[0] == table_gpu("H100")[0] == "H100"  # a profile name, or the reported type
    assert table_gpu("l4") == table_gpu("L4") and 0.2 < table_gpu("L4")[1] < 0.3
    assert table_gpu("A100-80GB")[1] == pytest.approx(1.0)  # the reference
    assert table_gpu("MI300X") == ("MI300X", 0.0)  # not in the table: as given, no power
    (l4, mi) = declared_variants(
        [{"model": "m", "gpu_type": "l4"}, {"model": "m", "gpu_type": "MI300X", "cell": "west", "power_score": 3}]
    )
    assert l4 == DeclaredVariant("m", "L4", "default", table_gpu("L4")[1])
    assert mi == DeclaredVariant("m", "MI300X", "west", 3.0) and mi.key == ("m", "west", "MI300X")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ({"model": "m"}, "must be an array of tables"),
        (["m"], r"variants\[0\] must be a table"),
        ([{"model": "m", "gpu_type": "L4", "replicas": 2}], "unknown keys \\['replicas'\\]"),
        ([{"gpu_type": "L4"}], "model must be a non-empty string"),
        ([{"model": " ", "gpu_type": "L4"}], "model must be a non-empty string"),
        ([{"model": "m", "gpu_type": 4}], "gpu_type must be a non-empty string"),
        ([{"model": "m", "gpu_type": "L4", "cell": ""}], "cell must be a non-empty string"),
        ([{"model": "m" * 257, "gpu_type": "L4"}], "at most 256 characters"),
        ([{"model": "m", "gpu_type": "MI300X"}], "does not know gpu_type 'MI300X'.*give its power_score"),
        ([{"model": "m", "gpu_type": "L4", "power_score": True}], "power_score must be a number"),
        ([{"model": "m", "gpu_type": "L4", "power_score": "0.2"}], "power_score must be a number"),
        ([{"model": "m", "gpu_type": "L4", "power_score": 0}], "power_score must be a number in"),
        ([{"model": "m", "gpu_type": "L4", "power_score": math.inf}], "power_score must be a number in"),
        ([{"model": "m", "gpu_type": "L4", "power_score": math.nan}], "power_score must be a number in"),
        ([{"model": "m", "gpu_type": "L4"}, {"model": "m", "gpu_type": "l4"}], "declared twice"),
        ([{"model": "m", "gpu_type": "L4"}] * (MAX_DECLARED_VARIANTS + 1), f"at most {MAX_DECLARED_VARIANTS}"),
    ],
)
def test_a_bad_declaration_is_refused_naming_what_is_wrong(value, says):
    with pytest.raises(ValueError, match=says):
        CapacityPlanConfig.from_table({"variants": value})


def test_the_plans_file_declares_them(tmp_path):
    from controlplane.capacity_plan import load_capacity_plan

    path = tmp_path / "zoo.toml"
    path.write_text('[capacity]\nmin_nodes = { t4 = 0 }\n[[capacity.variants]]\nmodel = "m"\ngpu_type = "T4"\n')
    assert load_capacity_plan(str(path)).variants == (DeclaredVariant("m", "T4", "default", table_gpu("T4")[1]),)


def test_a_declared_variant_is_planned_before_any_node_of_it_joins():
    """min_nodes 0: planned at zero nodes, its model served and a request for it held; a refused arrival asks for one
    node. min_nodes 1: one node asked for at once. A node that joins brings its own capacity."""
    l4 = table_gpu("L4")[1]
    declared = declared_variants([{"model": "cold", "gpu_type": "L4"}, {"model": "warm", "gpu_type": "H100"}])
    planner = CapacityPlanner(CapacityPlanConfig(min_nodes={"l4": 0}, variants=declared))
    assert planner.served_models(["other"]) == ["other", "cold", "warm"]
    assert planner.cold_start_wait_s("cold") == 300.0 and planner.cold_start_wait_s("other") == 0.0
    arrivals = {("cold", "default"): 0, ("warm", "default"): 0}
    cold, warm = planner.plan(0.0, [], 1.0, arrivals)
    assert (cold.model, [(v.gpu_type, v.num_nodes, v.desired_nodes, v.node_capacity) for v in cold.variants]) == (
        "cold",
        [("L4", 0, 0, l4)],
    )
    assert [(v.gpu_type, v.num_nodes, v.desired_nodes) for v in warm.variants] == [("H100", 0, 1)]  # its min_nodes
    arrivals[("cold", "default")] += 1  # a request, refused for want of a node
    cold, _ = planner.plan(1.0, [], 1.0, arrivals)
    assert [(v.num_nodes, v.desired_nodes) for v in cold.variants] == [(0, 1)]
    joined = PlanNode("l9", "cold", "default", "L4", 0.5, 0.0, 0, 0, 0.0)  # its hello says more power
    cold, _ = planner.plan(2.0, [joined], 1.0, arrivals)
    assert [(v.num_nodes, v.desired_nodes, v.node_capacity) for v in cold.variants] == [(1, 1, 0.5)]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["H100", "L4", "T4"]), st.sampled_from(["m", "n"])), max_size=4, unique=True),
    st.lists(st.tuples(st.sampled_from(["H100", "L4"]), st.floats(allow_nan=True), st.floats(allow_nan=True))),
    st.lists(st.tuples(st.floats(0, 1e4), st.integers(0, 10**6)), min_size=1, max_size=8),
    st.integers(0, 2),
)
def test_declared_variants_beside_any_reports_over_time_are_planned_within_their_bounds(declared, specs, steps, low):
    """Whatever nodes come and go with whatever figures, and whatever arrives: every declared variant is planned at
    every step, at least its min_nodes, a finite count; its model is served."""
    variants = declared_variants([{"model": m, "gpu_type": t} for t, m in declared])
    planner = CapacityPlanner(CapacityPlanConfig(default_min_nodes=low, variants=variants))
    nodes = [PlanNode(f"x{i}", "m", "default", t, power, kv, 0, 0, 0.0) for i, (t, power, kv) in enumerate(specs)]
    now_s, arrived = 0.0, {("m", "default"): 0, ("n", "default"): 0}
    for k, (dt, more) in enumerate(steps):
        now_s += dt
        arrived[("m", "default")] += more
        plans = planner.plan(now_s, nodes if k % 2 else [], 1.0, arrived)
        planned = {(p.model, p.cell, v.gpu_type): v.desired_nodes for p in plans for v in p.variants}
        for v in variants:
            assert isinstance(planned[v.key], int) and low <= planned[v.key] <= 10**7
    assert set(planner.served_models([])) >= {v.model for v in variants}
