"""RouterConfig.tpot_measured_steps: the TPOT predictions' decode step is at least the node's measured mean step
time of its last report's window (NodeView.step_mean_ms, every step, mixed prefill+decode ones included), on the
scalar predictions and on both decision paths (numpy and the compiled kernel) alike; the node measures it over
the steps that carried decode rows (StepRates.token_step_ms, LoadReport.decode_token_step_ms) and the registry takes
it from the report, a value that is not a time left out."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from controlplane.registry import ClusterRegistry
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import predict_decoders_tpot_s, predict_tpot_s, tpot_step_s
from controlplane.router.policy import ClusterSnapshot
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.step_rates import StepRates

# only the TPOT miss charge decides: 2 s on a node predicted over 50 ms per token; the measured step off here
CONFIG = RouterConfig(
    default_model_params_b=1.0, hardware_aware_use_prefix=False, tpot_weight=0.0, slo_triage_penalty_s=0.0,
    slo_tpot_harm_penalty_s=0.0, slo_sacrifice_weight=0.0, slo_ttft_s=2.0, slo_tpot_s=0.05,
    slo_tpot_miss_penalty_s=2.0, tpot_measured_steps=False,
)  # fmt: skip


def _nodes(make_node_view):
    """Two nodes decoding 4 requests at a measured 20 ms per pure decode step: "fast" prefills faster, but its
    steps of the last window averaged 80 ms (prefill chunks riding along); "steady" averaged 22 ms."""
    fast = make_node_view("fast", "h100-sxm", prefill_tok_per_s=30_000.0, decode_step_ms=20.0, decode_batch_size=4,
                          num_running=4, step_mean_ms=80.0)  # fmt: skip
    steady = make_node_view("steady", "a100-80gb", prefill_tok_per_s=10_000.0, decode_step_ms=20.0,
                            decode_batch_size=4, num_running=4, step_mean_ms=22.0)  # fmt: skip
    return fast, steady


def test_the_measured_mean_step_bounds_the_tpot_from_below(make_node_view):
    fast, steady = _nodes(make_node_view)
    on = replace(CONFIG, tpot_measured_steps=True)
    assert tpot_step_s(fast, CONFIG) < 0.05 and predict_tpot_s(fast, CONFIG, 64) < 0.05  # the model: in time
    assert tpot_step_s(fast, on) == 0.08 and predict_tpot_s(fast, on, 64) >= 0.08
    assert predict_decoders_tpot_s(fast, 500, on, 64) >= 0.08 > predict_decoders_tpot_s(fast, 500, CONFIG, 64)
    # a mean below the modelled step changes nothing; a node with no steps in its window (0) neither
    assert tpot_step_s(steady, on) == tpot_step_s(steady, CONFIG)
    idle = replace(fast, step_mean_ms=0.0)
    assert predict_tpot_s(idle, on, 64) == predict_tpot_s(idle, CONFIG, 64)


@pytest.mark.parametrize("use_kernel", [False, True], ids=["numpy", "kernel"])
def test_both_decision_paths_price_the_measured_step(make_node_view, make_route_request, use_kernel):
    """Off: the faster-prefilling node wins (both predicted in time). On: its measured 80 ms steps miss the 50 ms
    target, the TPOT miss charge applies there, and the steady node wins."""
    fast, steady = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    snapshot = ClusterSnapshot(0.0, (fast, steady))
    assert HardwareAwarePolicy(CONFIG, use_kernel).choose(request, snapshot) == "fast"
    on = replace(CONFIG, tpot_measured_steps=True)
    assert HardwareAwarePolicy(on, use_kernel).choose(request, snapshot) == "steady"


def test_the_registry_takes_the_reported_time_per_decode_token(make_hello, make_report):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("n0"))
    assert registry.snapshot().nodes[0].step_mean_ms == 0.0  # no report yet
    registry.report(make_report("n0", decode_token_step_ms=20.0, recent_step_ms=[10.0, 90.0]))
    assert registry.snapshot().nodes[0].step_mean_ms == 20.0  # the steps with decode rows, not every step
    for bad in (math.nan, -1.0, math.inf):
        registry.report(make_report("n0", decode_token_step_ms=bad))
        assert registry.snapshot().nodes[0].step_mean_ms == 0.0  # not a time: no figure
    registry.report(make_report("n0"))  # an older agent: no such field
    assert registry.snapshot().nodes[0].step_mean_ms == 0.0


def test_step_rates_time_the_steps_that_carry_decode_rows():
    """A window of a prefill-only step (90 ms), a mixed step (60 ms) and a pure decode step (20 ms): the decoders
    got 40 ms per token; a window with no decode rows reports 0, and the pure decode mean is unchanged by it."""
    rates = StepRates()
    rates.observe(0.090, 2048, 0)
    rates.observe(0.060, 1024, 3)
    rates.observe(0.020, 0, 3)
    rates.close_window()
    assert rates.token_step_ms == pytest.approx(40.0) and rates.decode_step_ms == pytest.approx(20.0)
    rates.observe(0.090, 2048, 0)
    rates.close_window()
    assert rates.token_step_ms == 0.0 and rates.decode_step_ms == pytest.approx(20.0)
