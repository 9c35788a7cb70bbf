"""RouterConfig.slo_tpot_harm_reported: decode protection counts the decoders a prompt pushes over from the nodes'
own reports of their decoders' slack (LoadReport.decode_slack_hist, engine/decode_slack.py), those with
backlog_s <= slack < backlog_s + own_s: the registry's keeping of it, the scalar reference, both decision paths
and the kernel (the fleet simulator's nodes reporting it: tests/sim/test_harm_reported_sim.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from controlplane.registry import ClusterRegistry
from controlplane.router.decode_steps import NO_DECODERS, NUM_BINS, cumulative, histogram
from controlplane.router.policies import cost_kernel
from controlplane.router.policies.cost_reference import predict_cost_s
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import decoders_pushed_over
from controlplane.router.policy import ClusterSnapshot
from engine.clock import ManualClock
from tests.controlplane.router.test_cost_kernel import KERNELS, _run
from tests.controlplane.router.test_harm_triage import PROTECTION_ONLY, _decoding_pair

COUNT = replace(PROTECTION_ONLY, slo_tpot_harm_count=True)
REPORTED = replace(COUNT, slo_tpot_harm_reported=True)


def test_the_registry_keeps_a_well_formed_slack_histogram_and_drops_a_malformed_one(make_hello, make_report):
    registry = ClusterRegistry(ManualClock())
    registry.join(make_hello("a"))

    def reported(counts):
        registry.report(make_report("a", decode_slack_hist=counts))
        return registry.snapshot().nodes[0].decode_slack_hist

    good = list(histogram([5.0, 300.0]))
    assert reported(good) == tuple(good)
    assert reported([]) == NO_DECODERS  # none (or an older agent)
    assert reported([1] * (NUM_BINS - 1)) == NO_DECODERS  # not one count per bin
    assert reported([-1] + [2] * (NUM_BINS - 1)) == NO_DECODERS  # a negative count
    assert reported([0] * NUM_BINS) == NO_DECODERS
    assert reported([10**30] * NUM_BINS) == (10**30,) * NUM_BINS  # large, but well formed: kept, loses nothing


def _nodes(make_node_view):
    """Two H100s prefilling 40k tokens/s, their lengths alike (four decoders of 999 steps each: the lengths count
    none pushed over by a 0.1 s prompt); ``tight`` reports its four with 20-50 ms of slack left (a 0.1 s prompt
    pushes all four over), ``loose`` its with 5 s (none) and 0.1 s of queue."""
    fields = dict(prefill_tok_per_s=40_000.0, decode_batch_size=4, decode_step_ms=10.0, num_running=4)
    lengths = histogram([999] * 4)
    tight = make_node_view(
        "tight", "h100-sxm", decode_steps_hist=lengths, decode_slack_hist=histogram([20, 30, 40, 50]), **fields
    )
    loose = make_node_view(
        "loose", "h100-sxm", decode_steps_hist=lengths, decode_slack_hist=histogram([5000] * 4),
        queued_prefill_tokens=4_000, **fields,
    )  # fmt: skip
    return tight, loose


def test_the_reference_counts_from_the_reported_slack(make_node_view, make_route_request):
    tight, loose = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)  # 0.1 s of prefill
    assert decoders_pushed_over(tight, 4_000, COUNT) == 0.0  # by the lengths: 999 steps absorb it
    assert decoders_pushed_over(tight, 4_000, REPORTED) == 4.0
    assert decoders_pushed_over(loose, 4_000, REPORTED) == 0.0
    assert decoders_pushed_over(tight, 4_000, REPORTED, num_cached_tokens=3_990) == pytest.approx(0.0)  # 0.25 ms
    penalty = REPORTED.slo_tpot_harm_penalty_s
    assert predict_cost_s(tight, request, REPORTED) == pytest.approx(
        predict_cost_s(tight, request, COUNT) + 4 * penalty
    )
    capped = replace(REPORTED, slo_tpot_harm_count_cap_s=5.0)
    assert predict_cost_s(tight, request, capped) == pytest.approx(predict_cost_s(tight, request, COUNT) + 5.0)
    assert decoders_pushed_over(replace(tight, decode_slack_hist=NO_DECODERS), 4_000, REPORTED) == 0.0


@pytest.mark.parametrize("use_kernel", [False, True], ids=["numpy", "kernel"])
def test_both_paths_send_the_prompt_where_the_reports_say_it_pushes_none_over(
    make_node_view, make_route_request, use_kernel
):
    tight, loose = _nodes(make_node_view)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=2)
    snapshot = ClusterSnapshot(0.0, (tight, loose))
    assert HardwareAwarePolicy(COUNT, use_kernel).choose(request, snapshot) == "tight"  # the lengths: the quicker
    assert HardwareAwarePolicy(REPORTED, use_kernel).choose(request, snapshot) == "loose"


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_reported_slack(kernel):
    """The decode-protection pair, node 0 reporting four decoders with 20-50 ms of slack, node 1 none: a 1,000-token
    prompt (0.1 s) pushes node 0's four over, and node 1 wins behind its 0.5 s of queue; the 960 cached tokens on
    node 0 leave 4 ms of prefill, pushing none over: node 0 wins."""
    values = _decoding_pair((0.01, 0.01))
    values[cost_kernel.COL_CUM :, 0] = cumulative(histogram([20, 30, 40, 50]))
    knobs = dict(num_prompt_tokens=1000, slo_ttft_s=1.0, slo_tpot_s=0.05, harm_penalty_s=3.0, harm_count=1.0)
    assert _run(kernel, values, **knobs)[0] == 0  # as lengths, 20-50 steps absorb 0.1 s at 40 ms a step
    i, cost = _run(kernel, values, harm_reported=1.0, **knobs)
    assert i == 1 and list(cost) == pytest.approx([0.1 + 4 * 3.0, 0.1 + 0.5])
    assert _run(kernel, values, harm_reported=1.0, cand=(0,), cached=(960,), **knobs)[0] == 0
