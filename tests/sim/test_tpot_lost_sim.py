"""RouterConfig.slo_tpot_lost_to_doomed in the fleet simulator (the rule itself: tests/controlplane/router/
test_tpot_lost.py)."""

from __future__ import annotations

from dataclasses import replace

from controlplane.router.router_config import RouterConfig
from sim.des import FleetSimulator, default_router_config


def test_in_the_fleet_simulator_it_moves_work_to_the_l4s_at_50_ms_and_nothing_at_100(small_fleet, tiny_workload):
    """One H100 and two L4s (an 8B model), long prompts arriving faster than the H100 prefills them: at a 50 ms TPOT
    target the L4s take the requests the H100 is predicted to decode past it; at 100 ms no node is doomed and the
    run is the same request for request."""
    fleet, workload = small_fleet(), tiny_workload(num=120, gap_s=0.02, prompt=2_000, output=40)

    def run(config: RouterConfig):
        result = FleetSimulator(fleet, workload, "hardware_aware", seed=1, router_config=config).run()
        assert result.drained and all(r.num_output_tokens == 40 for r in result.records)
        return [(r.req_id, r.node_id, r.first_token_s, r.finish_s) for r in result.records]

    def on_l4s(records) -> int:
        return sum("/l4-" in node_id for _, node_id, _, _ in records)

    config = default_router_config(fleet, "hardware_aware")  # the model's size, as `zoo sim` sets it
    assert 7.0 < config.params_b_for(fleet.model.name) < 9.0 and not config.slo_tpot_lost_to_doomed
    at_50 = replace(config, slo_ttft_s=2.0, slo_tpot_s=0.05)
    off, on = run(at_50), run(replace(at_50, slo_tpot_lost_to_doomed=True))
    assert on_l4s(on) > on_l4s(off)
    at_100 = replace(config, slo_ttft_s=2.0, slo_tpot_s=0.1)
    assert run(replace(at_100, slo_tpot_lost_to_doomed=True)) == run(at_100)


def test_a_traffic_class_that_puts_goodput_first_gets_the_rule_in_the_simulator(small_fleet, tiny_workload):
    """The fleet file's [[traffic_classes]] goodput_first reaches the policy through the real intake: a workload of
    that class alone runs as with the router-wide rule, request for request, and differs from the rule off."""
    from sim.fleet import parse_fleet

    base = small_fleet()
    fleet = parse_fleet(
        {
            "name": "t",
            "model": "sim:llama-3-8b",
            "scheduler": {"max_num_batched_tokens": 512, "max_num_seqs": 32},
            "cells": [{"name": "c", "pools": [{"gpu": "h100-sxm", "count": 1}, {"gpu": "l4", "count": 2}]}],
            "traffic_classes": [{"name": "batch", "goodput_first": True}],
        }
    )
    workload = tiny_workload(num=120, gap_s=0.02, prompt=2_000, output=40, cls="batch")

    def run(fleet, **knobs):
        config = replace(default_router_config(fleet, "hardware_aware"), slo_ttft_s=2.0, slo_tpot_s=0.05, **knobs)
        result = FleetSimulator(fleet, workload, "hardware_aware", seed=1, router_config=config).run()
        assert result.drained and len(result.records) == 120 and all(r.num_output_tokens == 40 for r in result.records)
        return [(r.req_id, r.node_id, r.first_token_s, r.finish_s) for r in result.records]

    by_class = run(fleet)
    assert by_class == run(base, slo_tpot_lost_to_doomed=True)
    assert by_class != run(base)
