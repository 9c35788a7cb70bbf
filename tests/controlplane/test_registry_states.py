"""A live node's routing state (up / suspect / draining) and how fast a dead node is detected, on a manual clock."""

from __future__ import annotations

import pytest

from controlplane.control_plane_config import ControlPlaneConfig
from controlplane.registry import ClusterRegistry, LossReason, NodeState
from engine.clock import ManualClock


@pytest.fixture
def clock():
    return ManualClock()


@pytest.fixture
def registry(clock):
    return ClusterRegistry(clock, heartbeat_timeout_s=0.8)


def _ids(registry, **kw) -> list[str]:
    return [v.node_id for v in registry.snapshot(**kw).nodes]


def test_a_suspect_node_is_not_routed_to_until_it_is_heard_from(registry, make_hello, make_report):
    for node_id in ("c", "a", "b"):
        registry.join(make_hello(node_id, cell="east"))
    assert registry.suspect("b")
    assert registry.state("b") is NodeState.SUSPECT
    assert _ids(registry) == _ids(registry, model="m") == _ids(registry, cell="east") == ["a", "c"]
    assert "b" in registry and len(registry) == 3  # still a member: only routing stops
    assert not registry.suspect("b") and not registry.suspect("nope")
    registry.report(make_report("b", num_running=2))  # it is alive: back, in node-id order, with its new load
    assert registry.state("b") is NodeState.UP
    assert _ids(registry) == _ids(registry, model="m", cell="east") == ["a", "b", "c"]
    assert registry.snapshot().nodes[1].num_running == 2
    registry.suspect("a")
    registry.heartbeat("a")  # a heartbeat is enough too
    assert _ids(registry) == ["a", "b", "c"]
    stats = registry.make_stats()
    assert (stats.num_suspect, stats.num_suspected_total) == (0, 2)


def test_a_suspect_node_keeps_its_requests_and_still_expires(registry, clock, make_hello):
    registry.join(make_hello("a"))
    registry.on_routed("a", "r1", 10)
    registry.suspect("a")
    assert registry.inflight_request_ids("a") == ["r1"]
    clock.advance(0.9)
    (lost,) = registry.expire()
    assert (lost.node_id, lost.request_ids, lost.reason) == ("a", ("r1",), LossReason.HEARTBEAT_TIMEOUT)


def test_a_draining_node_gets_nothing_new_and_stays_draining_while_alive(registry, make_hello, make_report):
    registry.join(make_hello("a"))
    registry.join(make_hello("b"))
    registry.on_routed("a", "r1", 10)
    assert registry.drain("a") and registry.drain("a")  # idempotent
    assert not registry.drain("nope")
    assert registry.state("a") is NodeState.DRAINING
    assert _ids(registry) == ["b"]
    registry.report(make_report("a", num_running=1))
    registry.heartbeat("a")
    assert not registry.suspect("a")  # a failed send does not make a draining node routable again later
    assert registry.state("a") is NodeState.DRAINING and _ids(registry) == ["b"]
    assert [v.node_id for v in registry.views()] == ["a", "b"]  # stats still see it, with its load
    assert registry.views()[0].num_running == 1 and registry.views()[0].num_inflight == 1
    registry.on_finished("a", "r1")
    lost = registry.leave("a", "drained")
    assert lost.request_ids == () and "a" not in registry
    stats = registry.make_stats()
    assert (stats.num_draining, stats.num_drains_total) == (0, 1)


def test_joining_again_makes_a_draining_node_up(registry, make_hello):
    registry.join(make_hello("a"))
    registry.drain("a")
    registry.join(make_hello("a", pid=2))  # a restarted agent starts afresh (it says again if it drains)
    assert registry.state("a") is NodeState.UP and _ids(registry) == ["a"]


def test_default_settings_detect_a_dead_node_within_one_second():
    config = ControlPlaneConfig()
    assert config.dead_node_detection_s <= 1.0
    assert config.dead_node_detection_s / config.heartbeat_interval_s <= 5  # heartbeat periods


@pytest.mark.parametrize("died_after_s", [0.0, 0.05, 0.13, 0.2])
def test_a_dead_node_is_removed_by_the_first_expiry_pass_past_its_timeout(make_hello, died_after_s):
    """The control plane runs ``expire()`` every ``expiry_interval_s``; a node whose last message was at
    t is removed by the first pass after t + timeout, so within ``dead_node_detection_s`` of t."""
    config = ControlPlaneConfig()
    clock = ManualClock()
    registry = ClusterRegistry(clock, config.heartbeat_timeout_s)
    registry.join(make_hello("a"))
    clock.advance(died_after_s)  # its last message: then it dies
    registry.heartbeat("a")
    last_seen_s = clock.now()
    clock.advance(config.expiry_interval_s - died_after_s % config.expiry_interval_s)  # pass phase: 0, 0.2, ...
    lost = []
    while not lost:
        lost = registry.expire()
        if not lost:
            clock.advance(config.expiry_interval_s)
    detected_after_s = clock.now() - last_seen_s
    assert lost[0].silent_s == pytest.approx(detected_after_s)
    assert config.heartbeat_timeout_s < detected_after_s <= config.dead_node_detection_s + 1e-9
