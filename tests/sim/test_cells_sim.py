"""`zoo sim` on the cells the control plane reads (examples/cells.toml): in virtual time, batch pushed to
3x its cell's capacity is refused while VIP is never refused, and batch never lands in the VIP cell."""

from __future__ import annotations

from pathlib import Path

from controlplane.admission import AdmissionConfig
from sim.des import FleetSimulator
from sim.fleet import load_fleet
from sim.report import format_classes, summarize
from sim.workload import merge, synthetic

CELLS_FILE = Path(__file__).resolve().parents[2] / "examples" / "cells.toml"


def test_vip_is_never_refused_while_batch_floods_its_cell():
    fleet = load_fleet(CELLS_FILE)
    bulk = [n for n in fleet.nodes if n.cell == "bulk"]
    vip = [n for n in fleet.nodes if n.cell == "vip"]
    batch_rate = 3 * sum(fleet.node_capacity_req_per_s(n, 256, 32) for n in bulk)
    vip_rate = 0.4 * sum(fleet.node_capacity_req_per_s(n, 256, 32) for n in vip)
    shape = {"prompt_median": 256, "prompt_sigma": 0.01, "output_median": 32, "output_sigma": 0.01}
    workload = merge([
        synthetic(int(batch_rate * 20), batch_rate, traffic_class="batch", seed=1, **shape),
        synthetic(int(vip_rate * 20), vip_rate, traffic_class="vip", seed=2, **shape),
    ])  # fmt: skip
    result = FleetSimulator(fleet, workload, "least_requests", admission=AdmissionConfig(max_queue_per_node=4)).run()
    by_class = {name: [r for r in result.records if r.traffic_class == name] for name in ("vip", "batch")}
    assert by_class["vip"] and all(r.refusal is None and r.finish_s is not None for r in by_class["vip"])
    assert any(r.refusal == "overloaded" for r in by_class["batch"])
    assert {r.node_id for r in by_class["batch"] if r.node_id} <= {n.node_id for n in bulk}
    classes = summarize(result).extra["classes"]  # the report's per-class lines
    assert classes["vip"]["refused"] == 0 and classes["vip"]["requests"] == len(by_class["vip"])
    assert classes["batch"]["refused"] == sum(r.refusal is not None for r in by_class["batch"]) > 0
    assert "vip" in format_classes([summarize(result)])
