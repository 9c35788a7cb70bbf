"""A node's sleep mode on its engine thread (agent/node_sleep.py): "abort" aborts its requests and sleeps, "wait"
sleeps once they are done and answers then, a wake calls off a sleep still waiting; a request that reaches a node
asleep (or about to be) is refused as OVERLOADED, which the control plane resumes elsewhere; the LoadReports say the
level. Driven step by step (the engine thread's own calls), then once through a running EngineThread."""

from __future__ import annotations

import threading

from agent.engine_thread import EngineThread
from agent.node_core import NodeCore
from agent.node_sleep import WAITING, NodeSleep
from backends.fake import build_trivial_engine
from engine.sampling_params import SamplingParams
from transport.messages import ErrorCode, ErrorReply, LoadReport, SleepControl

PARAMS = SamplingParams(max_tokens=3, ignore_eos=True)


def _node() -> tuple[NodeCore, NodeSleep]:
    core = NodeCore(build_trivial_engine(num_device_blocks=64), "n0")
    return core, NodeSleep(core)


def test_abort_aborts_the_nodes_requests_and_sleeps_at_once():
    core, sleep = _node()
    core.add("a", [1, 2, 3], PARAMS)
    core.step()
    (answer,) = sleep.ask(SleepControl(request_id="ask-1", action="sleep", level=2, mode="abort"))
    assert answer.ok and answer.request_id == "ask-1" and answer.node_id == "n0" and answer.sleep_level == 2
    assert core.num_inflight == 0 and not core.has_work() and sleep.level == 2
    refusal = sleep.refusal("b")
    assert refusal.code is ErrorCode.OVERLOADED and "asleep (level 2)" in refusal.message
    (woken,) = sleep.ask(SleepControl(request_id="ask-2", action="wake_up"))
    assert woken.ok and woken.detail == "awake" and woken.sleep_level == 0 and sleep.refusal("b") is None


def test_wait_answers_once_the_requests_are_done():
    core, sleep = _node()
    core.add("a", [1, 2, 3], PARAMS)
    assert sleep.ask(SleepControl(request_id="ask-1", action="sleep", level=1, mode="wait")) == []
    assert sleep.level == WAITING and "about to sleep" in sleep.refusal("b").message
    answers = []
    for _ in range(10):
        core.step()
        answers += sleep.after_pass()
        if answers:
            break
    (answer,) = answers
    assert answer.ok and answer.sleep_level == 1 and core.num_finished_total == 1  # its request ran to its end
    assert sleep.after_pass() == []


def test_a_wake_calls_off_a_sleep_still_waiting_and_bad_asks_are_answered_why():
    core, sleep = _node()
    core.add("a", [1, 2, 3], PARAMS)
    sleep.ask(SleepControl(request_id="ask-1", action="sleep", mode="wait"))
    called_off, woken = sleep.ask(SleepControl(request_id="ask-2", action="wake_up"))
    assert (called_off.request_id, called_off.ok) == ("ask-1", False) and "called off" in called_off.detail
    assert woken.ok and sleep.level == 0 and core.num_inflight == 1  # the request goes on
    for msg, why in (
        (SleepControl(action="sleep", level=3), "sleep level must be 1 or 2"),
        (SleepControl(action="sleep", mode="keep"), "mode must be one of abort, wait"),
        (SleepControl(action="nap"), "unknown action 'nap'"),
        (SleepControl(action="wake_up", tags=["gpu"]), "unknown wake_up tag"),
    ):
        (answer,) = sleep.ask(msg)
        assert not answer.ok and why in answer.detail, answer.detail


def test_the_engine_thread_refuses_requests_while_asleep_and_reports_the_level():
    thread = EngineThread(NodeCore(build_trivial_engine(num_device_blocks=64), "n0"), report_interval_s=0.01)
    worker = threading.Thread(target=thread.run, daemon=True)
    worker.start()
    try:
        thread.sleep_control(SleepControl(request_id="ask-1", action="sleep", level=1))
        thread.add("late", [1, 2, 3], PARAMS)
        seen: dict[str, object] = {}
        while not {"answer", "refusal", "report"} <= seen.keys():
            for msg in thread.outbox.get(timeout=10):
                if isinstance(msg, SleepControl):
                    seen["answer"] = msg
                elif isinstance(msg, ErrorReply):
                    seen["refusal"] = msg
                elif isinstance(msg, LoadReport) and msg.sleep_level == 1:
                    seen["report"] = msg
        assert seen["answer"].ok and seen["refusal"].request_id == "late"
        assert seen["refusal"].code is ErrorCode.OVERLOADED
    finally:
        thread.stop()
        worker.join(timeout=10)
