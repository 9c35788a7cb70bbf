"""NodeSleeps' bookkeeping (controlplane/node_sleeps.py) on a fake registry and fake asks: a node taken out of routing
for a sleep is put back when it could not sleep, when the ask was cancelled before an answer (at its next awake
report), and when it wakes; an operator's drain outlasts all of them; "abort" resumes the node's requests first."""

from __future__ import annotations

import anyio
import pytest

from controlplane.node_sleeps import WAITING, NodeSleeps
from controlplane.registry import NodeState
from transport.messages import LoadReport, SleepControl

pytestmark = pytest.mark.anyio


class Registry:
    def __init__(self, *node_ids: str) -> None:
        self.states = dict.fromkeys(node_ids, NodeState.UP)
        self.inflight = {n: [] for n in node_ids}

    def state(self, node_id):
        return self.states.get(node_id)

    def drain(self, node_id, leaving=False):
        self.states[node_id] = NodeState.DRAINING
        return True

    def resume(self, node_id):
        self.states[node_id] = NodeState.UP
        return "resumed"

    def inflight_request_ids(self, node_id):
        return list(self.inflight[node_id])

    def views(self):
        return [type("View", (), {"node_id": n}) for n in self.states]


class Asks:
    """Answers each ask as ``answer(node_id, msg)`` says (None: no answer), or never (``hang``)."""

    def __init__(self, answer=None, hang: bool = False) -> None:
        self.answer, self.hang = answer, hang

    async def ask(self, node_ids, make, send, timeout_s):
        if self.hang:
            await anyio.sleep_forever()
        return {n: self.answer(n, make(f"ask-{n}")) for n in node_ids}


def _ok(level: int):
    def answer(node_id: str, msg: SleepControl) -> SleepControl:
        return SleepControl(node_id=node_id, ok=True, sleep_level=0 if msg.action == "wake_up" else level)

    return answer


def _report(node_id: str, level: int, idle: bool = False) -> LoadReport:
    return LoadReport(
        node_id=node_id, num_running=0, num_waiting=0, num_swapped=0, kv_usage=0.0, num_free_device_blocks=64,
        queued_prefill_tokens=0, decode_batch_size=0, recent_step_ms=[], prefill_tok_per_s=0.0, decode_step_ms=0.0,
        num_preemptions_total=0, num_requests_finished_total=0, prefix_cache_hit_rate=0.0, sleep_level=level,
        sleep_idle=idle,
    )  # fmt: skip


def _sleeps(registry, asks, resumed=None) -> NodeSleeps:
    resume = (lambda rid, why: resumed.append(rid) or True) if resumed is not None else (lambda rid, why: True)
    return NodeSleeps(registry, asks, lambda msg, node_id: None, resume, lambda node_id, why: None)


async def test_abort_resumes_the_nodes_requests_then_it_sleeps_and_a_wake_puts_it_back():
    registry, resumed = Registry("a", "b"), []
    registry.inflight["a"] = ["r1", "r2"]
    sleeps = _sleeps(registry, Asks(_ok(1)), resumed)
    answers = await sleeps.sleep(["a"], 1, "abort")
    assert answers["a"]["ok"] and resumed == ["r1", "r2"] and sleeps.levels == {"a": 1}
    assert registry.states == {"a": NodeState.DRAINING, "b": NodeState.UP}
    await sleeps.wake_up(["a"], [])
    assert sleeps.levels == {} and registry.states["a"] is NodeState.UP


async def test_a_node_that_cannot_sleep_is_put_back_and_one_that_says_nothing_waits():
    registry = Registry("a", "b")
    refuse = lambda node_id, msg: SleepControl(node_id=node_id, ok=False, detail="no sleep mode")  # noqa: E731
    sleeps = _sleeps(registry, Asks(refuse))
    await sleeps.sleep(["a"], 2, "wait")
    assert registry.states["a"] is NodeState.UP and sleeps.levels == {}
    sleeps = _sleeps(registry, Asks(lambda node_id, msg: None))
    await sleeps.sleep(["b"], 1, "wait")
    assert sleeps.levels == {"b": WAITING} and registry.states["b"] is NodeState.DRAINING
    sleeps.on_report(_report("b", 1))  # it slept once its requests were done
    assert sleeps.levels == {"b": 1} and not sleeps.is_sleeping  # a is awake
    sleeps.on_report(_report("b", 0))  # woken by an ask whose answer was lost: routed to again
    assert sleeps.levels == {} and registry.states["b"] is NodeState.UP


async def test_a_cancelled_ask_leaves_the_node_out_only_until_its_next_awake_report():
    registry = Registry("a")
    sleeps = _sleeps(registry, Asks(hang=True))
    async with anyio.create_task_group() as tg:
        tg.start_soon(sleeps.sleep, ["a"], 1, "abort")
        await anyio.sleep(0.01)
        assert registry.states["a"] is NodeState.DRAINING
        sleeps.on_report(_report("a", 0))  # the ask is still out: the report may predate it
        assert registry.states["a"] is NodeState.DRAINING
        tg.cancel_scope.cancel()  # the caller went away before an answer
    sleeps.on_report(_report("a", 0))
    assert registry.states["a"] is NodeState.UP and sleeps.levels == {}


async def test_an_operators_drain_outlasts_the_sleep_and_a_new_control_plane_learns_from_reports():
    registry = Registry("a", "b")
    registry.drain("a")  # an operator's
    sleeps = _sleeps(registry, Asks(_ok(1)))
    await sleeps.sleep(["a"], 1, "wait")
    await sleeps.wake_up(["a"], [])
    assert registry.states["a"] is NodeState.DRAINING
    fresh = _sleeps(registry, Asks(_ok(1)))  # a restarted control plane: b's report says it sleeps, by an idle sleep
    fresh.on_report(_report("b", 2, idle=True))
    assert fresh.levels == {"b": 2} and fresh.idle == {"b"} and registry.states["b"] is NodeState.DRAINING
    fresh.on_node_lost("b")
    assert fresh.levels == {} and fresh.idle == set()
    with pytest.raises(ValueError, match="mode must be one of"):
        await fresh.sleep(["a"], 1, "keep")
