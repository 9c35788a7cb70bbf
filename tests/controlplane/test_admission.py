from __future__ import annotations

from dataclasses import replace

import pytest

from controlplane.admission import AdmissionConfig, AdmissionControl, RefusalReason, queued_requests
from transport.messages import ErrorCode


def test_queued_counts_reported_waiting_or_unreported_routed(make_node_view):
    assert queued_requests(make_node_view(num_waiting=2, num_swapped=1)) == 3
    assert queued_requests(make_node_view(num_running=4, num_inflight=10)) == 6
    assert queued_requests(make_node_view(num_running=8, num_inflight=3)) == 0


def test_per_node_limit(make_node_view, make_snapshot):
    control = AdmissionControl(AdmissionConfig(max_queue_per_node=4, max_queue_global=100, retry_after_s=2.5))
    snap = make_snapshot(make_node_view("a", num_waiting=4), make_node_view("b", num_waiting=3))
    refusal = control.check(snap, "a")
    assert refusal is not None and refusal.reason is RefusalReason.NODE_QUEUE_FULL
    assert refusal.node_id == "a" and refusal.retry_after_s == 2.5 and refusal.code is ErrorCode.OVERLOADED
    assert "'a'" in refusal.message and "4" in refusal.message
    assert control.check(snap, "b") is None
    assert control.check(snap) is None
    stats = control.make_stats()
    assert stats["num_admitted_total"] == 2 and stats["num_refused_node_queue_full_total"] == 1


def test_global_limit(make_node_view, make_snapshot):
    control = AdmissionControl(AdmissionConfig(max_queue_per_node=100, max_queue_global=10))
    nodes = [make_node_view(f"n{i}", num_waiting=3) for i in range(3)]
    assert control.check(make_snapshot(*nodes), "n0") is None  # 9 queued
    nodes[2] = replace(nodes[2], num_inflight=4)  # +1 routed beyond the report: 10 queued
    refusal = control.check(make_snapshot(*nodes), "n0")
    assert refusal is not None and refusal.reason is RefusalReason.GLOBAL_QUEUE_FULL and refusal.node_id is None
    assert "10 requests queued over 3 nodes" in refusal.message


def test_incremental_totals_follow_snapshots(make_node_view, make_snapshot):
    control = AdmissionControl(AdmissionConfig(max_queue_per_node=1000, max_queue_global=50))
    nodes = tuple(make_node_view(f"n{i}") for i in range(40))
    assert control.check(make_snapshot(*nodes)) is None
    for i in range(50):  # one node changes per check, as between real decisions
        nodes = (*nodes[:7], replace(nodes[7], num_waiting=i), *nodes[8:])
        refusal = control.check(make_snapshot(*nodes))
        assert (refusal is not None) == (i >= 50)
    nodes = (*nodes[:7], replace(nodes[7], num_waiting=50), *nodes[8:])
    assert control.check(make_snapshot(*nodes)).reason is RefusalReason.GLOBAL_QUEUE_FULL


def test_empty_snapshot_admits(make_snapshot):
    assert AdmissionControl().check(make_snapshot(), "x") is None


@pytest.mark.parametrize("kwargs", [{"max_queue_per_node": -1}, {"max_queue_global": -1}, {"retry_after_s": 0.0}])
def test_config_validation(kwargs):
    with pytest.raises(ValueError):
        AdmissionConfig(**kwargs)
