"""Cells and traffic classes (controlplane/cells.py): one TOML read by the control plane and the simulator,
validated once; and the intake's use of them — home cell, spill to idle nodes only, never the reverse,
per-class queue limits, priority and SLOs."""

from __future__ import annotations

import tomllib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backends.sim.engine import SimTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.cells import (
    MAX_CLASS_PRIORITY,
    REQUEST_PRIORITY_RANGE,
    CellsConfig,
    TrafficClass,
    engine_priority,
    load_cells,
    parse_cells,
)
from controlplane.registry import ClusterRegistry
from controlplane.request_intake import Placement, place_request
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.sampling_params import SamplingParams
from sim.fleet import parse_fleet
from transport.messages import ClientGenerate, ErrorCode, ErrorReply
from zoo.up_config import load_up_config

TWO_CELLS = """
model = "sim:llama-3-8b"

[controlplane]
policy = "least_requests"

[[agents]]
node_id = "l4-a"
backend = "sim"

[[cells]]
name = "fast"
gpu_types = ["H100"]
[[cells.pools]]
gpu = "h100-sxm"
count = 1

[[cells]]
name = "bulk"
gpu_types = ["L4"]
[[cells.pools]]
gpu = "l4"
count = 2

[[traffic_classes]]
name = "vip"
cell = "fast"
spill_to = ["bulk"]
priority = 2
slo_ttft_s = 0.5

[[traffic_classes]]
name = "batch"
cell = "bulk"
max_queue_per_node = 1
"""


def test_the_control_plane_zoo_up_and_the_simulator_read_the_same_cells(tmp_path):
    path = tmp_path / "zoo.toml"
    path.write_text(TWO_CELLS)
    cells = load_cells(path)
    fleet = parse_fleet(tomllib.loads(TWO_CELLS), "two")
    assert fleet.cells == cells
    assert [n.node_id for n in fleet.nodes] == ["fast/h100-sxm-00", "bulk/l4-00", "bulk/l4-01"]
    assert fleet.cells_by_traffic_class == {"vip": "fast", "batch": "bulk"}
    up = load_up_config(path)
    argv = up.controlplane_argv()
    assert argv[argv.index("--cells") + 1] == str(path)  # zoo up hands the file to the control plane
    assert cells.resolve("vip").priority == 2 and cells.resolve("default").name == "vip"  # the first listed
    with pytest.raises(ValueError, match="unknown traffic class 'gold'"):
        cells.resolve("gold")


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        (
            {
                "cells": [{"name": "a"}, {"name": "b"}],
                "traffic_classes": [
                    {"name": "x", "cell": "a", "spill_to": ["b"]},
                    {"name": "y", "cell": "b", "spill_to": ["a"]},
                ],
            },
            "never the reverse",
        ),
        (  # a longer loop borrows back just the same: a -> b -> c -> a
            {
                "cells": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
                "traffic_classes": [
                    {"name": "x", "cell": "a", "spill_to": ["b"]},
                    {"name": "y", "cell": "b", "spill_to": ["c"]},
                    {"name": "z", "cell": "c", "spill_to": ["a"]},
                ],
            },
            "'a' -> 'b' -> 'c' -> 'a' spill into each other",
        ),
        ({"cells": [{"name": "a"}], "traffic_classes": [{"name": "x", "cell": "z"}]}, "unknown cell 'z'"),
        ({"cells": [{"name": "a", "gpu_types": ["L4"]}, {"name": "b", "gpu_types": ["l4"]}]}, "GPU type"),
        ({"cells": [{"name": "a", "pools": [{"gpu": "l4", "count": 0}]}]}, "count must be >= 1"),
        ({"cells": [{"name": "a"}], "traffic_classes": [{"name": "x", "slo_ttft_s": 0}]}, "slo_ttft_s must be > 0"),
        ({"cells": [{"name": "a", "gpus": ["L4"]}]}, "unknown field"),
        ({"cells": [{"name": "a"}], "default_class": "nope"}, "default_class"),
    ],
)
def test_bad_cell_configs_are_refused_with_the_reason(doc, message):
    with pytest.raises(ValueError, match=message):
        parse_cells(doc, "zoo.toml")


def test_a_node_joins_its_cell_by_label_or_by_gpu_type():
    cells = parse_cells({"cells": [{"name": "fast", "gpu_types": ["H100"]}, {"name": "bulk", "gpu_types": ["L4"]}]})
    assert cells.cell_of_node("default", "h100") == "fast"
    assert cells.cell_of_node("bulk", "H100") == "bulk"  # the agent's --cell wins
    assert cells.cell_of_node("default", "T4") == "default"


def test_the_older_form_keeps_unlisted_classes_open():
    cells = parse_cells({"cells": [{"name": "chat", "traffic_classes": ["conv"]}]})
    assert not cells.strict
    assert cells.resolve("conv") == TrafficClass("conv", cell="chat")
    assert cells.resolve("anything") is None


# -- the intake ----------------------------------------------------------------------------------------


class _FirstById:
    name = "first"

    def choose(self, request, snapshot):
        ids = sorted(n.node_id for n in snapshot.nodes)
        return ids[0] if ids else None


def _fleet(make_hello, make_report, queued: dict[str, int]):
    registry = ClusterRegistry(ManualClock(), 5.0)
    for node_id, cell in (("f0", "fast"), ("b0", "bulk"), ("b1", "bulk")):
        registry.join(make_hello(node_id, cell=cell))
        registry.report(make_report(node_id, num_waiting=queued.get(node_id, 0)))
    return registry


def _place(registry, traffic_class: str, cells: CellsConfig, admission=None, priority: int = 0):
    msg = ClientGenerate(
        request_id="r", prompt_token_ids=[1, 2, 3], sampling=SamplingParams(max_tokens=2), traffic_class=traffic_class,
        priority=priority,
    )  # fmt: skip
    return place_request(
        msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry,
        policy=_FirstById(), router=RouterConfig(cells=cells),
        admission=admission or AdmissionControl(AdmissionConfig(max_queue_per_node=4, max_queue_global=100)),
    )  # fmt: skip


def test_vip_stays_home_while_home_has_no_queue(make_hello, make_report):
    placed = _place(_fleet(make_hello, make_report, {}), "vip", load_cells_str())
    assert isinstance(placed, Placement)
    assert (placed.node_id, placed.cell, placed.spilled, placed.priority) == ("f0", "fast", False, engine_priority(2))
    assert placed.route.slo_ttft_s == 0.5  # the class's SLO goes to the policy
    assert placed.slo_tpot_s == RouterConfig().slo_tpot_s  # no TPOT target of its own: the router's to the node


def test_a_classs_tpot_target_goes_to_the_node(make_hello, make_report):
    doc = tomllib.loads(TWO_CELLS)
    doc["traffic_classes"][0]["slo_tpot_s"] = 0.05
    placed = _place(_fleet(make_hello, make_report, {}), "vip", parse_cells(doc))
    assert isinstance(placed, Placement) and placed.slo_tpot_s == 0.05  # GenerateRequest.slo_tpot_s


def test_a_classs_goodput_first_choice_goes_to_the_policy(make_hello, make_report):
    """TrafficClass.goodput_first (hardware_aware's goodput-first rule for the class; None: the router's)."""
    doc = tomllib.loads(TWO_CELLS)
    doc["traffic_classes"][1]["goodput_first"] = True
    cells = parse_cells(doc)
    assert _place(_fleet(make_hello, make_report, {}), "batch", cells).route.goodput_first is True
    assert _place(_fleet(make_hello, make_report, {}), "vip", cells).route.goodput_first is None
    doc["traffic_classes"][1]["goodput_first"] = "yes"
    with pytest.raises(ValueError, match="goodput_first"):
        parse_cells(doc)


def test_vip_borrows_an_idle_bulk_node_when_home_would_queue(make_hello, make_report):
    placed = _place(_fleet(make_hello, make_report, {"f0": 2, "b0": 1}), "vip", load_cells_str())
    assert isinstance(placed, Placement) and placed.spilled
    assert placed.node_id == "b1"  # the idle one: b0 has a queue


def test_vip_stays_home_and_queues_when_no_bulk_node_is_idle(make_hello, make_report):
    placed = _place(_fleet(make_hello, make_report, {"f0": 2, "b0": 1, "b1": 1}), "vip", load_cells_str())
    assert isinstance(placed, Placement) and (placed.node_id, placed.spilled) == ("f0", False)


def test_batch_never_borrows_the_vip_cell_and_is_refused_at_its_own_queue_limit(make_hello, make_report):
    # bulk's nodes each hold one queued request (batch's limit is 1); the fast cell sits idle
    refused = _place(_fleet(make_hello, make_report, {"b0": 1, "b1": 1}), "batch", load_cells_str())
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.OVERLOADED
    assert refused.retry_after_s == 1.0
    placed = _place(_fleet(make_hello, make_report, {"b0": 1}), "batch", load_cells_str())
    assert isinstance(placed, Placement) and placed.node_id == "b1" and placed.priority == 0


def test_a_requests_priority_orders_it_within_its_class_and_never_past_another_class(make_hello, make_report):
    cells = load_cells_str()
    vip = [_place(_fleet(make_hello, make_report, {}), "vip", cells, priority=p).priority for p in (-9, 0, 9)]
    batch = [_place(_fleet(make_hello, make_report, {}), "batch", cells, priority=p).priority for p in (-9, 0, 9)]
    assert vip[0] > vip[1] > vip[2] > batch[0] > batch[1] > batch[2]  # engine: higher first; vLLM: lower earlier
    assert batch[1] == engine_priority(0, 0) == 0  # no priority anywhere: what it always was
    low, high = REQUEST_PRIORITY_RANGE
    assert engine_priority(MAX_CLASS_PRIORITY, low) < 2**63 and engine_priority(-MAX_CLASS_PRIORITY, high) >= -(2**63)
    for bad in (low - 1, high + 1):
        refused = _place(_fleet(make_hello, make_report, {}), "vip", cells, priority=bad)
        assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.INVALID_REQUEST
        assert refused.param == "priority"
    with pytest.raises(ValueError, match="priority"):
        TrafficClass(name="x", priority=MAX_CLASS_PRIORITY + 1)


@given(st.integers(-(2**20), 2**20), st.integers(-(2**20), 2**20), st.integers(-(2**31), 2**31 - 1),
       st.integers(-(2**31), 2**31 - 1))  # fmt: skip
def test_engine_priority_puts_the_class_first_then_the_lower_request_priority(c1, c2, p1, p2):
    a, b = engine_priority(c1, p1), engine_priority(c2, p2)
    if c1 != c2:
        assert (a > b) == (c1 > c2)
    else:
        assert (a > b) == (p1 < p2) and (a == b) == (p1 == p2)


def test_an_unknown_class_is_a_400_naming_the_field(make_hello, make_report):
    refused = _place(_fleet(make_hello, make_report, {}), "gold", load_cells_str())
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.INVALID_REQUEST
    assert refused.param == "traffic_class"


def load_cells_str() -> CellsConfig:
    return parse_cells(tomllib.loads(TWO_CELLS))


def test_a_class_that_sheds_past_its_slo_skips_nodes_whose_backlog_would_miss_it(make_hello, make_report):
    doc = tomllib.loads(TWO_CELLS)
    doc["traffic_classes"][1].update(slo_ttft_s=2.0, shed_past_slo=True, max_queue_per_node=100)
    cells = parse_cells(doc)
    registry = _fleet(make_hello, make_report, {})
    # b0: 30,000 prompt tokens queued at 10,000 tok/s = 3 s of prefill ahead; b1: 1 s
    registry.report(make_report("b0", queued_prefill_tokens=30_000, prefill_tok_per_s=10_000.0))
    registry.report(make_report("b1", queued_prefill_tokens=10_000, prefill_tok_per_s=10_000.0))
    admission = AdmissionControl(AdmissionConfig(max_queue_per_node=100, max_queue_global=1000))
    placed = _place(registry, "batch", cells, admission)
    assert isinstance(placed, Placement) and placed.node_id == "b1"  # b0 would miss the 2 s SLO: next best
    registry.report(make_report("b1", queued_prefill_tokens=25_000, prefill_tok_per_s=10_000.0))
    refused = _place(registry, "batch", cells, admission)
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.OVERLOADED and "SLO" in refused.message
    assert admission.make_stats()["num_refused_slo_unreachable_total"] == 3
    assert isinstance(_place(registry, "vip", cells, admission), Placement)  # vip does not shed


def test_shedding_needs_an_slo():
    with pytest.raises(ValueError, match="shed_past_slo needs slo_ttft_s"):
        TrafficClass("batch", cell="bulk", shed_past_slo=True)


def test_a_spill_chain_without_a_loop_is_allowed():
    doc = {
        "cells": [{"name": "a"}, {"name": "b"}, {"name": "c"}],
        "traffic_classes": [
            {"name": "x", "cell": "a", "spill_to": ["b", "c"]},
            {"name": "y", "cell": "b", "spill_to": ["c"]},
            {"name": "w"},  # homeless: adds no edge
        ],
    }
    cells = parse_cells(doc, "zoo.toml")
    assert cells.resolve("y").spill_to == ["c"]
