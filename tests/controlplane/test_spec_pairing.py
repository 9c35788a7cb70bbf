"""SpecPairing, the control plane's shell around the pairing policy, on a real registry: hellos and LoadReports
in, SpecPair orders out; an order the verifier did not carry out (its pairing check failed) drops the pair
with a reason, and a verifier drafting with a node it was not paired with here is told to stop."""

from __future__ import annotations

from controlplane.registry import ClusterRegistry
from controlplane.spec_pairing import DECIDE_INTERVAL_S, RECONCILE_GRACE_S, SpecPairing
from controlplane.spec_pairs import SpecPairPolicy
from engine.clock import ManualClock

VOCAB = "49152:abc"


def _fleet(make_hello):
    clock = ManualClock()
    registry = ClusterRegistry(clock, heartbeat_timeout_s=60.0)
    hellos, sent = {}, []
    for hello in (
        make_hello("big", gpu="h100-sxm", vocab_id=VOCAB, decode_step_ms=10.0),
        make_hello("small", gpu="l4", vocab_id="259:x", draft_models=["smol"], draft_endpoint="tcp://small:1",
                   draft_vocab_id=VOCAB, draft_step_ms=1.0),
    ):  # fmt: skip
        registry.join(hello)
        hellos[hello.node_id] = hello
    pairing = SpecPairing(registry, hellos, lambda msg, node_id: sent.append((node_id, msg)))
    return clock, registry, pairing, sent


def _report(registry, pairing, make_report, node_id: str, **fields) -> None:
    report = make_report(node_id, **fields)
    registry.report(report)
    pairing.on_load_report(report)


def test_pairs_then_unpairs_when_the_drafter_is_lost(make_hello, make_report):
    _, registry, pairing, sent = _fleet(make_hello)
    _report(registry, pairing, make_report, "small")
    ((node_id, order),) = sent
    assert node_id == "big" and order.drafter_node_id == "small" and order.draft_endpoint == "tcp://small:1"
    assert 1 <= order.num_spec_tokens <= 4 and order.reason.startswith("paired")
    _report(registry, pairing, make_report, "big", spec_drafter="small", spec_acceptance_rate=0.9)
    summary = pairing.summary()
    assert summary["pairs"] == summary["active"] == {"big": "small"} and summary["acceptance"] == {"big": 0.9}
    assert summary["predictions"]["big"]["tpot_paired_s"] < summary["predictions"]["big"]["tpot_plain_s"] == 0.010
    lost = registry.leave("small", "killed")
    pairing.on_node_lost(lost.node_id)
    node_id, order = sent[-1]
    assert node_id == "big" and order.draft_endpoint == "" and "small left" in order.reason
    assert pairing.summary()["pairs"] == {}


def test_an_order_not_carried_out_is_dropped_with_a_reason(make_hello, make_report):
    clock, registry, pairing, sent = _fleet(make_hello)
    _report(registry, pairing, make_report, "small")
    assert len(sent) == 1
    _report(registry, pairing, make_report, "big")  # no drafter yet: its pairing check may still run
    assert pairing.policy.pairs == {"big": "small"}
    clock.advance(RECONCILE_GRACE_S + 0.1)
    _report(registry, pairing, make_report, "big")  # still none: the check failed
    assert pairing.policy.pairs == {} and "could not pair" in pairing.summary()["refusals"]["big<-small"]
    _report(registry, pairing, make_report, "small")
    assert len(sent) == 1  # not paired again


def test_a_stray_drafter_is_told_to_stop(make_hello, make_report):
    _, registry, pairing, sent = _fleet(make_hello)
    pairing.policy.config.enabled = False  # e.g. a restarted control plane that pairs nothing
    _report(registry, pairing, make_report, "big", spec_drafter="elsewhere")
    ((node_id, order),) = sent
    assert node_id == "big" and order.draft_endpoint == "" and "elsewhere is not its drafter" in order.reason
    _report(registry, pairing, make_report, "big", spec_drafter="elsewhere")
    assert len(sent) == 1  # once per grace period


def test_decisions_on_load_reports_are_rate_limited(make_hello, make_report, monkeypatch):
    clock, registry, pairing, _ = _fleet(make_hello)
    calls = []
    decide = SpecPairPolicy.decide
    monkeypatch.setattr(
        SpecPairPolicy, "decide", lambda self, nodes, now_s: calls.append(now_s) or decide(self, nodes, now_s)
    )
    for _ in range(10):  # a burst of reports: one decision over every node, not ten
        _report(registry, pairing, make_report, "small")
    assert len(calls) == 1
    clock.advance(DECIDE_INTERVAL_S)
    _report(registry, pairing, make_report, "big")
    assert len(calls) == 2
    pairing.on_node_lost(registry.leave("small", "killed").node_id)  # a lost node is decided at once
    assert len(calls) == 3
