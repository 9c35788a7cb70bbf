"""controlplane/toml_file.py: every TOML file the project reads (zoo.toml, a cells file, a simulated fleet, its
split settings) refuses invalid TOML, and TOML nested past the parser's depth, with a ValueError naming the file;
the CLI answers `zoo: error: ...`, exit 2, no traceback."""

from __future__ import annotations

import pytest

from controlplane.cells import load_cells
from controlplane.toml_file import load_toml
from sim.fleet import load_fleet
from sim.split import load_split_config
from zoo.cli import main
from zoo.up_config import load_up_config

DEPTH = 5_000  # past the interpreter's recursion limit: tomllib recurses into each level
BAD = {
    "deep inline table": "[controlplane.router]\nslo_ttft_s = " + "{a = " * DEPTH + "1" + "}" * DEPTH + "\n",
    "deep array": "name = " + "[" * DEPTH + "1" + "]" * DEPTH + "\n",
    "not TOML": "[controlplane\n",
}
READERS = {"load_toml": load_toml, "zoo.toml": load_up_config, "cells": load_cells, "fleet": load_fleet,
           "split": load_split_config}  # fmt: skip


@pytest.mark.parametrize("reader", list(READERS))
@pytest.mark.parametrize("text", list(BAD.values()), ids=list(BAD))
def test_a_bad_toml_file_is_a_value_error_naming_it(tmp_path, reader, text):
    path = tmp_path / "zoo.toml"
    path.write_text(text)
    with pytest.raises(ValueError, match="invalid TOML") as e:
        READERS[reader](path)
    assert str(path) in str(e.value) and len(str(e.value)) < 1_000


def test_a_good_file_reads_as_tomllib_reads_it(tmp_path):
    path = tmp_path / "zoo.toml"
    path.write_text('[controlplane]\npolicy = "hardware_aware"\n[controlplane.router]\nslo_tpot_s = 0.05\n')
    assert load_toml(path) == {"controlplane": {"policy": "hardware_aware", "router": {"slo_tpot_s": 0.05}}}
    with pytest.raises(FileNotFoundError):
        load_toml(tmp_path / "absent.toml")


@pytest.mark.parametrize("command", [["up", "--config"], ["sim", "--fleet"]])
def test_the_cli_answers_a_deeply_nested_file_with_a_clear_error(tmp_path, capsys, command):
    path = tmp_path / "zoo.toml"
    path.write_text(BAD["deep inline table"])
    assert main([*command, str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("zoo") and "invalid TOML" in err and "Traceback" not in err  # `zoo: error:`, `zoo sim:`
