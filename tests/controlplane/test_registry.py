from __future__ import annotations

import pytest

from controlplane.registry import ClusterRegistry, LossReason
from engine.clock import ManualClock


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def registry(clock):
    return ClusterRegistry(clock, heartbeat_timeout_s=3.0)


def test_join_puts_a_fresh_node_in_the_snapshot(registry, make_hello):
    assert registry.join(make_hello("b")) is None
    assert registry.join(make_hello("a", gpu="h100-sxm")) is None
    nodes = registry.snapshot().nodes
    assert [v.node_id for v in nodes] == ["a", "b"]  # node-id order
    a = nodes[0]
    assert a.gpu_type == "H100" and a.memory_bandwidth_gbps == 3350.0 and a.max_model_len == 4096
    assert a.num_free_device_blocks == a.num_device_blocks == 1024  # no report yet: all free
    assert a.num_inflight == 0 and a.prefill_tok_per_s == 0.0
    assert "a" in registry and len(registry) == 2


def test_snapshot_filters_by_model_and_cell(registry, make_hello):
    registry.join(make_hello("a", model="m1", cell="east"))
    registry.join(make_hello("b", model="m1", cell="west"))
    registry.join(make_hello("c", model="m2", cell="east"))

    def ids(**kw):
        return [v.node_id for v in registry.snapshot(**kw).nodes]

    assert ids() == ["a", "b", "c"]
    assert ids(model="m1") == ["a", "b"]
    assert ids(cell="east") == ["a", "c"]
    assert ids(model="m1", cell="east") == ["a"]
    assert ids(model="nope") == []
    assert registry.model_names() == ["m1", "m2"]


def test_missed_heartbeats_expire_a_node_with_its_inflight_requests(registry, clock, make_hello):
    registry.join(make_hello("a"))
    registry.join(make_hello("b"))
    registry.on_routed("a", "r1", 100)
    registry.on_routed("a", "r2", 50)
    clock.advance(2.0)
    assert registry.heartbeat("b")
    clock.advance(1.5)  # a silent for 3.5 s, b for 1.5 s
    (lost,) = registry.expire()
    assert lost.node_id == "a" and lost.reason is LossReason.HEARTBEAT_TIMEOUT
    assert set(lost.request_ids) == {"r1", "r2"}
    assert "a" in lost.error_message and "heartbeats" in lost.error_message
    assert [v.node_id for v in registry.snapshot().nodes] == ["b"]
    assert registry.node_of_request("r1") is None
    assert registry.expire() == []
    assert not registry.heartbeat("a")  # dead: it must join again
    stats = registry.make_stats()
    assert stats.num_expired_total == 1 and stats.num_failed_requests_total == 2
    assert stats.num_unknown_node_messages_total == 1


def test_a_report_counts_as_liveness(registry, clock, make_hello, make_report):
    registry.join(make_hello("a"))
    for _ in range(5):
        clock.advance(2.0)
        assert registry.report(make_report("a"))
        assert registry.expire() == []
    clock.advance(3.01)
    assert [lost.node_id for lost in registry.expire()] == ["a"]


def test_rejoin_after_restart_fails_old_requests_and_starts_fresh(registry, make_hello, make_report):
    registry.join(make_hello("a", pid=1))
    registry.report(make_report("a", num_running=3, prefill_tok_per_s=900.0))
    registry.on_routed("a", "r1", 10)
    lost = registry.join(make_hello("a", pid=2))
    assert lost is not None and lost.reason is LossReason.RESTARTED and lost.request_ids == ("r1",)
    (view,) = registry.snapshot().nodes
    assert view.num_inflight == 0 and view.num_running == 0 and view.prefill_tok_per_s == 0.0
    assert registry.hello("a").pid == 2
    stats = registry.make_stats()
    assert stats.num_rejoins_total == 1 and stats.num_joins_total == 2 and stats.num_nodes == 1


def test_leave_returns_inflight_requests(registry, make_hello):
    registry.join(make_hello("a"))
    registry.on_routed("a", "r1", 10)
    lost = registry.leave("a", "shutdown")
    assert lost.reason is LossReason.LEFT and lost.request_ids == ("r1",) and "shutdown" in lost.error_message
    assert registry.leave("a") is None
    assert registry.snapshot().nodes == ()


def test_inflight_accounting_is_fresher_than_reports(registry, make_hello, make_report):
    registry.join(make_hello("a"))
    registry.on_routed("a", "r1", 100)
    registry.on_routed("a", "r2", 40)
    (view,) = registry.snapshot().nodes
    assert view.num_inflight == 2 and view.inflight_prefill_tokens == 140
    registry.on_first_token("a", "r1")
    assert registry.snapshot().nodes[0].inflight_prefill_tokens == 40
    registry.report(make_report("a", num_running=2, queued_prefill_tokens=40))  # the report now knows r2
    (view,) = registry.snapshot().nodes
    assert view.inflight_prefill_tokens == 0 and view.queued_prefill_tokens == 40 and view.num_inflight == 2
    registry.on_finished("a", "r1")
    registry.on_finished("a", "r1")  # twice: ignored
    registry.on_finished("ghost", "r9")  # unknown node: ignored
    assert registry.snapshot().nodes[0].num_inflight == 1
    assert registry.inflight_request_ids("a") == ["r2"] and registry.node_of_request("r2") == "a"
    assert registry.make_stats().num_inflight == 1


def test_on_routed_errors(registry, make_hello):
    registry.join(make_hello("a"))
    with pytest.raises(KeyError, match="unknown node"):
        registry.on_routed("b", "r1", 10)
    registry.on_routed("a", "r1", 10)
    with pytest.raises(ValueError, match="already in flight"):
        registry.on_routed("a", "r1", 10)


def test_unchanged_nodes_keep_their_view_object(registry, make_hello, make_report):
    registry.join(make_hello("a"))
    registry.join(make_hello("b"))
    before = registry.snapshot().nodes
    registry.on_routed("a", "r1", 10)
    registry.report(make_report("b"))  # same values as the hello-only view
    after = registry.snapshot().nodes
    assert after[0] is not before[0] and after[1] is before[1]


def test_bad_hello_and_timeout_are_rejected(clock, make_hello):
    with pytest.raises(ValueError, match="heartbeat_timeout_s"):
        ClusterRegistry(clock, heartbeat_timeout_s=0)
    registry = ClusterRegistry(clock)
    with pytest.raises(ValueError, match="node_id"):
        registry.join(make_hello(""))
    with pytest.raises(ValueError, match="max_model_len"):
        registry.join(make_hello("a", max_model_len=0))


def test_a_view_replaced_after_a_leave_lands_at_its_nodes_new_position(registry, make_hello, make_report):
    for node_id in ("d", "b", "a", "c"):
        registry.join(make_hello(node_id))
    before = registry.snapshot().nodes
    registry.leave("b")
    registry.report(make_report("d", num_running=5))  # d moved from position 3 to 2
    registry.on_routed("c", "r1", 10)
    nodes = registry.snapshot(model="m").nodes
    assert [v.node_id for v in nodes] == ["a", "c", "d"]
    assert nodes[0] is before[0]  # unchanged views keep their object
    assert nodes[1].num_inflight == 1 and nodes[2].num_running == 5
    registry.join(make_hello("b"))  # back, in node-id order
    assert [v.node_id for v in registry.snapshot().nodes] == ["a", "b", "c", "d"]
    assert registry.snapshot().nodes[3].num_running == 5
