"""`zoo controlplane --router-knobs JSON` and zoo.toml's [controlplane.router]: an operator sets RouterConfig fields
(the router's SLO, hardware_aware's terms such as the goodput-first rule) on a real control plane, each checked by
name as RouterConfig checks it."""

from __future__ import annotations

import json

import msgspec
import pytest

from zoo.cli import build_parser, main
from zoo.serve import controlplane_from_args
from zoo.up_config import load_up_config


def _controlplane(*flags: str):
    return controlplane_from_args(build_parser().parse_args(["controlplane", "--fake-tokenizer", *flags]))


def test_the_knobs_reach_the_router_and_its_policy():
    knobs = '{"slo_ttft_s": 2, "slo_tpot_s": 0.05, "slo_tpot_lost_to_doomed": true}'
    cp = _controlplane("--router-knobs", knobs)
    router = cp.config.router
    assert (router.policy, router.slo_ttft_s, router.slo_tpot_s, router.slo_tpot_lost_to_doomed) == (
        "hardware_aware",
        2.0,
        0.05,
        True,
    )
    assert cp.path.policy.tpot_lost is not None and cp.path.forecast.tpot_lost is cp.path.policy.tpot_lost
    plain = _controlplane().config.router
    assert (plain.slo_ttft_s, plain.slo_tpot_lost_to_doomed) == (1.0, False)


def test_the_running_control_plane_says_which_knobs_it_runs_with():
    """ControlPlane.stats()["router"] (zoo:router_config_info, FleetStats.router_knobs): the SLO as running and
    exactly the fields the flag set, not RouterConfig's other defaults; nothing set: no knobs."""
    cp = _controlplane("--router-knobs", '{"slo_tpot_s": 0.05, "slo_tpot_lost_to_doomed": true, "tpot_weight": 0}')
    no_reloads = {"ok": 0, "refused": 0}
    assert cp.stats()["router"] == {
        "slo_ttft_s": 1.0,
        "slo_tpot_s": 0.05,
        "knobs": {"slo_tpot_lost_to_doomed": True, "slo_tpot_s": 0.05, "tpot_weight": 0.0},
        "reloads": no_reloads,
    }
    plain = {"slo_ttft_s": 1.0, "slo_tpot_s": 0.1, "knobs": {}, "reloads": no_reloads}
    assert _controlplane().stats()["router"] == plain
    assert _controlplane("--router-knobs", '{"slo_ttft_s": 1}').stats()["router"]["knobs"] == {}  # the default


@pytest.mark.parametrize(
    ("knobs", "message"),
    [
        ("{not json", "--router-knobs is not JSON"),
        ('{"policy": "llm_d"}', "not a settable RouterConfig field: 'policy'"),  # --policy's
        ('{"cells": {}}', "not a settable RouterConfig field: 'cells'"),  # --cells'
        ('{"slo_tpot_s": 0}', "slo_tpot_s must be > 0"),
        ('{"slo_tpot_lost_to_doomed": "yes"}', "Expected `bool`, got `str`"),
    ],
)
def test_a_bad_knob_is_a_clear_error_before_anything_starts(knobs, message, capsys, monkeypatch):
    monkeypatch.setattr("zoo.serve.configure_logging_from_args", lambda *a: None)  # the process keeps its logging
    with pytest.raises(ValueError, match="--router-knobs") as e:
        _controlplane("--router-knobs", knobs)
    assert message in str(e.value)
    assert main(["controlplane", "--fake-tokenizer", "--router-knobs", knobs]) == 2  # `zoo: error: ...`, exit 2
    assert message in capsys.readouterr().err


def test_zoo_toml_router_table_is_read_by_the_control_plane_from_the_file(tmp_path):
    config = tmp_path / "zoo.toml"
    config.write_text('[controlplane]\npolicy = "hardware_aware"\n[controlplane.router]\nslo_tpot_s = 0.05\n'
                      'slo_tpot_lost_to_doomed = true\n')  # fmt: skip
    argv = load_up_config(config).controlplane_argv()
    flag = argv.index("--router-knobs-file")  # the file itself: read again at a SIGHUP to the control plane
    assert argv[flag + 1] == str(config.resolve()) and "--router-knobs" not in argv
    cp = controlplane_from_args(build_parser().parse_args([*argv, "--fake-tokenizer"]))
    assert cp.config.router.slo_tpot_s == 0.05 and cp.config.router.slo_tpot_lost_to_doomed


@pytest.mark.parametrize(
    ("table", "message"),
    [
        ('router = "fast"', "controlplane.router must be a table"),
        ("[controlplane.router]\nno_such_knob = 1", "not a settable RouterConfig field: 'no_such_knob'"),
    ],
)
def test_a_bad_router_table_is_refused_with_the_file_named(tmp_path, table, message):
    config = tmp_path / "zoo.toml"
    config.write_text(f"[controlplane]\n{table}\n")
    with pytest.raises(ValueError, match=message) as e:
        load_up_config(config)
    assert str(config) in str(e.value)


def test_zoo_router_knobs_lists_every_settable_knob_with_its_default_and_description(capsys):
    """Each field --router-knobs takes, its type and RouterConfig's default, and its entry in RouterConfig's
    docstring: a field added without one fails here."""
    import dataclasses

    from controlplane.router.router_config import RouterConfig
    from controlplane.router.router_knobs import knob_docs, settable_knobs

    assert main(["router-knobs", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    assert [row["name"] for row in table] == [n for n in (f.name for f in dataclasses.fields(RouterConfig))
                                              if n in settable_knobs()]  # fmt: skip
    undocumented = [row["name"] for row in table if not row["doc"]]
    assert not undocumented, f"describe these in RouterConfig's docstring: {undocumented}"
    defaults = RouterConfig()
    for row in table:
        assert row["default"] == msgspec.to_builtins(getattr(defaults, row["name"])), row["name"]
    rows = {row["name"]: row for row in table}
    assert rows["slo_tpot_lost_to_doomed"]["type"] == "bool" and rows["slo_tpot_lost_to_doomed"]["default"] is False
    docs = knob_docs()  # fields described together share their entry
    assert docs["overload_hold_s"] == docs["overload_window_s"] and "overload mode" in docs["overload_hold_s"]
    assert docs["slo_ttft_s"] == docs["slo_tpot_s"] and "policy" not in rows  # --policy's, not a knob
    assert main(["router-knobs"]) == 0
    text = capsys.readouterr().out
    assert "slo_tpot_lost_to_doomed" in text and "bool" in text and max(map(len, text.splitlines())) < 160


def test_a_reader_that_goes_away_ends_the_command_quietly(monkeypatch):
    """`zoo router-knobs --json | head -1`: the closed pipe is exit status 141, not a traceback."""
    import os
    import sys

    read_end, write_end = os.pipe()
    os.close(read_end)
    with open(write_end, "w", buffering=1) as stdout:
        monkeypatch.setattr(sys, "stdout", stdout)
        assert main(["router-knobs", "--json"]) == 141


def test_the_knobs_file_is_read_at_start_and_refused_with_the_flag_or_broken(tmp_path, capsys, monkeypatch):
    """--router-knobs-file (read again at SIGHUP: tests/controlplane/fleet/test_router_reload_sighup.py): at start
    as --router-knobs; both at once, or a bad file, a clear error before anything starts."""
    monkeypatch.setattr("zoo.serve.configure_logging_from_args", lambda *a: None)
    knobs = tmp_path / "zoo.toml"
    knobs.write_text("[controlplane.router]\nslo_tpot_s = 0.05\n")
    cp = _controlplane("--router-knobs-file", str(knobs))
    assert cp.config.router.slo_tpot_s == 0.05 and cp.stats()["router"]["knobs"] == {"slo_tpot_s": 0.05}
    with pytest.raises(ValueError, match="give the knobs one way"):
        _controlplane("--router-knobs-file", str(knobs), "--router-knobs", '{"slo_ttft_s": 2}')
    knobs.write_text("[controlplane.router]\nslo_tpot_s = -1\n")
    assert main(["controlplane", "--fake-tokenizer", "--router-knobs-file", str(knobs)]) == 2
    err = capsys.readouterr().err
    assert str(knobs) in err and "slo_tpot_s must be > 0" in err


def test_zoo_ups_banner_says_how_to_reload_the_router(tmp_path):
    from zoo.up import LocalZoo

    config = tmp_path / "zoo.toml"
    config.write_text("[controlplane.router]\nslo_tpot_s = 0.05\n")
    banner = LocalZoo(load_up_config(config), tmp_path).describe()
    assert f"edit [controlplane.router] in {config.resolve()}, then kill -HUP" in banner
    plain = tmp_path / "plain.toml"  # no router table yet: the defaults, and one may be added and reloaded
    plain.write_text('[controlplane]\npolicy = "hardware_aware"\n')
    assert f"in {plain.resolve()}, then kill -HUP" in LocalZoo(load_up_config(plain), tmp_path).describe()
    assert "kill -HUP" not in LocalZoo(load_up_config(None), tmp_path).describe()  # no zoo.toml: no file to re-read
    both = tmp_path / "both.toml"
    both.write_text("[controlplane]\nrouter_knobs = '{}'\n[controlplane.router]\nslo_tpot_s = 0.05\n")
    with pytest.raises(ValueError, match="give the knobs one way"):
        load_up_config(both)
