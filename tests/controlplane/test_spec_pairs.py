"""The pairing policy on hand-made fleet states: an idle weak drafter is paired with the strongest verifier
when the cost model predicts a better TPOT; a busy, draining or dead drafter is unpaired; a vocabulary
mismatch or a stronger drafter is refused with a reason; the TPOT prediction follows Leviathan eq. 1."""

from __future__ import annotations

import pytest

from controlplane.spec_cost import predict_pair_tpot
from controlplane.spec_pairs import PairNode, SpecPairConfig, SpecPairPolicy

VOCAB = "49152:abc"


def _h100(**kw) -> PairNode:
    return PairNode(
        **{"node_id": "h100", "power_score": 10.0, "vocab_id": VOCAB, "decode_step_s": 0.010, "num_running": 3, **kw}
    )


def _l4(node_id: str = "l4", **kw) -> PairNode:
    base = dict(power_score=2.0, vocab_id=VOCAB, draft_step_s=0.001, draft_models=("smol",))
    return PairNode(node_id, **{**base, "draft_endpoint": f"tcp://{node_id}:1", "draft_vocab_id": VOCAB, **kw})


def test_prediction_is_leviathan_eq1_with_the_round_time():
    p = predict_pair_tpot(verify_step_s=0.010, draft_step_s=0.002, hop_s=0.001, alpha=0.8, k_max=1)
    # k = 1: round = 0.002 + 0.001 + 0.010 * 1.05 = 0.0135 s; E = 1 + 0.8 = 1.8 tokens
    assert p.num_spec_tokens == 1 and p.expected_tokens == pytest.approx(1.8)
    assert p.tpot_paired_s == pytest.approx(0.0135 / 1.8) and p.tpot_plain_s == 0.010
    best = predict_pair_tpot(0.010, 0.002, 0.001, 0.8, k_max=8)
    assert best.tpot_paired_s < p.tpot_paired_s and best.num_spec_tokens > 1
    assert predict_pair_tpot(0.010, 0.002, 0.001, 0.0, k_max=8).tpot_paired_s > 0.010  # nothing accepted: slower
    with pytest.raises(ValueError, match="alpha"):
        predict_pair_tpot(0.010, 0.002, 0.001, 1.5, k_max=4)


def test_an_idle_weak_drafter_is_paired_with_the_strongest_verifier():
    policy = SpecPairPolicy()
    weaker_verifier = _h100(node_id="a100", power_score=5.0)
    (change,) = policy.decide([weaker_verifier, _h100(), _l4()], now_s=0.0)
    assert (change.verifier, change.drafter, change.endpoint) == ("h100", "l4", "tcp://l4:1")
    assert 1 <= change.num_spec_tokens <= 4 and "paired: predicted TPOT" in change.reason
    assert policy.pairs == {"h100": "l4"}
    prediction = policy.predictions["h100"]
    assert prediction.tpot_paired_s < 0.9 * prediction.tpot_plain_s
    assert policy.decide([weaker_verifier, _h100(), _l4()], now_s=1.0) == []  # stable: nothing to change


def test_a_busy_drafter_is_not_paired_and_a_paired_one_that_gets_busy_is_unpaired():
    policy = SpecPairPolicy(SpecPairConfig(idle_load=1, busy_load=3))
    assert policy.decide([_h100(), _l4(num_running=2)], 0.0) == []  # load 2 > idle 1: not under-used
    assert len(policy.decide([_h100(), _l4(num_running=1)], 0.0)) == 1
    assert policy.decide([_h100(), _l4(num_running=2)], 0.1) == []  # hysteresis: 2 < busy 3, stays paired
    (change,) = policy.decide([_h100(), _l4(num_running=2, num_waiting=1)], 0.2)
    assert change.drafter == "" and change.endpoint == "" and "busy" in change.reason
    assert policy.pairs == {} and policy.num_unpairs_total == 1


def test_a_dead_or_draining_drafter_is_unpaired_and_another_idle_one_takes_over():
    policy = SpecPairPolicy()
    policy.decide([_h100(), _l4("l4a")], 0.0)
    assert policy.pairs == {"h100": "l4a"}
    changes = policy.decide([_h100(), _l4("l4b")], 1.0)  # l4a died; l4b is idle
    assert [(c.verifier, c.drafter) for c in changes] == [("h100", ""), ("h100", "l4b")]
    assert "left" in changes[0].reason
    (change,) = policy.decide([_h100(), _l4("l4b", routable=False)], 2.0)
    assert change.drafter == "" and policy.pairs == {}


def test_a_vocabulary_mismatch_is_refused_with_a_clear_reason():
    policy = SpecPairPolicy()
    assert policy.decide([_h100(), _l4(draft_vocab_id="32000:xyz")], 0.0) == []
    why = policy.refusals[("h100", "l4")]
    assert "vocabulary mismatch" in why and VOCAB in why and "32000:xyz" in why
    assert policy.decide([_h100(vocab_id=""), _l4()], 0.0) == []  # a verifier that says no tokenizer: refused


def test_no_pair_when_it_would_not_help():
    policy = SpecPairPolicy()
    assert policy.decide([_h100(), _l4(power_score=20.0)], 0.0) == []
    assert "stronger" in policy.refusals[("h100", "l4")]
    slow = _l4(draft_step_s=0.009)  # drafting nearly as slow as verifying: no gain
    assert policy.decide([_h100(), slow], 0.0) == [] and "less than 10% better" in policy.refusals[("h100", "l4")]
    assert policy.decide([_h100(decode_batch_size=16), _l4()], 0.0) == []  # speculation is off at that batch
    assert policy.decide([_h100(decode_step_s=0.0), _l4()], 0.0) == []  # nothing measured to predict with
    assert SpecPairPolicy(SpecPairConfig(enabled=False)).decide([_h100(), _l4()], 0.0) == []


def test_a_low_measured_acceptance_breaks_the_pair_after_the_hold_time():
    policy = SpecPairPolicy(SpecPairConfig(hold_s=2.0))
    policy.decide([_h100(), _l4()], 0.0)
    bad = _h100(spec_drafter="l4", spec_acceptance_rate=0.05)
    assert policy.decide([bad, _l4()], 1.0) == []  # within hold_s: kept
    assert policy.acceptance[("h100", "l4")] == 0.05
    (change,) = policy.decide([bad, _l4()], 2.5)
    assert change.drafter == "" and "predicted TPOT" in change.reason
    policy.acceptance.clear()  # as if the rate recovered at once: still not paired again within hold_s
    assert policy.decide([_h100(), _l4()], 3.0) == []
    policy.acceptance[("h100", "l4")] = 0.05
    assert policy.decide([_h100(), _l4()], 5.0) == []  # the measured alpha is remembered: not paired again
    policy.acceptance[("h100", "l4")] = 0.9
    assert [c.drafter for c in policy.decide([_h100(), _l4()], 5.0)] == ["l4"]  # it recovered, past hold_s


def test_one_drafter_serves_one_verifier_and_a_drafter_is_not_a_verifier():
    policy = SpecPairPolicy()
    changes = policy.decide([_h100(), _h100(node_id="h100b"), _l4("l4a"), _l4("l4b")], 0.0)
    assert sorted((c.verifier, c.drafter) for c in changes) in (
        [("h100", "l4a"), ("h100b", "l4b")],
        [("h100", "l4b"), ("h100b", "l4a")],
    )
    policy.forget("h100")
    assert policy.pairs == {"h100b": policy.pairs["h100b"]}


def test_two_idle_drafters_that_could_verify_do_not_pair_with_each_other_both_ways():
    # found by `zoo sim --spec-pairs auto` (sim/spec_pair_control.py): two idle T4s that both draft and may verify
    policy = SpecPairPolicy()
    t4a, t4b = (_l4(n, decode_step_s=0.030, num_running=1) for n in ("t4a", "t4b"))
    (change,) = policy.decide([t4a, t4b], 0.0)
    assert len(policy.pairs) == 1 and change.verifier not in policy.pairs.values()
    assert policy.decide([t4a, t4b], 1.0) == []


BAD_CONFIGS = [dict(idle_load=4, busy_load=4), dict(min_gain=1.0), dict(min_gain=-11.0), dict(num_spec_tokens=0)]


@pytest.mark.parametrize("bad", BAD_CONFIGS)
def test_config_is_validated(bad):
    with pytest.raises(ValueError):
        SpecPairConfig(**bad)


def test_an_idle_drafter_is_never_a_verifier_so_idle_weak_nodes_do_not_pair_with_each_other():
    policy = SpecPairPolicy()
    idle_l4s = [_l4("l4a"), _l4("l4b")]  # both could draft and, being equal, verify each other
    assert policy.decide(idle_l4s, 0.0) == [] and policy.pairs == {}
    (change,) = policy.decide([*idle_l4s, _h100(num_running=0)], 1.0)  # a node that cannot draft verifies
    assert change.verifier == "h100" and change.drafter in ("l4a", "l4b")
    busy = SpecPairPolicy()
    (change,) = busy.decide([_l4("l4a", num_running=1, decode_step_s=0.02), _l4("l4b")], 0.0)  # with work: it may
    assert (change.verifier, change.drafter) == ("l4a", "l4b")
