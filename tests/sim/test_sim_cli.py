from __future__ import annotations

import argparse
import json

from sim.cli import add_sim_args, all_policies, run_sim


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


def test_unknown_policy_is_an_error(capsys):
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    assert run_sim(parser.parse_args(["--fleet", "small", "--policy", "nope"])) == 2
    assert "unknown policies" in capsys.readouterr().err
