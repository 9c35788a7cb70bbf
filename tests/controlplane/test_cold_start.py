"""A request for a pool scaled to zero waits for its first node (controlplane/cold_start.py), on hand-made streams."""

from __future__ import annotations

import anyio
import pytest

from controlplane import cold_start
from controlplane.capacity_plan import CapacityPlanConfig, CapacityPlanner, PlanNode
from controlplane.cold_start import ColdStart, held_stream
from controlplane.frontend import FrontendError
from controlplane.request_path import HeldRefusal
from transport.messages import ClientGenerate, ErrorCode, ErrorReply, TokenChunk

pytestmark = pytest.mark.anyio


class Fleet:
    """Live nodes that change, and a ControlPlane.wait_until over them (re-checked at each change)."""

    def __init__(self) -> None:
        self.nodes: set[str] = set()
        self._changed = anyio.Event()

    def join(self, node_id: str) -> None:
        self.nodes.add(node_id)
        self._changed.set()
        self._changed = anyio.Event()

    def live(self) -> frozenset[str]:
        return frozenset(self.nodes)

    async def wait_until(self, predicate, timeout_s: float) -> None:
        with anyio.fail_after(timeout_s):
            while not predicate():
                await self._changed.wait()


class Path:
    """What cold_start.py uses of a RequestPath: other names of models, ``draining``, and a ``submit`` that refuses
    for want of a node and counts its refusals as RequestPath does (one handed to ``held``: only once it is settled)."""

    def __init__(self, aliases: dict[str, str] | None = None) -> None:
        self.aliases, self.draining = aliases or {}, False
        self.counted: list[ErrorReply] = []  # refusals counted as such
        self.cancelled = 0  # held requests whose client left

    def submit(self, msg, consumer, arrival_ns, token_ids=None, held=None, again=False) -> ErrorReply:
        reply = ErrorReply(request_id=msg.request_id, code=ErrorCode.NO_NODE, message="no live node serves 'm'")
        if held is not None:
            held(HeldRefusal(msg, reply, arrival_ns))
        else:
            self.counted.append(reply)
        return reply

    def settle_held(self, held: HeldRefusal, refused: bool) -> None:
        if refused:
            self.counted.append(held.reply)
        else:
            self.cancelled += 1


def held_at_zero(fleet: Fleet, path: Path, **config) -> tuple[CapacityPlanner, ColdStart]:
    """A plan holding "m" at zero nodes (its node gone), and a ColdStart over it whose live nodes are ``fleet``'s."""
    planner = CapacityPlanner(CapacityPlanConfig(default_min_nodes=0, **config))
    planner.plan(0.0, [PlanNode("n0", "m", "default", "L4", 0.24, 0.0, 0, 0, 0.0)], 1.0)
    planner.plan(1.0, [], 1.0)

    class Registry:
        def snapshot(self, model):
            return type("Snapshot", (), {"nodes": [type("View", (), {"node_id": n})() for n in fleet.nodes]})()

    return planner, ColdStart(planner, Registry(), path, fleet.wait_until)


def opener(fleet: Fleet, serves: str = "", code: ErrorCode = ErrorCode.NO_NODE):
    """A request's streams: refused with ``code`` while ``serves`` has not joined (through ``submit``, a Path's,
    when given); its attempts are counted."""
    attempts: list[frozenset[str]] = []

    async def stream(submit=None):
        attempts.append(fleet.live())
        if serves not in fleet.nodes:
            if submit is not None:
                submit(ClientGenerate(request_id="r"), None, 5)
            raise FrontendError(code, "no live node serves 'm' in cell None", 1.0)
        yield TokenChunk(request_id="r", token_ids=[7], text="a", finished=False)
        yield TokenChunk(request_id="r", token_ids=[8], text="b", finished=True)

    return stream, attempts


async def chunks(stream) -> list[list[int]]:
    return [list(c.token_ids) async for c in stream]


async def test_a_refused_request_waits_for_a_node_of_its_model_and_is_served_once_it_joins():
    fleet = Fleet()
    stream, attempts = opener(fleet, serves="b")
    served = []

    async def request():
        served.extend(await chunks(held_stream(stream, fleet.live, fleet.wait_until, 300.0)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(request)
        await anyio.wait_all_tasks_blocked()
        fleet.join("a")  # a node of another cell: submitted again, refused again, waits again
        await anyio.wait_all_tasks_blocked()
        assert not served and len(attempts) == 2
        fleet.join("b")
    assert served == [[7], [8]] and attempts == [frozenset(), frozenset("a"), frozenset("ab")]


async def test_no_wait_other_refusals_and_a_wait_past_its_limit_keep_the_refusal():
    fleet = Fleet()
    stream, attempts = opener(fleet, serves="b")
    with pytest.raises(FrontendError) as refused:
        await chunks(held_stream(stream, fleet.live, fleet.wait_until, 0.0))
    assert refused.value.code is ErrorCode.NO_NODE and len(attempts) == 1
    overloaded, attempts = opener(fleet, serves="b", code=ErrorCode.OVERLOADED)
    with pytest.raises(FrontendError) as refused:
        await chunks(held_stream(overloaded, fleet.live, fleet.wait_until, 300.0))
    assert refused.value.code is ErrorCode.OVERLOADED and len(attempts) == 1  # not a pool at zero: not held
    stream, attempts = opener(fleet, serves="b")
    with anyio.move_on_after(300):  # a virtual clock would be better; the limit is what ends this wait
        with pytest.raises(FrontendError) as refused:
            await chunks(held_stream(stream, fleet.live, fleet.wait_until, 0.05))
    assert refused.value.code is ErrorCode.NO_NODE and "no live node" in refused.value.message and len(attempts) == 1


async def test_only_a_model_the_plan_holds_at_zero_nodes_is_held():
    planner = CapacityPlanner(CapacityPlanConfig(default_min_nodes=0, cold_start_wait_s=120.0))
    planner.plan(0.0, [PlanNode("n0", "m", "default", "L4", 0.24, 0.0, 0, 0, 0.0)], 1.0)
    assert planner.cold_start_wait_s("m") == 0.0  # it has a node
    planner.plan(1.0, [], 1.0)
    assert planner.cold_start_wait_s("m") == 120.0 and planner.cold_start_wait_s("other") == 0.0

    class Registry:
        def snapshot(self, model):
            return type("Snapshot", (), {"nodes": ()})()

    fleet = Fleet()
    path = Path({"alias": "m"})
    cold = ColdStart(planner, Registry(), path, fleet.wait_until)
    stream, attempts = opener(fleet, serves="b")
    with pytest.raises(FrontendError):  # a model with no node the plan holds at zero: refused at once
        await chunks(cold.held("other", ["m", "other"], stream))
    assert len(attempts) == 1
    refusals = []

    async def ask(model: str) -> None:
        try:
            await chunks(cold.held(model, ["m", "other"], stream))
        except FrontendError as e:
            refusals.append(e.code)

    async with anyio.create_task_group() as tg:  # held: both still wait for a node once everything is blocked
        tg.start_soon(ask, "alias")
        tg.start_soon(ask, "")  # "": the default model, m
        await anyio.wait_all_tasks_blocked()
        assert len(attempts) == 3
        assert planner.waiting == {"m": 2}  # requests waiting for a node: the plan holds one asked for
        (plan,) = planner.plan(10_000.0, [], 1.0)  # long past any window, no arrival on record
        assert [v.desired_nodes for v in plan.variants] == [1]
        path.draining = True  # the control plane drains: they wait no more, their refusal stands
        fleet.join("x")  # (wait_until re-checks at a change, as ControlPlane.start_drain notifies)
    # each tried once more (a draining control plane's own refusal is the one that stands), and waited no more
    assert len(attempts) == 5 and refusals == [ErrorCode.NO_NODE, ErrorCode.NO_NODE] and planner.waiting == {}
    assert len(path.counted) == 2 and path.cancelled == 0  # each held one's refusal counted once, of its 2 tries
    (plan,) = planner.plan(20_000.0, [], 1.0)
    assert [v.desired_nodes for v in plan.variants] == [0]


async def test_a_held_request_served_in_the_end_or_left_by_its_client_is_no_refusal():
    """A held request's refusals are counted only if its wait ends refused (``RequestPath.settle_held``): one served
    once a node joins counts none, one whose client leaves while it waits counts a cancel."""
    fleet, path = Fleet(), Path()
    planner, cold = held_at_zero(fleet, path, cold_start_wait_s=300.0)
    stream, attempts = opener(fleet, serves="b")
    served = []

    async def ask() -> None:
        served.extend(await chunks(cold.held("m", ["m"], stream)))

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        fleet.join("a")  # refused again: waits again
        await anyio.wait_all_tasks_blocked()
        fleet.join("b")
    assert served == [[7], [8]] and len(attempts) == 3 and path.counted == [] and path.cancelled == 0
    fleet.nodes.clear()
    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert planner.waiting == {"m": 1}
        tg.cancel_scope.cancel()  # its client left
    assert path.counted == [] and path.cancelled == 1 and planner.waiting == {}


async def test_past_cold_start_max_waiting_a_request_is_refused_at_once_and_the_waiting_ones_wait_on(caplog):
    """At most ``cold_start_max_waiting`` requests wait for a first node of a model (Knative's activator bounds its
    queue per revision the same way): one more is refused at once, counted once, and the flood is logged once."""
    fleet, path = Fleet(), Path()
    planner, cold = held_at_zero(fleet, path, cold_start_wait_s=300.0, cold_start_max_waiting=1)
    stream, attempts = opener(fleet, serves="b")
    served, refused = [], []

    async def ask() -> None:
        try:
            served.extend(await chunks(cold.held("m", ["m"], stream)))
        except FrontendError as e:
            refused.append(e.code)

    async with anyio.create_task_group() as tg:
        tg.start_soon(ask)
        await anyio.wait_all_tasks_blocked()
        assert planner.waiting == {"m": 1}
        for _ in range(2):  # two more: each refused at once, without waiting
            await ask()
        assert refused == [ErrorCode.NO_NODE] * 2 and len(path.counted) == 2 and len(attempts) == 3
        fleet.join("b")  # the one waiting is served
    assert served == [[7], [8]] and planner.waiting == {} and len(path.counted) == 2
    assert sum("cold_start_max_waiting" in r.message for r in caplog.records) == 1


async def test_a_held_request_its_pools_full_queues_refuse_after_a_join_tries_again_until_one_has_room(monkeypatch):
    """A held request tried again once a node joined may find the pool's queues full (the other held requests took
    them): it waits on, tried again each HELD_RETRY_S (as Knative's activator keeps a request until a pod has room),
    and its tries after the first are no new arrivals (``again``); past its wait it is refused, counted once."""
    monkeypatch.setattr(cold_start, "HELD_RETRY_S", 0.01)
    fleet, path = Fleet(), Path()
    planner, cold = held_at_zero(fleet, path, cold_start_wait_s=300.0)
    refusals, again = [ErrorCode.NO_NODE, ErrorCode.OVERLOADED, ErrorCode.OVERLOADED], []

    async def stream(submit):
        again.append(submit.keywords["again"])
        if refusals:
            submit(ClientGenerate(request_id="r"), None, 5)
            raise FrontendError(refusals.pop(0), "refused", 1.0)
        yield TokenChunk(request_id="r", token_ids=[7], text="a", finished=True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(chunks, cold.held("m", ["m"], stream))
        await anyio.wait_all_tasks_blocked()
        fleet.join("b")  # no join after this one: the full queues' refusals are tried again on their own
    assert again == [False, True, True, True] and path.counted == [] and planner.waiting == {}
    fleet.nodes.clear()
    planner, cold = held_at_zero(fleet, path, cold_start_wait_s=0.5)
    refusals.extend([ErrorCode.NO_NODE] + [ErrorCode.OVERLOADED] * 100_000)  # its queues stay full

    async def late() -> None:
        with pytest.raises(FrontendError) as refused:
            await chunks(cold.held("m", ["m"], stream))
        assert refused.value.code is ErrorCode.OVERLOADED  # past its wait: the last refusal stands

    async with anyio.create_task_group() as tg:
        tg.start_soon(late)
        await anyio.wait_all_tasks_blocked()
        fleet.join("c")
    assert len(path.counted) == 1 and path.cancelled == 0 and planner.waiting == {}
