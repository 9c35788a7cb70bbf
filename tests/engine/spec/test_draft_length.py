"""k per request from its measured acceptance rate (Leviathan et al. 2023, eq. 1 and the cost model)."""

from __future__ import annotations

import pytest

from engine.spec.draft_length import PROBE_INTERVAL, DraftLengthController, best_num_spec_tokens, expected_tokens


def test_expected_tokens_is_the_geometric_series():
    assert expected_tokens(0.0, 5) == 1.0
    assert expected_tokens(1.0, 4) == 5.0
    assert expected_tokens(0.5, 2) == pytest.approx(1 + 0.5 + 0.25)


def test_best_k_grows_with_acceptance_and_shrinks_with_cost():
    assert best_num_spec_tokens(0.95, 0.05, 8) == 8
    assert best_num_spec_tokens(0.3, 0.5, 8) == 0
    ks = [best_num_spec_tokens(a, 0.2, 8) for a in (0.3, 0.6, 0.8, 0.9, 0.97)]
    assert ks == sorted(ks) and ks[0] < ks[-1]
    assert best_num_spec_tokens(0.8, 0.05, 8) > best_num_spec_tokens(0.8, 0.4, 8)


def test_controller_raises_k_on_acceptance_and_drops_it_on_rejection():
    c = DraftLengthController(k_max=6, cost_per_token=0.2, initial_acceptance=0.5)
    start = c.num_spec_tokens("a")
    for _ in range(10):
        k = c.num_spec_tokens("a")
        c.observe("a", k, k)  # everything accepted
    assert c.acceptance("a") > 0.9 and c.num_spec_tokens("a") == 6 > start
    for _ in range(30):
        k = c.num_spec_tokens("a")
        if k == 0:
            break
        c.observe("a", k, 0)  # everything rejected
    assert k == 0 and c.acceptance("a") < 0.5
    ks = [c.num_spec_tokens("a") for _ in range(PROBE_INTERVAL)]
    assert ks.count(1) == 1 and ks.count(0) == PROBE_INTERVAL - 1  # off, with one probe


def test_requests_are_independent_and_non_adaptive_is_fixed():
    c = DraftLengthController(k_max=4, cost_per_token=0.1, initial_acceptance=0.7)
    for _ in range(10):
        c.observe("bad", 4, 0)
    assert c.num_spec_tokens("good") > 0 and c.num_spec_tokens("bad") == 0
    fixed = DraftLengthController(k_max=3, cost_per_token=5.0, initial_acceptance=0.1, adaptive=False)
    assert fixed.num_spec_tokens("x") == 3


def test_one_k_for_the_batch_weighs_every_request():
    c = DraftLengthController(k_max=5, cost_per_token=0.3, initial_acceptance=0.5)
    for _ in range(10):
        c.observe("good", 5, 5)
        c.observe("bad", 5, 0)
    k_good = c.num_spec_tokens_for_batch(["good"])
    k_mixed = c.num_spec_tokens_for_batch(["good", "bad", "bad", "bad"])
    assert k_good > k_mixed >= 0
    ks = [c.num_spec_tokens_for_batch(["bad"]) for _ in range(PROBE_INTERVAL)]
    assert ks.count(1) == 1 and ks.count(0) == PROBE_INTERVAL - 1


def test_probes_back_off_while_speculation_stays_off():
    c = DraftLengthController(k_max=4, cost_per_token=5.0, initial_acceptance=0.5)  # never worth it
    ks = [c.num_spec_tokens_for_batch(["r"]) for _ in range(PROBE_INTERVAL * 7)]
    probes = [i for i, k in enumerate(ks) if k]
    assert (
        len(probes) == 3 and probes[1] - probes[0] == 2 * PROBE_INTERVAL and probes[2] - probes[1] == 4 * PROBE_INTERVAL
    )
