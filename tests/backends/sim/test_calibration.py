from __future__ import annotations

import pytest

from backends.sim.calibration import errors, fit, load_samples
from backends.sim.cost_model import FITTED_EFFICIENCY


@pytest.fixture(scope="module")
def samples():
    from backends.sim.calibration import default_calibration_dir

    if not any(default_calibration_dir().glob("*_mlp.csv")):
        pytest.skip("no calibration data")
    return load_samples()


def test_samples_cover_both_gpus_and_every_model(samples):
    assert set(samples) == {"a100-80gb", "h100-sxm"}
    assert samples["a100-80gb"].num_rows == 1044 + 1824
    assert samples["h100-sxm"].num_rows == 2 * 1044


@pytest.mark.parametrize("profile", ["a100-80gb", "h100-sxm"])
def test_shipped_efficiencies_predict_measured_layers_within_bounds(samples, profile):
    # the layer time (sum of a row's operators) is what a step is made of
    report = errors(samples[profile], FITTED_EFFICIENCY[profile])
    assert report.layer_median <= 0.05
    assert report.layer_worst <= 0.40
    assert report.op_median <= 0.15


def test_refit_matches_the_shipped_constants(samples):
    data = samples["a100-80gb"]
    eff = fit(data)
    assert errors(data, eff).layer_median <= errors(data, FITTED_EFFICIENCY["a100-80gb"]).layer_median + 0.005
    assert eff.compute == pytest.approx(FITTED_EFFICIENCY["a100-80gb"].compute, abs=0.02)
