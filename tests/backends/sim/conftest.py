"""Factories for the simulated-GPU backend tests (fixtures: --import-mode=importlib)."""

from __future__ import annotations

import pytest

from backends.sim.calibration import default_calibration_dir
from engine.batch import ScheduledRequest, SchedulerOutput
from engine.sampling_params import SamplingParams


def _scheduled(req_id: str, num_tokens: int, start_pos: int = 0, sample: bool = True) -> ScheduledRequest:
    return ScheduledRequest(req_id, [5] * num_tokens, start_pos, [0], sample, SamplingParams(max_tokens=4))


@pytest.fixture
def make_scheduled():
    return _scheduled


@pytest.fixture
def make_batch():
    def make(*requests: ScheduledRequest, step_id: int = 0, **moves) -> SchedulerOutput:
        return SchedulerOutput(step_id, list(requests), **moves)

    return make


@pytest.fixture
def calibration_dir():
    path = default_calibration_dir()
    if not any(path.glob("*_mlp.csv")):
        pytest.skip(f"no calibration data in {path}")
    return path
