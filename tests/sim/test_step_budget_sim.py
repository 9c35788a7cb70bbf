"""The fleet's step_budget option: each simulated node's token budget sized from its own profile ("sarathi")."""

from __future__ import annotations

import argparse
import json

import pytest

from sim.cli import add_sim_args, run_sim
from sim.des import FleetSimulator, SimNode, VirtualClock
from sim.fleet import parse_fleet
from sim.workload import TraceRequest, Workload


def _fleet(step_budget=None, pools=(("h100-sxm", 1), ("l4", 1))):
    scheduler = {"max_num_batched_tokens": 2048, "max_num_seqs": 32}
    if step_budget is not None:
        scheduler["step_budget"] = step_budget
    return parse_fleet(
        {
            "name": "t",
            "model": "sim:llama-3-8b",
            "scheduler": scheduler,
            "cells": [{"name": "c", "pools": [{"gpu": g, "count": n} for g, n in pools]}],
        }
    )


def test_sarathi_sizes_each_node_from_its_own_profile():
    fleet = _fleet("sarathi")
    budgets = {}
    for spec in fleet.nodes:
        node = SimNode(spec, fleet, VirtualClock())
        budgets[spec.hardware.profile] = node.step_budget_tokens
        assert node.core.engine.scheduler_config.max_num_batched_tokens == node.step_budget_tokens
    # an H100 meets 100 ms with the whole ceiling; an L4's decode step alone is ~64 ms: the floor
    assert budgets == {"h100-sxm": 2048, "l4": 256}
    fleet.engine.tpot_slo_s = 0.3  # a looser SLO: the L4 may take bigger chunks
    assert SimNode(fleet.nodes[1], fleet, VirtualClock()).step_budget_tokens > 256


def test_a_fixed_budget_applies_to_every_node_and_none_keeps_max_num_batched_tokens():
    for step_budget, expected in ((512, 512), (None, 2048)):
        fleet = _fleet(step_budget)
        for spec in fleet.nodes:
            assert SimNode(spec, fleet, VirtualClock()).step_budget_tokens == expected


@pytest.mark.parametrize("bad", ["fast", 0, -5, True, 1.5])
def test_a_bad_step_budget_is_refused(bad):
    with pytest.raises(ValueError, match="step_budget"):
        _fleet(bad)


def test_the_simulated_l4_prefills_in_chunks_of_its_own_budget():
    # one 4,000-token prompt, 3 output tokens, on a lone L4: ceil(4000 / budget) prefill steps + 2 decode steps
    workload = Workload("one", (TraceRequest(0.0, 4000, 3, "default", ()),))
    steps = {}
    for step_budget in (None, "sarathi"):
        fleet = _fleet(step_budget, pools=(("l4", 1),))
        result = FleetSimulator(fleet, workload, "round_robin").run()
        (node,) = result.nodes
        steps[step_budget] = (node.step_budget_tokens, node.num_steps)
        assert result.records[0].num_output_tokens == 3
    assert steps == {None: (2048, 2 + 2), "sarathi": (256, 16 + 2)}


def test_zoo_sim_prints_the_step_budget_in_its_json(capsys):
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    argv = ["--fleet", "small", "--trace", "code", "--max-requests", "20", "--policy", "round_robin", "--json"]
    assert run_sim(parser.parse_args([*argv, "--step-budget", "sarathi", "--slo-tpot", "0.1"])) == 0
    info = json.loads(capsys.readouterr().out)["info"]
    assert info["step_budget"] == {"mode": "sarathi", "tokens_by_gpu": {"h100-sxm": [1024], "l4": [256]}}
    assert run_sim(parser.parse_args([*argv, "--step-budget", "300"])) == 0
    assert json.loads(capsys.readouterr().out)["info"]["step_budget"]["tokens_by_gpu"] == {
        "h100-sxm": [300],
        "l4": [300],
    }
    assert run_sim(parser.parse_args([*argv, "--step-budget", "lots"])) == 2
    assert "--step-budget" in capsys.readouterr().err


def test_the_realtime_twins_agents_size_their_budget_as_the_simulator_does():
    from sim.sim_agents import sim_agent

    fleet = _fleet("sarathi")
    fleet.engine.tpot_slo_s = 0.05
    assert sim_agent(fleet, fleet.nodes[0], "tcp://127.0.0.1:1").config.step_budget_tpot_slo_s == 0.05
    fixed = _fleet(512)
    assert sim_agent(fixed, fixed.nodes[0], "tcp://127.0.0.1:1").config.step_budget_tpot_slo_s is None
