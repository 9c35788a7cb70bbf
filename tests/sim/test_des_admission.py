"""The simulator places requests through the control plane's intake and admission: refusals are recorded."""

from __future__ import annotations

import pytest

from controlplane.admission import AdmissionConfig
from sim.des import FleetSimulator
from sim.workload import TraceRequest, Workload

GENEROUS = AdmissionConfig(max_queue_per_node=100_000, max_queue_global=1_000_000)


def _assert_refused(rec, code: str) -> None:
    assert rec.refusal == code
    assert rec.node_id is None and rec.first_token_s is None and rec.finish_s is None
    assert rec.num_output_tokens == 0


def _assert_served(rec, num_output_tokens: int) -> None:
    assert rec.refusal is None and rec.node_id is not None
    assert rec.finish_s is not None and rec.num_output_tokens == num_output_tokens


@pytest.mark.parametrize(
    "admission",
    [AdmissionConfig(max_queue_per_node=0), AdmissionConfig(max_queue_global=0)],
    ids=["no-node-queue", "no-global-queue"],
)
def test_no_queue_room_refuses_every_request_as_overloaded(small_fleet, tiny_workload, admission):
    workload = tiny_workload(num=20, gap_s=0.05)
    result = FleetSimulator(small_fleet(), workload, "round_robin", admission=admission).run()
    assert len(result.records) == 20
    for rec in result.records:
        _assert_refused(rec, "overloaded")
    assert [n.num_requests for n in result.nodes] == [0, 0, 0]
    assert all(n.num_steps == 0 for n in result.nodes)
    assert result.drained


def test_a_generous_admission_refuses_none_and_every_request_finishes(small_fleet, tiny_workload):
    workload = tiny_workload(num=40, gap_s=0.0, output=20)  # one burst: queues build up on every node
    result = FleetSimulator(small_fleet(), workload, "round_robin", admission=GENEROUS).run()
    assert len(result.records) == 40
    for rec in result.records:
        _assert_served(rec, 20)
    assert sum(n.num_requests for n in result.nodes) == 40
    assert result.drained


def test_a_node_queue_limit_caps_what_a_burst_places_on_each_node(small_fleet, tiny_workload):
    # all arrive at t = 0, before any load report: the control plane counts what it routed to each node
    workload = tiny_workload(num=30, gap_s=0.0, output=5)
    admission = AdmissionConfig(max_queue_per_node=2)
    result = FleetSimulator(small_fleet(), workload, "round_robin", admission=admission).run()
    assert [n.num_requests for n in result.nodes] == [2, 2, 2]
    served = [r for r in result.records if r.refusal is None]
    refused = [r for r in result.records if r.refusal is not None]
    assert len(served) == 6 and len(refused) == 24
    for rec in served:
        _assert_served(rec, 5)
    for rec in refused:
        _assert_refused(rec, "overloaded")
    assert result.drained


def test_a_prompt_longer_than_the_fleets_context_is_refused(small_fleet):
    fleet = small_fleet()
    context = fleet.engine.scheduler_config(fleet.model).max_model_len
    requests = (
        TraceRequest(0.0, 300, 5, "default", ()),
        TraceRequest(0.1, context, 5, "default", ()),  # no room for one output token
        TraceRequest(0.2, context + 500, 5, "default", ()),
        TraceRequest(0.3, context - 1, 1, "default", ()),  # fills the context exactly
    )
    result = FleetSimulator(fleet, Workload("long", requests), "round_robin", admission=GENEROUS).run()
    short, at_context, past_context, just_fits = result.records
    _assert_served(short, 5)
    _assert_refused(at_context, "prompt_too_long")
    _assert_refused(past_context, "prompt_too_long")
    _assert_served(just_fits, 1)
    assert sum(n.num_requests for n in result.nodes) == 2
    assert result.drained
