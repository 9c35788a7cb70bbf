"""vLLM's --sleep-idle-ttl for a fleet (controlplane/idle_sleep.py), on a fake clock and a fake NodeSleeps: every awake
node sleeps once the fleet was idle past the TTL, not while a request is in flight; the next HTTP request waits for
the wake; a ZeroMQ request refused meanwhile makes the next poll wake them; only the sleeps it started are woken by
it, and nodes woken by someone else are seen as awake."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from controlplane.idle_sleep import IdleSleep, idle_sleep_of
from transport.messages import ErrorCode

pytestmark = pytest.mark.anyio


class FakeSleeps:
    def __init__(self, levels: dict[str, int] | None = None) -> None:
        self.levels = dict(levels or {})
        self.idle: set[str] = set()  # asleep by an idle sleep, as their reports say
        self.calls: list = []

    async def sleep(self, node_ids, level, mode, idle=False):
        assert idle
        self.calls.append(("sleep", sorted(node_ids), level, mode))
        self.levels.update(dict.fromkeys(node_ids, level))
        return {n: {"ok": True} for n in node_ids}

    async def wake_up(self, node_ids, tags):
        self.calls.append(("wake_up", sorted(node_ids), list(tags)))
        for n in node_ids:
            self.levels.pop(n, None)
        return {n: {"ok": True} for n in node_ids}


class Fleet:
    def __init__(self, levels=None) -> None:
        self.now = 0.0
        self.activity = [0, 0, 0]  # in flight, routed + refused, refused for no node
        self.sleeps = FakeSleeps(levels)
        self.idle = IdleSleep(self.sleeps, lambda: ["a", "b", "c"], lambda: tuple(self.activity), 10.0,
                              clock=lambda: self.now)  # fmt: skip


async def test_it_sleeps_the_fleet_once_idle_past_the_ttl_and_a_request_waits_for_the_wake():
    fleet = Fleet()
    fleet.now = 9.9
    await fleet.idle.step()
    assert fleet.sleeps.calls == []
    fleet.now = 10.0
    await fleet.idle.step()
    assert fleet.sleeps.calls == [("sleep", ["a", "b", "c"], 1, "wait")] and fleet.idle.auto_slept == {"a", "b", "c"}
    await fleet.idle.on_request_start()  # an HTTP request: the wake first
    assert fleet.sleeps.calls[-1] == ("wake_up", ["a", "b", "c"], []) and fleet.idle.auto_slept == set()
    fleet.now = 100.0
    await fleet.idle.step()  # long, but still in flight: no sleep
    assert len(fleet.sleeps.calls) == 2
    fleet.idle.on_request_end()
    fleet.now = 109.0
    await fleet.idle.step()
    assert len(fleet.sleeps.calls) == 2  # idle 9 s since the request's end
    fleet.now = 110.0
    await fleet.idle.step()
    assert fleet.sleeps.calls[-1][0] == "sleep" and fleet.idle.summary()["sleeps"] == 2


async def test_a_zeromq_request_wakes_it_first():
    fleet = Fleet()
    fleet.now = 10.0
    await fleet.idle.step()
    await fleet.idle.wake_for_request()  # client_requests.py, before it routes the request
    assert fleet.sleeps.calls[-1] == ("wake_up", ["a", "b", "c"], []) and fleet.idle.auto_slept == set()
    await fleet.idle.wake_for_request()  # awake: nothing to do
    assert len(fleet.sleeps.calls) == 2 and fleet.idle.in_flight == 0  # counted by the fleet's table, not here


async def test_zeromq_traffic_keeps_it_awake_and_a_refusal_while_asleep_wakes_it():
    fleet = Fleet()
    for t in (5.0, 12.0, 19.0):  # a request routed every 7 s: never idle 10 s
        fleet.now = t
        fleet.activity[1] += 1
        await fleet.idle.step()
    assert fleet.sleeps.calls == []
    fleet.now = 29.0
    await fleet.idle.step()
    assert fleet.idle.auto_slept
    fleet.activity[1] += 1  # a ZeroMQ client's request refused: no node awake
    fleet.activity[2] += 1
    await fleet.idle.step()
    assert fleet.sleeps.calls[-1] == ("wake_up", ["a", "b", "c"], []) and fleet.idle.num_wakes == 1


async def test_only_its_own_sleeps_are_woken_and_a_wake_by_someone_else_counts():
    fleet = Fleet(levels={"c": 2})  # an operator put c to sleep
    fleet.now = 10.0
    await fleet.idle.step()
    assert fleet.sleeps.calls == [("sleep", ["a", "b"], 1, "wait")]
    await fleet.idle.on_request_start()
    assert fleet.sleeps.calls[-1] == ("wake_up", ["a", "b"], []) and fleet.sleeps.levels == {"c": 2}
    fleet.idle.on_request_end()
    fleet.now = 20.0
    await fleet.idle.step()
    fleet.sleeps.levels.clear()  # POST /wake_up woke everyone meanwhile
    await fleet.idle.step()
    assert fleet.idle.auto_slept == set()
    await fleet.idle.on_request_start()
    assert fleet.sleeps.calls[-1][0] == "sleep"  # nothing to wake: it did not call wake_up again


async def test_a_restarted_control_plane_wakes_the_nodes_an_idle_sleep_put_to_sleep():
    fleet = Fleet(levels={"a": 1, "b": 1, "c": 2})  # what the nodes' reports said to a new control plane
    fleet.sleeps.idle = {"a", "b"}  # a and b by an idle sleep, c by an operator
    await fleet.idle.step()
    assert fleet.idle.auto_slept == {"a", "b"}
    await fleet.idle.on_request_start()
    assert fleet.sleeps.calls == [("wake_up", ["a", "b"], [])] and fleet.sleeps.levels == {"c": 2}


async def test_every_node_asleep_by_an_operator_is_left_alone():
    fleet = Fleet(levels={"a": 1, "b": 1, "c": 1})
    fleet.now = 50.0
    await fleet.idle.step()
    assert fleet.sleeps.calls == [] and fleet.idle.auto_slept == set()


def test_the_ttl_must_be_positive():
    with pytest.raises(ValueError, match="sleep_idle_ttl must be > 0"):
        IdleSleep(FakeSleeps(), lambda: [], lambda: (0, 0, 0), 0.0)


def test_the_control_planes_activity_counts_a_request_held_for_a_pools_first_node_as_in_flight():
    """idle_sleep_of: a request held for a first node (controlplane/cold_start.py) is not refused yet and not in the
    request table, but waits in the capacity plan's ``waiting``: in flight, so the fleet stays awake meanwhile."""
    cp = SimpleNamespace(
        requests={"r": None},
        counters={"routed": 3, "refused": 1},
        refused={ErrorCode.NO_NODE: 1},
        capacity=SimpleNamespace(waiting={"m": 2, "other": 1}),
        sleeps=FakeSleeps(),
        node_ids=["a"],
        config=SimpleNamespace(sleep_idle_ttl_s=10.0),
    )
    assert idle_sleep_of(cp)._activity() == (4, 4, 1)
