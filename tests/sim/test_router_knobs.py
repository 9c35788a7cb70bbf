"""``zoo sim --router-knobs``: RouterConfig fields for every policy of a run, checked as RouterConfig checks them."""

from __future__ import annotations

import argparse
import json

import pytest

import sim.cli as cli
from sim.fleet import load_fleet
from sim.router_knobs import parse_router_knobs


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    cli.add_sim_args(parser)
    return parser.parse_args(list(argv))


def test_knobs_are_typed_as_router_config_types_them():
    assert parse_router_knobs(None) == parse_router_knobs("") == {}
    knobs = parse_router_knobs('{"slo_sacrifice_weight": 10, "tpot_excess_only": false, "tpot_horizon_tokens": 64}')
    assert knobs == {"slo_sacrifice_weight": 10.0, "tpot_excess_only": False, "tpot_horizon_tokens": 64}
    assert type(knobs["slo_sacrifice_weight"]) is float  # an int given for a float field, as RouterConfig holds it


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{not json", "not JSON"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),  # nested past any parser's depth: refused, not a crash
        ("[1, 2]", "must be a JSON object"),
        ('{"no_such_knob": 1}', "not a settable RouterConfig field: 'no_such_knob'"),
        ('{"' + "k" * 100_000 + '": 1}', "not a settable RouterConfig field"),
        ('{"slo_ttft_s": 2}', "set by the tool's other options"),  # --slo-ttft's: one setting, one place
        ('{"policy": "llm_d"}', "not a settable"),
        ('{"slo_sacrifice_weight": "ten"}', "Expected `float`, got `str`"),
        ('{"slo_pack_weight": true}', "Expected `float`, got `bool`"),
        ('{"slo_sacrifice_weight": -1}', "slo_sacrifice_weight must be a finite number >= 0"),
        ('{"slo_sacrifice_max_rate_ratio": 1e999}', "Number out of range"),  # inf: refused by the parser
    ],
)
def test_bad_knobs_are_refused_with_a_clear_error(text, message):
    with pytest.raises(ValueError, match="--router-knobs") as e:
        parse_router_knobs(text)
    assert message in str(e.value)
    assert len(str(e.value)) < 2_000  # a huge key is not echoed whole


def test_every_policy_gets_the_knobs_and_the_operators_slo(monkeypatch):
    seen = {}

    class Recorder:
        def __init__(self, fleet, workload, policy, *, router_config, **kwargs):
            seen[policy] = (router_config.slo_sacrifice_weight, router_config.tpot_weight, router_config.slo_ttft_s)

        def run(self):
            raise StopIteration

    monkeypatch.setattr(cli, "FleetSimulator", Recorder)
    args = _args("--slo-ttft", "2", "--router-knobs", '{"slo_sacrifice_weight": 10, "tpot_weight": 0.3}')
    for policy in ("hardware_aware", "llm_d"):
        with pytest.raises(StopIteration):
            cli.run_policies(load_fleet("small"), None, [policy], args)
    assert seen == {"hardware_aware": (10.0, 0.3, 2.0), "llm_d": (10.0, 0.3, 2.0)}


def test_zoo_sim_reports_its_knobs_and_refuses_bad_ones_before_running(traces_dir, capsys):
    common = ["--fleet", "small", "--trace", "code", "--load", "0.5", "--duration", "5", "--policy", "hardware_aware"]
    assert cli.run_sim(_args(*common, "--json", "--router-knobs", '{"tpot_weight": 0.3}')) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["info"]["router_knobs"] == {"tpot_weight": 0.3}
    assert cli.run_sim(_args(*common, "--router-knobs", '{"tpot_weight": -2}')) == 2
    captured = capsys.readouterr()
    assert "zoo sim: --router-knobs: tpot_weight must be a finite number >= 0" in captured.err
    assert captured.out == ""  # nothing simulated


def test_the_decision_bench_checks_its_knobs_the_same_way(capsys):
    from bench.controlplane_router import main

    with pytest.raises(SystemExit) as e:
        main(["--nodes", "8", "--decisions", "10", "--knobs", '{"slo_sacrifice_weight": "ten"}'])
    assert e.value.code == 2
    assert "--knobs: Expected `float`, got `str`" in capsys.readouterr().err
