"""`zoo top` groups the fleet by cell: rows cell by cell (the sort column within each), and one summary
line per cell."""

from __future__ import annotations

import pytest

from tui.fleet_view import COLUMNS, FleetView


def test_rows_are_grouped_by_cell_and_each_cell_is_summarised(make_stats):
    view = FleetView()
    view.update(make_stats(1, dead=("t4-0",)))
    view.sort_index = next(i for i, c in enumerate(COLUMNS) if c.key == "power")
    view.sort_reverse = True  # weakest first, still one cell after the other
    cells = [n.cell for n in view.rows()]
    assert cells == sorted(cells, reverse=True)
    east, west = view.cell_summaries()
    assert (east.cell, east.num_up, east.num_nodes, east.num_running, east.num_waiting) == ("east", 2, 2, 19, 9)
    assert east.worst_ttft_p99_s == pytest.approx(0.030 * 3.5)
    assert (west.num_up, west.num_nodes) == (1, 2)
    assert east.describe().startswith("east: 2/2 up, run 19, wait 9, TTFT p99 105")


def test_the_rates_line_names_the_requests_waiting_for_their_tokens(make_stats):
    import msgspec

    from tui.fleet_view import describe_rates

    view = FleetView()
    view.update(make_stats(1))
    assert "tokenizing" not in describe_rates(view)  # none waiting: nothing said
    view.update(msgspec.structs.replace(make_stats(2), num_inflight=7, num_tokenizing=3))
    assert "in flight 7 (3 tokenizing)" in describe_rates(view)


def test_a_sleeping_node_says_its_level_in_the_state_column(make_stats):
    import msgspec

    from tui.node_detail import describe_sleep

    stats = make_stats(1)
    nodes = list(stats.nodes)
    nodes[0] = msgspec.structs.replace(nodes[0], state="draining", sleep_level=2)
    nodes[1] = msgspec.structs.replace(nodes[1], state="draining", sleep_level=-1)
    view = FleetView()
    view.update(msgspec.structs.replace(stats, nodes=nodes))
    state = next(c for c in COLUMNS if c.key == "state")
    cells = {n.node_id: state.cell(n) for n in view.rows()}
    assert cells == {"h100-0": "asleep:2", "a100-0": "to sleep", "l4-0": "up", "t4-0": "up"}
    assert describe_sleep(2) == "   asleep at level 2" and describe_sleep(0) == ""


def test_the_capacity_plan_line_says_what_each_gpu_type_has_and_wants(make_stats):
    import msgspec

    from tui.fleet_view import describe_capacity, describe_rates

    view = FleetView()
    view.update(make_stats(1))
    assert "capacity plan" not in describe_rates(view)  # a control plane that sent none
    one_pool = [("m", "zoo", "H100", 2, 3), ("m", "zoo", "L4", 4, 4)]
    view.update(msgspec.structs.replace(make_stats(2), capacity=one_pool))
    assert describe_rates(view).endswith("\ncapacity plan: H100 2 (wants 3), L4 4")
    two_cells = [("m", "vip", "H100", 2, 2), ("m", "chat", "L4", 4, 2)]
    assert describe_capacity(msgspec.structs.replace(make_stats(3), capacity=two_cells)) == (
        "\ncapacity plan: vip/H100 2, chat/L4 4 (wants 2)"
    )
    # a pool whose arrivals grow: the growth its plan forecasts a node's start ahead
    growing = msgspec.structs.replace(make_stats(4), capacity=one_pool, capacity_growth=[("m", "zoo", 1.274)])
    assert describe_capacity(growing) == "\ncapacity plan: H100 2 (wants 3), L4 4; arrivals x1.27"
    growing = msgspec.structs.replace(make_stats(5), capacity=two_cells, capacity_growth=[("m", "chat", 1.5)])
    assert describe_capacity(growing).endswith("; chat/arrivals x1.50")
    # requests held for a first node of a model (controlplane/cold_start.py), named by model where there are several
    waiting = msgspec.structs.replace(growing, capacity_waiting={"m": 2})
    assert describe_capacity(waiting).endswith("; chat/arrivals x1.50, 2 waiting for a first node")
    two_models = msgspec.structs.replace(make_stats(6), capacity=[*one_pool, ("n", "zoo", "L4", 0, 1)])
    two_models = msgspec.structs.replace(two_models, capacity_waiting={"n": 1})
    assert describe_capacity(two_models).endswith("n/zoo/L4 0 (wants 1); n/1 waiting for a first node")
