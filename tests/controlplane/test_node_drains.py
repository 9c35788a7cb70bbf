"""Draining a node and resuming it (controlplane/node_drains.py over the registry), sans-IO on a manual clock: a
drained node is routed to again once resumed and its agent is told; a node whose agent drains to stop cannot be
resumed; a resume its agent cannot be told of is undone; the answers a client gets."""

from __future__ import annotations

import pytest

from controlplane.node_drains import NodeDrains
from controlplane.registry import ClusterRegistry, NodeState
from engine.clock import ManualClock
from transport.actor import MailboxFull
from transport.messages import ErrorReply, NodeDrain


@pytest.fixture
def registry():
    return ClusterRegistry(ManualClock(), heartbeat_timeout_s=5.0)


@pytest.fixture
def sent():
    return []


@pytest.fixture
def drains(registry, sent):
    moved = []
    drains = NodeDrains(
        registry, lambda msg, node_id: sent.append((node_id, msg)), lambda node, why: moved.append(node)
    )
    drains.moved = moved
    return drains


def _ids(registry) -> list[str]:
    return [v.node_id for v in registry.snapshot().nodes]


def test_a_drained_node_resumes_and_its_agent_is_told(registry, drains, sent, make_hello):
    for node_id in ("a", "b"):
        registry.join(make_hello(node_id))
    registry.on_routed("a", "r1", 10)
    assert drains.drain("a", "maintenance")
    assert _ids(registry) == ["b"] and drains.moved == ["a"]
    assert sent[-1] == ("a", NodeDrain(node_id="a", reason="maintenance"))
    assert drains.resume("a", "done") is None
    assert registry.state("a") is NodeState.UP and _ids(registry) == ["a", "b"]  # in node-id order again
    assert sent[-1] == ("a", NodeDrain(node_id="a", reason="done", resume=True))
    assert registry.inflight_request_ids("a") == ["r1"]  # nothing was cancelled either way
    assert drains.resume("a") is None and len(sent) == 2  # not draining: nothing to do, nothing sent
    assert drains.num_resumed == 1
    assert "unknown node" in drains.resume("nope")
    registry.suspect("b")
    assert drains.resume("b") is None and registry.state("b") is NodeState.SUSPECT  # only a drain is undone


def test_a_node_whose_agent_drains_to_stop_is_not_resumed(registry, drains, sent, make_hello):
    registry.join(make_hello("a"))
    drains.on_agent_drain(NodeDrain(node_id="a", reason="SIGTERM", leaving=True))
    assert "shutting down" in drains.resume("a")
    assert registry.state("a") is NodeState.DRAINING and sent == []
    assert drains.drain("a") and "shutting down" in drains.resume("a")  # an operator's drain does not undo it
    registry.leave("a", "stopped")
    registry.join(make_hello("a"))  # a new agent process under the same id: a node like any other
    assert drains.drain("a") and drains.resume("a") is None and registry.state("a") is NodeState.UP


def test_a_resume_its_agent_cannot_be_told_of_is_undone(registry, make_hello):
    def full(msg, node_id):
        if msg.resume:
            raise MailboxFull("outbox full")

    drains = NodeDrains(registry, full, lambda node_id, why: None)
    registry.join(make_hello("a"))
    assert drains.drain("a")
    assert "stays drained" in drains.resume("a")
    assert registry.state("a") is NodeState.DRAINING and drains.num_resumed == 0


def test_a_clients_drain_and_resume_are_answered(registry, drains, make_hello):
    registry.join(make_hello("a"))
    registry.on_routed("a", "r1", 10)
    answer = drains.answer(NodeDrain(request_id="q1", node_id="a"))
    assert (answer.request_id, answer.num_inflight, answer.resume) == ("q1", 1, False)
    answer = drains.answer(NodeDrain(request_id="q2", node_id="a", resume=True))
    assert (answer.request_id, answer.num_inflight, answer.resume) == ("q2", 1, True)
    for msg in (NodeDrain(request_id="q3", node_id="nope"), NodeDrain(request_id="q4", node_id="nope", resume=True)):
        refused = drains.answer(msg)
        assert isinstance(refused, ErrorReply) and refused.param == "node_id" and "unknown node" in refused.message
        assert refused.request_id == msg.request_id
