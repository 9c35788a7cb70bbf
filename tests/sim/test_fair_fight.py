"""sim/fair_fight.py: issue 10's targets read off one run's reports, against the best fair anchor that ran."""

from __future__ import annotations

import math

import pytest

from sim.fair_fight import FAIR_ANCHORS, fair_fight, format_fair_fight
from sim.report import PERCENTILES, PolicyReport, aggregate


def _report(policy: str, p99: float, goodput: float, p50: float = 0.5) -> PolicyReport:
    pct = {p: p50 for p in PERCENTILES}
    return PolicyReport(
        policy=policy, num_requests=10, num_unserved=0, ttft_s={**pct, 99: p99}, tpot_s=dict(pct), e2e_s=dict(pct),
        ttft_p99_over_p50=p99 / p50, goodput=goodput, num_preemptions=0, num_swapped_out_blocks=0,
        num_swapped_in_blocks=0, num_recomputed_tokens=0, prefix_cache_hit_rate=0.0, utilisation={"l4": 0.5},
        requests_by_gpu={"l4": 10}, simulated_s=10.0, wall_s=1.0, speedup=10.0,
    )  # fmt: skip


def test_the_best_anchor_is_read_per_target_and_round_robin_is_not_an_anchor():
    reports = [
        _report("hardware_aware", p99=1.0, goodput=0.80),
        _report("round_robin", p99=0.1, goodput=0.99),  # ours, not anyone's shipped router: not compared
        _report("llm_d", p99=2.0, goodput=0.70),
        _report("dynamo_kv", p99=3.0, goodput=0.85),
    ]
    fight = fair_fight(reports)
    assert fight["anchors"] == ["llm_d", "dynamo_kv"]
    assert set(fight["missing_anchors"]) == set(FAIR_ANCHORS) - {"llm_d", "dynamo_kv"}
    assert fight["best_p99_anchor"] == "llm_d" and fight["p99_lead"] == 2.0 and fight["p99_lead_met"]
    assert fight["best_goodput_anchor"] == "dynamo_kv"
    assert fight["goodput_margin"] == pytest.approx(-0.05) and not fight["goodput_met"]
    assert fight["ttft_p99_over_p50"] == 2.0 and fight["ttft_p99_over_p50_met"]
    assert fight["best_goodput_anchor_ttft_p99_s"] == 3.0 and fight["best_goodput_anchor_p99_over_ours"] == 3.0
    text = format_fair_fight(fight)
    assert "2x lower (target >= 1.5x): met" in text and "margin -0.050 (target >= 0): missed" in text
    assert "missed; its P99 TTFT 3 s, 3x ours" in text


def test_the_goodput_best_anchor_is_not_the_p99_best_one_when_it_gives_up_the_tail():
    reports = [
        _report("hardware_aware", p99=6.0, goodput=0.20),
        _report("sglang_cache_aware", p99=42.0, goodput=0.23),  # ahead on goodput, its tail 7x ours
        _report("envoy_wlr", p99=9.0, goodput=0.18),
    ]
    fight = fair_fight(reports)
    assert fight["best_goodput_anchor"] == "sglang_cache_aware" and fight["best_p99_anchor"] == "envoy_wlr"
    assert fight["best_goodput_anchor_ttft_p99_s"] == 42.0
    assert fight["best_goodput_anchor_p99_over_ours"] == pytest.approx(7.0)
    assert fight["p99_lead"] == pytest.approx(1.5) and fight["p99_lead_met"]


def test_a_lead_below_one_and_a_half_and_a_wide_tail_are_missed():
    fight = fair_fight([_report("hardware_aware", p99=1.4, goodput=0.9, p50=0.1), _report("envoy_wlr", 2.0, 0.5)])
    assert fight["p99_lead"] == pytest.approx(2.0 / 1.4) and not fight["p99_lead_met"]
    assert fight["goodput_met"] and not fight["ttft_p99_over_p50_met"]


def test_an_anchor_that_never_served_its_p99_loses_to_any_finite_one():
    fight = fair_fight([_report("hardware_aware", 5.0, 0.5), _report("vllm_ps_roundrobin", math.inf, 0.2)])
    assert fight["p99_lead"] == math.inf and fight["p99_lead_met"]
    fight = fair_fight([_report("hardware_aware", math.inf, 0.5), _report("least_requests", 4.0, 0.2)])
    assert fight["p99_lead"] == 0.0 and not fight["p99_lead_met"]


def test_without_hardware_aware_or_any_fair_anchor_there_is_no_fight():
    assert fair_fight([_report("llm_d", 1.0, 0.5)]) is None
    assert fair_fight([_report("hardware_aware", 1.0, 0.5), _report("round_robin", 1.0, 0.5)]) is None


def test_with_seeds_the_intervals_come_along():
    runs = [
        [_report("hardware_aware", p99, g), _report("sglang_cache_aware", 3 * p99, g - 0.1)]
        for p99, g in ((1.0, 0.8), (2.0, 0.9))
    ]
    fight = fair_fight(aggregate(runs))
    assert fight["seeds"] == 2 and fight["ttft_p99_s"] == pytest.approx(1.5)
    assert fight["goodput_ci95"] > 0 and fight["best_anchor_goodput_ci95"] > 0 and fight["ttft_p99_ci95_s"] > 0
    assert fight["best_goodput_anchor_ttft_p99_ci95_s"] > 0
    assert "means over 2 seeds" in format_fair_fight(fight)


def test_policy_fair_runs_hardware_aware_and_every_fair_anchor():
    from controlplane.router.policies import POLICIES
    from sim.policy_names import all_policies, policy_list

    fair = policy_list("fair")
    assert fair[0] == "hardware_aware" and set(fair[1:]) == set(FAIR_ANCHORS)
    assert set(fair) <= set(POLICIES) and set(fair) <= set(all_policies())
    assert policy_list("llm_d, dynamo_kv") == ["llm_d", "dynamo_kv"]
    fight = fair_fight([_report(name, 1.0 + i, 0.5) for i, name in enumerate(fair)])
    assert fight["missing_anchors"] == [] and fight["anchors"] == list(FAIR_ANCHORS)


def test_unknown_policy_names_are_refused_before_a_run_even_in_real_time(capsys):
    from sim.cli import main
    from sim.policy_names import policy_list

    with pytest.raises(ValueError, match=r"unknown policies \['nosuch'\]"):
        policy_list("llm_d,nosuch")
    # the real-time twin refuses them too, before it starts a fleet (it used to find out in the child process)
    assert main(["--realtime", "--fleet", "zoo", "--trace", "conv", "--policy", "nosuch", "--max-requests", "2"]) != 0
    err = capsys.readouterr()
    assert "unknown policies ['nosuch']" in err.err
    assert "real time" not in err.out
