"""hardware_aware's overload mode in the simulator: the run reports how often it switched on and the share of
decisions made in it (SimResult.info, PolicyReport.extra, means over seeds), and nothing for a policy without it."""

from __future__ import annotations

import dataclasses

from sim.des import FleetSimulator, default_router_config
from sim.report import aggregate, summarize


def _run(small_fleet, tiny_workload, **knobs):
    fleet = small_fleet([{"name": "c", "pools": [{"gpu": "l4"}]}])
    workload = tiny_workload(num=60, gap_s=0.2, prompt=3000, output=8)  # a 3k prompt every 0.2 s on one L4
    config = dataclasses.replace(default_router_config(fleet, "hardware_aware", 0), **knobs)
    return FleetSimulator(fleet, workload, "hardware_aware", router_config=config).run()


def test_a_sustained_overload_switches_the_mode_on_and_the_report_says_how_often(small_fleet, tiny_workload):
    result = _run(small_fleet, tiny_workload, overload_window_s=2.0, overload_hold_s=2.0, overload_min_placements=3)
    mode = result.info["overload"]
    assert mode["activations"] == 1 and 0.5 < mode["share_of_decisions"] < 1.0  # on after the hold, then stays on
    report = summarize(result)
    assert report.extra["overload"] == mode
    (both,) = aggregate([[report], [report]])
    assert both.extra["overload"] == {"activations": 1.0, "share_of_decisions": mode["share_of_decisions"]}


def test_no_overload_mode_no_report(small_fleet, tiny_workload):
    assert "overload" not in _run(small_fleet, tiny_workload, overload_window_s=0.0).info
    fleet = small_fleet([{"name": "c", "pools": [{"gpu": "l4"}]}])
    result = FleetSimulator(fleet, tiny_workload(num=5), "round_robin").run()
    assert "overload" not in result.info and "overload" not in summarize(result).extra
