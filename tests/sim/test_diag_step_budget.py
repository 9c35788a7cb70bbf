"""Every diagnosis script that offers ``--step-budget`` (scripts/tune_router.case_parser) hands it to the simulator:
a flag parsed and then ignored would report a run other than the one asked for."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


class _Stop(Exception):
    pass


@pytest.mark.parametrize("name", ["forecast_diag", "miss_diag", "tail_diag", "goodput_diag", "ttft_prediction_diag"])
def test_step_budget_reaches_simulate_split(name, monkeypatch):
    monkeypatch.syspath_prepend(str(SCRIPTS))  # the scripts import tune_router as their sibling
    module = importlib.import_module(name)
    seen = {}

    def fake_split(*args, step_budget=None, **kwargs):
        seen["step_budget"] = step_budget
        raise _Stop

    monkeypatch.setattr(module, "simulate_split", fake_split)
    monkeypatch.setattr("sys.argv", [f"{name}.py", "--trace", "code", "--step-budget", "sarathi"])
    with pytest.raises(_Stop):
        module.main()
    assert seen == {"step_budget": "sarathi"}
