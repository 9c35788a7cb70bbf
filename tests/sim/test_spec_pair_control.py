"""Who pairs with whom in ``zoo sim --spec-pairs``: the control plane's own policy (controlplane/spec_pairs.py)
on the simulated nodes' hellos and LoadReports. The simulator's pairs are exactly the policy's choices on those
reports (replayed through a fresh policy), each carried out at the verifier's next report; a draft of another
vocabulary is refused by the policy with its reason. Virtual time only."""

from __future__ import annotations

from controlplane.registry import ClusterRegistry
from controlplane.spec_pairs import SpecPairPolicy
from sim.des import FleetSimulator
from sim.fleet import parse_fleet
from sim.spec_pair_nodes import paired_fleet, spec_pairs_info
from sim.spec_pairs import SpecPairsConfig
from sim.workload import TraceRequest, Workload

A100_T4 = [{"gpu": "a100-40gb", "count": 1}, {"gpu": "t4", "count": 1, "tp": 2}]


def _fleet(pools=A100_T4):
    return parse_fleet(
        {
            "name": "p",
            "model": "sim:llama-3-8b",
            "scheduler": {"max_num_batched_tokens": 512, "max_num_seqs": 32},
            "cells": [{"name": "c", "pools": pools}],
        }
    )


def _bursty() -> Workload:
    """Quiet (the T4 idle: it drafts), a burst (the T4 busy with its own: unpaired), quiet again."""
    quiet = [i * 0.6 for i in range(6)]
    burst = [4.0 + i * 0.02 for i in range(40)]
    again = [12.0 + i * 0.6 for i in range(6)]
    return Workload("bursty", tuple(TraceRequest(t, 200, 60, "default", ()) for t in quiet + burst + again))


def test_the_simulators_pairs_are_exactly_the_policys_on_the_same_load_reports(monkeypatch):
    decisions, events = [], []
    decide, report = SpecPairPolicy.decide, ClusterRegistry.report

    def recording_decide(self, nodes, now_s):
        changes = decide(self, nodes, now_s)
        decisions.append((list(nodes), now_s, changes))
        events.extend(("order", c.verifier, c.drafter) for c in changes)
        return changes

    def recording_report(self, msg):
        events.append(("report", msg.node_id, msg.spec_drafter))
        return report(self, msg)

    monkeypatch.setattr(SpecPairPolicy, "decide", recording_decide)
    monkeypatch.setattr(ClusterRegistry, "report", recording_report)
    config = SpecPairsConfig(mode="auto", alpha=0.9, context_tokens=230, policy_min_gain=0.05)
    fleet = paired_fleet(_fleet(), config)
    FleetSimulator(fleet, _bursty(), "round_robin", seed=0).run()
    monkeypatch.undo()

    info = spec_pairs_info(fleet)
    assert info["num_pairs_total"] >= 2 and info["num_unpairs_total"] >= 1  # paired, unpaired when busy, again
    assert any("busy" in o["reason"] for o in info["orders"])
    # the same inputs through a fresh policy: the same orders, in the same order
    fresh = SpecPairPolicy(config.policy_config())
    for nodes, now_s, changes in decisions:
        assert fresh.decide(nodes, now_s) == changes
    assert fresh.pairs == fleet.control.pairing.policy.pairs
    # and the nodes did what they were told: each report names the drafter of the last order to that node
    told: dict[str, str] = {}
    num_paired_reports = 0
    for kind, node_id, drafter in events:
        if kind == "order":
            told[node_id] = drafter
        else:
            assert drafter == told.get(node_id, "")
            num_paired_reports += bool(drafter)
    assert num_paired_reports > 0
    ordered = {(v, d) for kind, v, d in events if kind == "order" and d}
    ran = {(v, m.host._node_id) for v, models in fleet.spec_models.items() for m in models}
    assert ran == ordered == {("c/a100-40gb-00", "c/t4-00")}
    (pair,) = info["pairs"]
    assert pair["spec_rounds"] > 0 and 0.8 < pair["acceptance_rate"] < 1.0


def test_a_draft_of_another_vocabulary_is_refused_by_the_policy():
    config = SpecPairsConfig(mode="all", draft_model="sim:smollm2-135m", context_tokens=230)
    fleet = paired_fleet(_fleet([{"gpu": "a100-40gb", "count": 1}, {"gpu": "l4", "count": 1}]), config)
    FleetSimulator(fleet, _bursty(), "round_robin", seed=0).run()
    info = spec_pairs_info(fleet)
    assert info["num_pairs_total"] == 0 and info["orders"] == [] and info["pairs"] == []
    why = info["refusals"]["c/a100-40gb-00<-c/l4-00"]
    assert "vocabulary mismatch" in why and "128256:" in why and "49152:" in why
