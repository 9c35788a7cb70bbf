"""The autoscaling signal (controlplane/capacity_plan.py): nodes wanted per GPU type, on hand-made pools."""

from __future__ import annotations

import math

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from controlplane.capacity_plan import (
    CapacityPlanConfig,
    CapacityPlanner,
    PlanNode,
    load_capacity_plan,
    node_load,
    plan_nodes,
)

# power scores: an H100 is 4 L4s here
H100, L4 = 4.0, 1.0


def node(node_id: str, gpu_type: str = "l4", *, kv: float = 0.0, waiting: int = 0, queued: int = 0,
         rate: float = 0.0, model: str = "m", cell: str = "default") -> PlanNode:  # fmt: skip
    power = H100 if gpu_type == "h100" else L4
    return PlanNode(node_id, model, cell, gpu_type, power, kv, waiting, queued, rate)


def variants(plan) -> dict[str, tuple[int, int]]:
    return {v.gpu_type: (v.num_nodes, v.desired_nodes) for v in plan.variants}


def test_a_node_is_as_loaded_as_its_fuller_resource():
    config = CapacityPlanConfig(kv_threshold=0.8, backlog_share=0.5)
    assert node_load(node("a", kv=0.4), 1.0, config) == pytest.approx(0.5)
    # 5,000 prompt tokens queued at a measured 10,000 tok/s: 0.5 s, the whole share of a 1 s TTFT target
    assert node_load(node("a", kv=0.4, queued=5_000, rate=10_000), 1.0, config) == pytest.approx(1.0)
    # its waiting requests against the queue threshold (WVA's rule): a full batch holds them, not the prefill
    assert node_load(node("a", waiting=10), 1.0, config) == pytest.approx(2.0)
    assert node_load(node("a", waiting=10, queued=50, rate=10_000), 1.0, config) == pytest.approx(2.0)


def test_the_same_queue_weighs_more_on_a_slower_gpu():
    """Hardware awareness: 4,000 queued tokens are 0.1 s of an H100's prefill and 0.8 s of an L4's."""
    config = CapacityPlanConfig()
    fast = node_load(node("h", "h100", queued=4_000, rate=40_000), 1.0, config)
    slow = node_load(node("l", "l4", queued=4_000, rate=5_000), 1.0, config)
    assert slow == pytest.approx(8 * fast)


def test_scale_up_adds_the_cheapest_capacity():
    # H100 at 4.0 per node is 1.0 per unit of power; L4 at 0.8 per node is 0.8: L4s are the cheaper capacity
    config = CapacityPlanConfig(gpu_cost={"h100": 4.0, "l4": 0.8}, target_utilisation=0.5)
    nodes = [node("h0", "h100", kv=0.8), node("l0", kv=0.8), node("l1", kv=0.8)]
    (plan,) = CapacityPlanner(config).plan(0.0, nodes, 1.0)
    # load = 1.0 * (4 + 1 + 1) = 6, wanted 12, capacity 6: 6 more units, six L4s
    assert plan.load == pytest.approx(6.0) and plan.wanted_capacity == pytest.approx(12.0)
    assert plan.utilisation == pytest.approx(1.0)
    assert variants(plan) == {"h100": (1, 1), "l4": (2, 8)}


def test_equal_costs_add_the_strongest_type_the_fewest_nodes():
    nodes = [node("h0", "h100", kv=0.8), node("l0", kv=0.8)]
    (plan,) = CapacityPlanner(CapacityPlanConfig(target_utilisation=0.5)).plan(0.0, nodes, 1.0)
    # load 5, wanted 10, capacity 5: two H100s (8) cover it where five L4s would be needed
    assert variants(plan) == {"h100": (1, 3), "l4": (1, 1)}


def test_a_type_at_its_maximum_overflows_to_the_next():
    config = CapacityPlanConfig(gpu_cost={"h100": 4.0, "l4": 0.8}, max_nodes={"l4": 4}, target_utilisation=0.5)
    nodes = [node("h0", "h100", kv=0.8), node("l0", kv=0.8), node("l1", kv=0.8)]
    (plan,) = CapacityPlanner(config).plan(0.0, nodes, 1.0)
    # 6 more units: two L4s reach the maximum of 4, the other 4 units are one H100
    assert variants(plan) == {"h100": (1, 2), "l4": (2, 4)}


def test_scale_down_sheds_the_dearest_capacity_while_the_rest_covers_the_load():
    config = CapacityPlanConfig(gpu_cost={"h100": 4.0, "l4": 2.0}, target_utilisation=0.5, scale_down_window_s=0)
    idle = [node("h0", "h100"), node("h1", "h100"), *(node(f"l{i}", kv=0.4) for i in range(4))]
    (plan,) = CapacityPlanner(config).plan(0.0, idle, 1.0)
    # load 4 * 0.5 = 2, wanted 4, capacity 12; L4s cost 2.0 per unit (the dearest): shed to 1, then one H100
    # would leave 4 + 1 = 5 >= 4, but the other (min_nodes 1) stays
    assert variants(plan) == {"h100": (2, 1), "l4": (4, 1)}
    assert plan.capacity == 12.0


def test_min_nodes_hold_an_idle_pool():
    config = CapacityPlanConfig(min_nodes={"l4": 2}, default_min_nodes=1, scale_down_window_s=0)
    idle = [node("h0", "h100"), node("h1", "h100"), *(node(f"l{i}") for i in range(4))]
    (plan,) = CapacityPlanner(config).plan(0.0, idle, 1.0)
    assert variants(plan) == {"h100": (2, 1), "l4": (4, 2)}


def test_scale_up_is_published_at_once_and_scale_down_after_the_window():
    planner = CapacityPlanner(CapacityPlanConfig(target_utilisation=0.5, scale_down_window_s=300))
    busy = [node(f"l{i}", kv=0.8) for i in range(2)]
    idle = [node(f"l{i}") for i in range(4)]
    (plan,) = planner.plan(0.0, busy, 1.0)
    assert variants(plan) == {"l4": (2, 4)}  # at once
    (plan,) = planner.plan(100.0, idle, 1.0)
    assert plan.variants[0].raw_desired_nodes == 1 and plan.variants[0].desired_nodes == 4  # held
    (plan,) = planner.plan(299.0, idle, 1.0)
    assert plan.variants[0].desired_nodes == 4
    (plan,) = planner.plan(301.0, idle, 1.0)  # the busy plan left the window
    assert plan.variants[0].desired_nodes == 1


def test_the_window_keeps_one_plan_per_second_whatever_the_call_rate():
    planner = CapacityPlanner(CapacityPlanConfig(scale_down_window_s=10))
    for i in range(10_000):
        planner.plan(i / 1000, [node("l0")], 1.0)
    (window,) = planner._history.values()
    assert len(window) <= 11
    now = CapacityPlanner(CapacityPlanConfig(scale_down_window_s=0))  # no window: each plan as it is
    busy, idle = [node("l0", kv=0.8), node("l1", kv=0.8)], [node("l0"), node("l1")]
    assert [now.plan(t, nodes, 1.0)[0].variants[0].desired_nodes for t, nodes in
            ((0.0, busy), (0.5, idle), (0.6, idle), (2.0, busy), (2.0, idle))] == [3, 1, 1, 3, 3]  # fmt: skip


def test_a_ramp_of_arrivals_asks_for_the_nodes_it_will_need_by_the_time_they_join():
    """The load now fills the pool to its target; the arrivals grow by 1/s each second (100/s to 220/s over the
    window sampled): by the time a node asked for now has joined (forecast_lead_s), the pool gets 60 more a second."""
    config = CapacityPlanConfig(target_utilisation=0.5, forecast_lead_s=60, trend_window_s=120)
    nodes = [node("l0", kv=0.4), node("l1", kv=0.4)]  # load 1, capacity 2: at the target
    forecast, reactive = CapacityPlanner(config), CapacityPlanner(config)
    for k in range(25):  # 120 s, every 5 s
        t = 5.0 * k
        routed = {("m", "default"): round(100 * t + t * t / 2), ("other", "default"): 7}
        (plan,) = forecast.plan(t, nodes, 1.0, routed)
        (still,) = reactive.plan(t, nodes, 1.0)  # no arrivals given: no forecast
    rate_now = 100 + 120
    assert plan.growth == pytest.approx((rate_now + 60) / rate_now, rel=1e-3)
    assert plan.wanted_capacity == pytest.approx(2 * plan.growth)
    assert variants(plan) == {"l4": (2, 3)}  # 2.55 units wanted
    assert still.growth == 1.0 and variants(still) == {"l4": (2, 2)}
    # the arrivals hold steady again: the growth is gone, and the node asked for is shed after the window
    steady = round(100 * 120 + 120 * 120 / 2)
    for k in range(1, 100):
        (plan,) = forecast.plan(120.0 + 5 * k, nodes, 1.0, {("m", "default"): steady + 220 * 5 * k})
    assert plan.growth == 1.0 and variants(plan) == {"l4": (2, 2)}


def test_a_pool_gone_forgets_its_arrivals():
    planner = CapacityPlanner()
    planner.plan(0.0, [node("l0")], 1.0, {("m", "default"): 5})
    assert set(planner._trends) == {("m", "default")}
    planner.plan(1.0, [node("l0", model="n")], 1.0, {("m", "default"): 5})  # m has no node: not planned
    assert set(planner._trends) == set()


def test_pools_are_planned_per_model_and_cell_and_a_gone_variant_forgets_its_window():
    planner = CapacityPlanner(CapacityPlanConfig(target_utilisation=0.5, scale_down_window_s=300))
    nodes = [node("a", kv=0.8, cell="vip"), node("b", cell="batch"), node("c", model="other")]
    plans = planner.plan(0.0, nodes, 1.0)
    assert [(p.model, p.cell) for p in plans] == [("m", "batch"), ("m", "vip"), ("other", "default")]
    assert [variants(p) for p in plans] == [{"l4": (1, 1)}, {"l4": (1, 2)}, {"l4": (1, 1)}]
    planner.plan(1.0, nodes[1:], 1.0)
    assert ("m", "vip", "l4") not in planner._history


def test_only_up_and_sleeping_nodes_are_capacity(make_node_view):
    views = [make_node_view(f"n{i}", kv_usage=0.5) for i in range(5)]
    rows = {
        "n0": {"state": "up", "sleep_level": 0},
        "n1": {"state": "draining", "sleep_level": 1},  # asleep: woken by the next request
        "n2": {"state": "draining", "sleep_level": 0},  # an operator's drain: on its way out
        "n3": {"state": "suspect", "sleep_level": 0},
        "n4": {"state": "leaving", "sleep_level": 0},
    }
    assert [n.node_id for n in plan_nodes(views, rows)] == ["n0", "n1"]


def test_routed_but_unreported_prefill_counts_as_queued(make_node_view):
    view = make_node_view("n0", queued_prefill_tokens=1_000, inflight_prefill_tokens=3_000, prefill_tok_per_s=8_000)
    (planned,) = plan_nodes([view], {"n0": {"state": "up"}})
    assert planned.queued_prefill_tokens == 4_000


def test_a_bad_config_is_refused_with_its_reason():
    with pytest.raises(ValueError, match="target_utilisation"):
        CapacityPlanConfig(target_utilisation=0)
    with pytest.raises(ValueError, match="cost of l4"):
        CapacityPlanConfig(gpu_cost={"l4": -1.0})
    with pytest.raises(ValueError, match="max_nodes 1 is below its min_nodes"):
        CapacityPlanConfig(min_nodes={"l4": 2}, max_nodes={"l4": 1})
    with pytest.raises(ValueError, match="unknown keys"):
        CapacityPlanConfig.from_table({"target": 0.5})
    with pytest.raises(ValueError, match="gpu_cost must be a table"):
        CapacityPlanConfig.from_table({"gpu_cost": {"l4": "cheap"}})
    with pytest.raises(ValueError, match="gpu_cost must be a table"):
        CapacityPlanConfig.from_table({"gpu_cost": {"l4": 10**400}})  # past a float
    with pytest.raises(ValueError, match="queue_threshold must be a int"):
        CapacityPlanConfig.from_table({"queue_threshold": True})
    with pytest.raises(ValueError, match="cold_start_max_waiting must be >= 0"):
        CapacityPlanConfig.from_table({"cold_start_max_waiting": -1})
    with pytest.raises(ValueError, match="cold_start_max_waiting must be a int"):
        CapacityPlanConfig.from_table({"cold_start_max_waiting": 1.5})
    assert CapacityPlanConfig.from_table({"cold_start_max_waiting": 7}).cold_start_max_waiting == 7
    with pytest.raises(ValueError, match="forecast_lead_s must be >= 0"):
        CapacityPlanConfig(forecast_lead_s=-1.0)
    with pytest.raises(ValueError, match="which must be > 0"):
        CapacityPlanConfig.from_table({"trend_window_s": 0, "forecast_lead_s": 0})
    with pytest.raises(ValueError, match="at most trend_window_s"):  # a 10 s trend projected 2 minutes ahead
        CapacityPlanConfig.from_table({"trend_window_s": 10, "forecast_lead_s": 120})
    assert CapacityPlanConfig.from_table({"forecast_lead_s": 180, "trend_window_s": 360}).forecast_lead_s == 180.0
    for wait in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="cold_start_wait_s must be >= 0"):
            CapacityPlanConfig(cold_start_wait_s=wait)
    with pytest.raises(ValueError, match="cold_start_wait_s must be a float"):
        CapacityPlanConfig.from_table({"cold_start_wait_s": "5m"})
    assert CapacityPlanConfig.from_table({"cold_start_wait_s": 0}).cold_start_wait_s == 0.0
    with pytest.raises(ValueError, match="TTFT target"):
        CapacityPlanner().plan(0.0, [], 0.0)


def test_the_file_is_read_from_its_capacity_table(tmp_path):
    path = tmp_path / "zoo.toml"
    path.write_text("[capacity]\ntarget_utilisation = 0.6\n[capacity.gpu_cost]\nh100-sxm = 4\nl4 = 0.8\n")
    config = load_capacity_plan(str(path))
    assert config.target_utilisation == 0.6 and config.gpu_cost == {"h100-sxm": 4.0, "l4": 0.8}
    assert config.cost("L4") == 0.8 and config.cost("H100-SXM") == 4.0 and config.cost("t4") == 1.0
    path.write_text("target_utilisation = [")
    with pytest.raises(ValueError, match="invalid TOML"):
        load_capacity_plan(str(path))
    path.write_text("capacity = 5\n")
    with pytest.raises(ValueError, match="a table of settings is needed, got int"):
        load_capacity_plan(str(path))
    path.write_text("[capacity]\ntarget_utilisation = nan\n")
    with pytest.raises(ValueError, match="target_utilisation must be in"):
        load_capacity_plan(str(path))
    path.write_text("[capacity]\nmax_nodes = {l4 = -1}\n")
    with pytest.raises(ValueError, match=f"{path}: capacity plan: node counts"):
        load_capacity_plan(str(path))


pools = st.lists(
    st.tuples(st.sampled_from(["h100", "a100", "l4", "t4"]), st.floats(0, 1), st.integers(0, 40)), min_size=1,
    max_size=12,
)  # fmt: skip
POWER = {"h100": 4.0, "a100": 2.5, "l4": 1.0, "t4": 0.6}


@settings(max_examples=200, deadline=None)
@given(pools, st.dictionaries(st.sampled_from(list(POWER)), st.floats(0.1, 10)), st.floats(0.2, 1.0))
def test_the_plan_covers_the_load_and_no_node_it_keeps_is_spare(specs, costs, target):
    """Invariants: the planned capacity covers the wanted one, and no type above its minimum could lose a node
    and still cover it; each type stays within its bounds."""
    nodes = [PlanNode(f"n{i}", "m", "c", t, POWER[t], kv, w, 0, 0.0) for i, (t, kv, w) in enumerate(specs)]
    config = CapacityPlanConfig(gpu_cost=costs, target_utilisation=target, scale_down_window_s=0)
    (plan,) = CapacityPlanner(config).plan(0.0, nodes, 1.0)
    planned = sum(v.desired_nodes * v.node_capacity for v in plan.variants)
    assert planned >= plan.wanted_capacity - 1e-6
    for v in plan.variants:
        assert v.desired_nodes >= 1  # default_min_nodes
        if v.desired_nodes > 1:
            assert planned - v.node_capacity < plan.wanted_capacity + 1e-6
    assert math.isclose(plan.capacity, sum(v.num_nodes * v.node_capacity for v in plan.variants))


toml_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=3),
    max_leaves=12,
)
keys = st.sampled_from([*CapacityPlanConfig.__dataclass_fields__, "other"])


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, toml_values, max_size=5) | toml_values)
def test_any_table_is_a_config_or_a_value_error(table):
    try:
        config = CapacityPlanConfig.from_table(table)
    except ValueError:
        return
    assert 0 < config.target_utilisation <= 1 and all(n >= 0 for n in config.max_nodes.values())


figures = st.floats(allow_nan=True, allow_infinity=True) | st.just(float("nan"))
counts = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@settings(max_examples=300, deadline=None)
@example([("H100", 1.7e308, 0.9, 9, 0, 0.0), ("H100", 1.7e308, 0.9, 9, 0, 0.0)])  # their sum is past a float
@example([("L4", 0.24, float("nan"), 0, 10**18, float("inf"))])
@given(st.lists(st.tuples(st.sampled_from(["H100", "L4"]), figures, figures, counts, counts, figures), min_size=1,
                max_size=6))  # fmt: skip
def test_reports_with_any_figures_give_a_plan_and_never_an_error(specs):
    """What a node reports is not validated on the wire: NaN, infinities and absurd counts must not end the
    control plane's stats snapshot (ControlPlane.stats() plans at every one), nor ask for absurd node counts."""
    nodes = [PlanNode(f"n{i}", "m", "c", t, power, kv, waiting, queued, rate)
             for i, (t, power, kv, waiting, queued, rate) in enumerate(specs)]  # fmt: skip
    (plan,) = CapacityPlanner(CapacityPlanConfig(scale_down_window_s=0)).plan(0.0, nodes, 1.0)
    assert math.isfinite(plan.load) and math.isfinite(plan.utilisation)
    for v in plan.variants:
        assert isinstance(v.desired_nodes, int) and 1 <= v.desired_nodes <= 150 * len(nodes)


@pytest.mark.parametrize("tiny", [1e-305, 1e-6, 5e-324])
def test_a_type_at_its_maximum_overflowing_to_a_type_of_absurd_power_gives_a_finite_plan(tiny):
    """A hello's power score is not bounded on the wire: a type at its maximum overflows to the next, and a next of
    power 1e-305 once divided a wanted capacity past any float (OverflowError in the stats snapshot). A power score
    under MIN_POWER_SCORE counts as none; a plan adds MAX_NODES_ADDED of a type at most."""
    from controlplane.capacity_plan import MAX_NODES_ADDED

    big = PlanNode("b0", "m", "c", "big", 1e6, 1e300, 0, 0, 0.0)
    small = PlanNode("t0", "m", "c", "tiny", tiny, 0.0, 0, 0, 0.0)
    (plan,) = CapacityPlanner(CapacityPlanConfig(max_nodes={"big": 1})).plan(0.0, [big, small], 1.0)
    assert {v.gpu_type: v.desired_nodes for v in plan.variants}["big"] == 1
    assert all(1 <= v.desired_nodes <= 1 + MAX_NODES_ADDED for v in plan.variants)


def test_the_arrivals_per_pool_only_grow_whatever_nodes_do(make_hello):
    """FleetLedger.arrivals_by_pool, the plan's arrivals: a counter per (model, cell), counted when each request is
    placed (or refused for want of the pool's capacity), so a node that leaves, or comes back serving another model,
    takes none of its pool's count along."""
    from controlplane.fleet_ledger import FleetLedger

    ledger = FleetLedger(100)
    for hello in (make_hello("a"), make_hello("b"), make_hello("c", cell="fast"), make_hello("d", model="n")):
        ledger.on_hello(hello)
    for node_id in "aabcd":
        ledger.on_routed(node_id, 0.0)
    ledger.count_decision("b")  # a request resumed on b
    ledger.on_routed("unknown", 0.0)  # no hello on record: in no pool
    assert ledger.arrivals_by_pool() == {("m", "default"): 4, ("m", "fast"): 1, ("n", "default"): 1}
    ledger.on_hello(make_hello("a", model="n"))  # a restarted, serving n
    ledger.on_routed("a", 0.0)
    assert ledger.arrivals_by_pool() == {("m", "default"): 4, ("m", "fast"): 1, ("n", "default"): 2}
    assert ledger.decisions["a"] == 3
    ledger.count_unserved("m", "fast")  # refused: every queue of m's fast pool full
    ledger.count_unserved("o", "default")  # refused: no live node of o's pool (its nodes all shed)
    assert ledger.arrivals_by_pool() == {
        ("m", "default"): 4,
        ("m", "fast"): 2,
        ("n", "default"): 2,
        ("o", "default"): 1,
    }
    assert ledger.unserved == {("m", "fast"): 1, ("o", "default"): 1} and ledger.decisions["a"] == 3


def test_a_pool_of_min_nodes_0_scales_to_zero_once_unasked_for_the_window_and_back_when_asked():
    """Scale to zero and back: min_nodes 0; the pool keeps a node while it is asked for, sheds it once the window
    has had no arrivals, remembers the variant at zero nodes (its model still served), and asks for one node of its
    cheapest capacity when a request it refused for want of nodes counts as an arrival."""
    config = CapacityPlanConfig(default_min_nodes=0, gpu_cost={"h100": 4.0, "l4": 0.8}, scale_down_window_s=300)
    planner = CapacityPlanner(config)
    pool = [node("h0", "h100"), node("l0")]
    arrivals = {("m", "default"): 0}
    for t in range(0, 600, 10):  # a request every 10 s: little load, yet asked for
        arrivals[("m", "default")] += 1
        (plan,) = planner.plan(float(t), pool, 1.0, arrivals)
    assert variants(plan) == {"h100": (1, 0), "l4": (1, 1)}  # asked for: one node, its cheapest capacity, kept
    for t in range(600, 1000, 10):  # nobody asks
        (plan,) = planner.plan(float(t), pool, 1.0, arrivals)
    assert variants(plan) == {"h100": (1, 0), "l4": (1, 0)}  # the window agreed: to zero
    assert planner.served_models(["other"]) == ["other"]  # the nodes are still there: nothing idle yet
    (plan,) = planner.plan(1000.0, [], 1.0, arrivals)  # they left
    assert variants(plan) == {"h100": (0, 0), "l4": (0, 0)} and plan.capacity == 0
    assert planner.idle == {("m", "default", "h100"): H100, ("m", "default", "l4"): L4}
    assert planner.served_models(["other"]) == ["other", "m"]
    (plan,) = planner.plan(1500.0, [], 1.0, arrivals)  # still unasked: still zero, still remembered
    assert variants(plan) == {"h100": (0, 0), "l4": (0, 0)}
    arrivals[("m", "default")] += 1  # a request, refused (no node): counted as an arrival
    (plan,) = planner.plan(1501.0, [], 1.0, arrivals)
    assert variants(plan) == {"h100": (0, 0), "l4": (0, 1)}  # one L4: the cheapest capacity
    for k in range(100):  # planned again and again, nothing new asked: held through the window, whatever the rate
        (plan,) = planner.plan(1501.0 + k / 10, [], 1.0, arrivals)
    assert variants(plan) == {"h100": (0, 0), "l4": (0, 1)} and [v.raw_desired_nodes for v in plan.variants] == [0, 0]
    (plan,) = planner.plan(1561.0, [node("l9")], 1.0, arrivals)  # it joined
    assert variants(plan) == {"h100": (0, 0), "l4": (1, 1)} and set(planner.idle) == {("m", "default", "h100")}


def test_a_pool_held_above_zero_forgets_its_variants_and_idle_variants_are_bounded():
    from controlplane.capacity_plan import MAX_IDLE_VARIANTS

    planner = CapacityPlanner(CapacityPlanConfig(min_nodes={"l4": 0}))  # h100: the default, 1
    planner.plan(0.0, [node("h0", "h100"), node("l0")], 1.0)
    planner.plan(1.0, [], 1.0)
    assert set(planner.idle) == {("m", "default", "l4")}  # the H100 variant, held at 1, is forgotten as before
    planner.config.min_nodes["l4"] = 1  # a reload: no longer min 0
    assert planner.plan(2.0, [], 1.0) == () and planner.idle == {}
    many = CapacityPlanner(CapacityPlanConfig(default_min_nodes=0))
    many.plan(0.0, [node(f"n{i}", model=f"m{i}") for i in range(MAX_IDLE_VARIANTS + 10)], 1.0)
    many.plan(1.0, [], 1.0)
    assert len(many.idle) == MAX_IDLE_VARIANTS and ("m0", "default", "l4") not in many.idle
    assert len(many.plan(2.0, [], 1.0)) == MAX_IDLE_VARIANTS


def test_arrivals_that_named_no_cell_count_for_the_first_pool_of_their_model():
    planner = CapacityPlanner()
    arrivals = {("m", None): 5, ("m", "b"): 2, ("x", None): 9}  # x: no pool planned, dropped
    planner.plan(0.0, [node("l0", cell="b"), node("l1", cell="a")], 1.0, arrivals)
    assert {key: trend._samples[-1][1] for key, trend in planner._trends.items()} == {("m", "a"): 5, ("m", "b"): 2}


def test_a_variant_first_seen_is_held_a_window_before_any_scale_down():
    """A fresh fleet (or one a restarted control plane finds) is not shed at its first idle plan: its nodes count as
    wanted when first seen; with no window, each plan is as it is."""
    idle = [node(f"l{i}") for i in range(4)]
    planner = CapacityPlanner(CapacityPlanConfig(scale_down_window_s=300))
    assert [variants(planner.plan(t, idle, 1.0)[0]) for t in (0.0, 299.0, 301.0)] == [
        {"l4": (4, 4)}, {"l4": (4, 4)}, {"l4": (4, 1)}
    ]  # fmt: skip
    no_window = CapacityPlanner(CapacityPlanConfig(scale_down_window_s=0))
    assert variants(no_window.plan(0.0, idle, 1.0)[0]) == {"l4": (4, 1)}


def test_a_wake_from_zero_asks_for_the_capacity_the_pool_held_per_arrival_a_second():
    """controlplane/wake_sizing.py: four L4s sized by their load at 2 arrivals a second hold 2 of capacity per arrival
    a second; scaled to zero, the pool woken by 3 arrivals a second (refused) asks for 6 L4s at once, where a pool
    never sized by its load asks for one node."""

    def run(loaded: bool) -> dict[str, tuple[int, int]]:
        planner = CapacityPlanner(CapacityPlanConfig(default_min_nodes=0, scale_down_window_s=300))
        kv = 0.56 if loaded else 0.0  # ρ 0.7 each: the load wants exactly the 4 nodes at the target utilisation 0.7
        pool = [node(f"l{i}", kv=kv) for i in range(4)]
        arrivals = {("m", "default"): 0}
        for t in range(0, 300):
            arrivals[("m", "default")] += 2
            (plan,) = planner.plan(float(t), pool, 1.0, arrivals)
        if loaded:
            assert variants(plan) == {"l4": (4, 4)} and plan.variants[0].raw_desired_nodes == 4
        for t in range(300, 1000, 10):  # the nodes left; nobody asks
            (plan,) = planner.plan(float(t), [], 1.0, arrivals)
        assert variants(plan) == {"l4": (0, 0)}
        for t in range(1000, 1011):  # refused: 3 arrivals a second
            arrivals[("m", "default")] += 3
            (plan,) = planner.plan(float(t), [], 1.0, arrivals)
        return variants(plan)

    assert run(loaded=True) == {"l4": (0, 6)}
    assert run(loaded=False) == {"l4": (0, 1)}  # its load never sized it: nothing learnt, one node
