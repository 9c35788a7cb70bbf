from __future__ import annotations

import argparse
import json

from sim.cli import add_sim_args, run_sim
from sim.policy_names import all_policies


def test_policy_list_has_ours_and_the_anchors():
    names = all_policies()
    for name in (
        "hardware_aware",
        "prefix_aware",
        "vllm_ps_roundrobin",
        "vllm_ps_prefixaware",
        "envoy_wlr",
        "llm_d",
        "sglang_cache_aware",
        "dynamo_kv",
    ):
        assert name in names


def test_zoo_sim_prints_json_per_policy(traces_dir, capsys):
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    args = parser.parse_args(
        [
            "--fleet",
            "small",
            "--trace",
            "code",
            "--load",
            "0.5",
            "--duration",
            "5",
            "--policy",
            "hardware_aware,dynamo_kv",
            "--json",
        ]
    )
    assert run_sim(args) == 0
    out = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in out["policies"]] == ["hardware_aware", "dynamo_kv"]
    assert out["info"]["offered_load"] == 0.5 and out["info"]["time_scale"] > 0
    assert args.load == 0.5
    ours, anchor = out["policies"]
    fight = out["info"]["fair_fight"]  # hardware_aware against the only fair anchor that ran
    assert fight["anchors"] == ["dynamo_kv"] and fight["best_p99_anchor"] == fight["best_goodput_anchor"] == "dynamo_kv"
    assert fight["goodput_margin"] == ours["goodput"] - anchor["goodput"]
    assert fight["goodput_met"] == (ours["goodput"] >= anchor["goodput"])
    assert fight["ttft_p99_over_p50"] == ours["ttft_p99_over_p50"]


def test_unknown_policy_is_an_error(capsys):
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    assert run_sim(parser.parse_args(["--fleet", "small", "--policy", "nope"])) == 2
    assert "unknown policies" in capsys.readouterr().err


def test_sweep_finds_where_the_slo_breaks_alike_one_run_at_a_time_or_two(traces_dir, sim_json_by_jobs):
    """--sweep: goodput at each load per policy and the first load where it falls below 99%; with --jobs 2 each
    (load, policy) run goes to a process of its own and the points are the same, in the same order."""
    argv = ["--fleet", "small", "--trace", "code", "--duration", "4", "--policy", "round_robin,hardware_aware",
            "--sweep", "--sweep-loads", "0.3,1.5", "--json"]  # fmt: skip
    outs, err = sim_json_by_jobs(argv)
    assert "2 loads x 2 policies, 2 runs at once" in err
    assert outs[0] == outs[1]
    points = outs[0]["points"]
    assert list(points) == ["round_robin", "hardware_aware"]
    for policy, rows in points.items():
        assert [load for load, _ in rows] == [0.3, 1.5]
        assert all(0.0 <= goodput <= 1.0 for _, goodput in rows)
        first_fail = next((load for load, goodput in rows if goodput < 0.99), None)
        assert outs[0]["slo_breaking_load"][policy] == first_fail
    assert points["round_robin"][1][1] < points["round_robin"][0][1]  # 150% of capacity: round robin falls behind
