"""The simulator's fast paths — multi-step decode (engine/multi_step.py, SimNode.start / cut_run in sim/des.py) and
mixed steps (engine/mixed_step.py) — change no result: a fixed-seed run gives the same records and node totals
with them as without them."""

from __future__ import annotations

import pytest

import sim.des
from agent.node_core import NodeCore
from sim.des import FleetSimulator


def _everything(result):
    return (
        [
            (r.req_id, r.node_id, r.refusal, r.first_token_s, r.finish_s, r.num_output_tokens, r.num_preemptions)
            for r in result.records
        ],
        [r.num_cached_prompt_tokens for r in result.records],
        result.nodes,
        result.end_s,
        result.drained,
    )


def _both(monkeypatch, fleet, workload, policy, **kwargs):
    fast = FleetSimulator(fleet, workload, policy, seed=3, **kwargs).run()
    with monkeypatch.context() as m:
        m.setattr(NodeCore, "plan_decode_steps", lambda self, *args, **kw: None)
        m.setattr(sim.des, "MIXED_STEPS", False)
        plain = FleetSimulator(fleet, workload, policy, seed=3, **kwargs).run()
    return fast, plain


@pytest.mark.parametrize("policy", ["hardware_aware", "llm_d"])
def test_the_fast_path_changes_no_result(monkeypatch, small_fleet, tiny_workload, policy):
    fast, plain = _both(monkeypatch, small_fleet(), tiny_workload(num=60, gap_s=0.03, output=60), policy)
    assert _everything(fast) == _everything(plain)
    assert fast.num_events < plain.num_events  # it did run steps together


def test_the_fast_path_under_preemption_and_prefix_hits(monkeypatch, small_fleet, tiny_workload):
    fleet = small_fleet([{"name": "c", "pools": [{"gpu": "l4"}]}])
    workload = tiny_workload(num=40, gap_s=0.0, prompt=3000, output=300, hash_ids=lambda i: (1, 2, 100 + i % 3))
    fast, plain = _both(monkeypatch, fleet, workload, "round_robin", report_interval_s=0.5)
    assert _everything(fast) == _everything(plain)
    assert fast.nodes[0].num_preemptions > 0 and fast.nodes[0].prefix_cache_hit_rate > 0
    assert fast.num_events < plain.num_events


def test_mixed_steps_alone_change_no_result(monkeypatch, small_fleet, tiny_workload):
    """Decode runs off on both sides: only the mixed steps differ (every arrival's step is one)."""
    fleet, workload = small_fleet(), tiny_workload(num=60, gap_s=0.03, output=60)
    monkeypatch.setattr(NodeCore, "plan_decode_steps", lambda self, *args, **kw: None)
    mixed = FleetSimulator(fleet, workload, "hardware_aware", seed=3).run()
    monkeypatch.setattr(sim.des, "MIXED_STEPS", False)
    plain = FleetSimulator(fleet, workload, "hardware_aware", seed=3).run()
    assert _everything(mixed) == _everything(plain)


def test_mixed_steps_on_a_drafting_node_pay_its_draft_debt(monkeypatch, tiny_workload):
    """A drafter's runner (DraftHostRunner) adds the draft work to its own steps' time: to its mixed steps too."""
    from sim.fleet import parse_fleet
    from sim.spec_pair_nodes import paired_fleet
    from sim.spec_pairs import SpecPairsConfig

    pools = [{"gpu": "h100-sxm", "count": 1}, {"gpu": "l4", "count": 1}]
    fleet = parse_fleet(
        {
            "name": "p",
            "model": "sim:llama-3-8b",
            "scheduler": {"max_num_batched_tokens": 512, "max_num_seqs": 32},
            "cells": [{"name": "c", "pools": pools}],
        }
    )
    paired = paired_fleet(fleet, SpecPairsConfig(mode="all", alpha=0.6, context_tokens=220))
    workload = tiny_workload(num=60, gap_s=0.05, prompt=200, output=80)  # a few mixed steps carry draft debt
    monkeypatch.setattr(NodeCore, "plan_decode_steps", lambda self, *args, **kw: None)
    mixed = FleetSimulator(paired, workload, "round_robin", seed=0).run()
    monkeypatch.setattr(sim.des, "MIXED_STEPS", False)
    plain = FleetSimulator(paired, workload, "round_robin", seed=0).run()
    assert _everything(mixed) == _everything(plain)
