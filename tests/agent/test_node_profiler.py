"""A node's profiler (agent/node_profiler.py) between /start_profile and /stop_profile: vLLM's delay and limit in
engine steps, refusals that leave the node serving, the engine thread's answers, and the real sessions: torch's
trace with each step's range, and JAX's."""

from __future__ import annotations

import gzip
import json
import queue
import threading
from pathlib import Path

import pytest

from agent.engine_thread import EngineThread, _Profile
from agent.node_core import NodeCore
from agent.node_profiler import NodeProfiler, ProfilerError, node_profiler
from backends.fake import build_trivial_engine
from backends.profiler_config import ProfilerConfig, parse_profiler_config
from engine.sampling_params import SamplingParams
from transport.messages import LoadReport, ProfileControl, TokenChunk


def _gunzip(path) -> bytes:
    return gzip.decompress(Path(path).read_bytes())


class FakeSession:
    def __init__(self, log: list, fail: str = "") -> None:
        self.log, self.fail = log, fail

    def start(self) -> None:
        if self.fail == "start":
            raise PermissionError("no room on the disk")
        self.log.append("start")

    def annotate(self, name: str):
        self.log.append(name)
        return open(__file__)  # any context manager

    def step(self) -> None:
        self.log.append("step")

    def stop(self):
        if self.fail == "stop":
            raise OSError("the device is gone")
        self.log.append("stop")
        return self.write

    def write(self) -> list[str]:
        if self.fail == "write":
            raise OSError("the disk filled")
        self.log.append("write")
        self.written_on = threading.current_thread().name
        return ["/t/node.trace.json.gz"]


def _profiler(log: list, fail: str = "", run_later=None, **config) -> NodeProfiler:
    sessions: list[FakeSession] = []

    def make() -> FakeSession:
        sessions.append(FakeSession(log, fail))
        return sessions[-1]

    profiler = NodeProfiler(ProfilerConfig(profiler="cuda", **config), make, run_later)
    profiler.sessions = sessions
    return profiler


def _steps(profiler: NodeProfiler, n: int) -> None:
    for _ in range(n):
        with profiler.step_range():
            pass
        profiler.after_step()


def test_it_records_each_step_in_a_range_from_start_to_stop():
    log: list = []
    profiler = _profiler(log)
    _steps(profiler, 2)  # before the start: nothing recorded
    assert profiler.start() == "cuda profiler started" and profiler.state == "recording"
    _steps(profiler, 2)
    write = profiler.stop()
    assert profiler.state == "off" and log[-1] == "stop"  # recording ended at once; the writing handed back
    assert write() == ["/t/node.trace.json.gz"]
    assert log == ["start", "zoo_step_3", "step", "zoo_step_4", "step", "stop", "write"]


def test_delay_iterations_then_max_iterations_and_the_stop_after_reports_that_trace():
    log: list = []
    profiler = _profiler(log, delay_iterations=2, max_iterations=3)
    assert "after 2 engine steps" in profiler.start() and profiler.state == "waiting"
    _steps(profiler, 2)
    assert log == ["start"] and profiler.state == "recording"
    _steps(profiler, 5)
    assert log == ["start", "zoo_step_3", "step", "zoo_step_4", "step", "zoo_step_5", "step", "stop", "write"]
    assert profiler.state == "off"
    assert profiler.stop()() == ["/t/node.trace.json.gz"]  # the trace that ended by its limit
    with pytest.raises(ProfilerError, match="not running"):
        profiler.stop()


def test_a_stop_while_it_waits_for_its_delay_records_nothing():
    log: list = []
    profiler = _profiler(log, delay_iterations=5)
    profiler.start()
    assert profiler.stop()() == [] and log == [] and profiler.state == "off"


def test_a_second_start_and_a_stop_without_a_start_are_refused():
    profiler = _profiler([])
    with pytest.raises(ProfilerError, match="POST /start_profile first"):
        profiler.stop()
    profiler.start()
    with pytest.raises(ProfilerError, match="already running"):
        profiler.start()
    assert profiler.state == "recording"


@pytest.mark.parametrize("fail", ["start", "stop", "write"])
def test_a_session_that_fails_is_reported_and_the_profiler_can_start_again(fail):
    log: list = []
    profiler = _profiler(log, fail=fail)
    with pytest.raises(ProfilerError, match=r"no room on the disk|the device is gone|the disk filled"):
        profiler.start()
        profiler.stop()()
    assert profiler.state == "off"
    profiler._make_session = lambda: FakeSession(log)
    profiler.start()
    assert profiler.stop()() == ["/t/node.trace.json.gz"]


def test_a_session_that_fails_after_its_delay_leaves_the_node_stepping():
    profiler = _profiler([], fail="start", delay_iterations=1)
    profiler.start()
    _steps(profiler, 3)  # the start at the delay's end fails: logged, not raised
    assert profiler.state == "off"


def _run(thread: EngineThread) -> threading.Thread:
    runner = threading.Thread(target=thread.run, daemon=True)
    runner.start()
    return runner


def _next_answer(thread: EngineThread) -> ProfileControl:
    while True:
        for msg in thread.outbox.get(timeout=10):
            if isinstance(msg, ProfileControl):
                return msg


def test_the_engine_thread_answers_for_its_node_and_traces_the_steps_between():
    log: list = []
    thread = EngineThread(NodeCore(build_trivial_engine(), "n0"), report_interval_s=60.0)
    thread.profiler = _profiler(log)
    runner = _run(thread)
    thread.profile(ProfileControl(request_id="ask-1", action="start", node_id="n0"))
    start = _next_answer(thread)
    assert (start.request_id, start.ok, start.detail) == ("ask-1", True, "cuda profiler started")
    thread.add("r1", [5, 6, 7], SamplingParams(max_tokens=3))
    finished = False
    while not finished:
        finished = any(isinstance(m, TokenChunk) and m.finished for m in thread.outbox.get(timeout=10))
    thread.profile(ProfileControl(request_id="ask-2", action="stop", node_id="n0"))
    stop = _next_answer(thread)
    assert stop.ok and stop.trace_files == ["/t/node.trace.json.gz"] and "1 files written" in stop.detail
    assert thread.profiler.sessions[0].written_on.startswith("zoo-trace-write")  # not on the engine thread
    assert sum(1 for entry in log if entry.startswith("zoo_step_")) >= 3  # one range per step of r1's 3 tokens
    thread.profile(ProfileControl(request_id="ask-3", action="stop"))
    assert "not running" in _next_answer(thread).detail
    thread.profile(ProfileControl(request_id="ask-4", action="reboot"))
    assert "unknown action 'reboot'" in _next_answer(thread).detail
    thread.stop()
    runner.join(10)


def test_a_node_without_a_profiler_says_how_to_turn_it_on_and_a_stopping_node_writes_its_trace():
    bare = EngineThread(NodeCore(build_trivial_engine(), "n0"), report_interval_s=60.0)
    out: list = []
    bare._apply(_Profile(ProfileControl(action="start")), out)
    assert not out[0].ok and "--profiler-config" in out[0].detail
    log: list = []
    thread = EngineThread(NodeCore(build_trivial_engine(), "n0"), report_interval_s=60.0)
    thread.profiler = _profiler(log)
    runner = _run(thread)
    thread.profile(ProfileControl(action="start"))
    assert _next_answer(thread).ok
    thread.stop()
    runner.join(10)
    assert log[-2:] == ["stop", "write"]  # written as the node stopped, not lost
    with pytest.raises(queue.Empty):
        thread.inbox.get_nowait()


def _torch_steps(profiler: NodeProfiler, n: int) -> None:
    """``n`` engine steps of one small matmul each, stepped as the engine thread steps them."""
    import torch

    profiler.start()
    for _ in range(n):
        with profiler.step_range():
            torch.ones(32, 32) @ torch.ones(32, 32)
        profiler.after_step()


def test_torchs_trace_has_each_step_in_its_range_and_the_op_table(tmp_path):
    config = parse_profiler_config(json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path)}))
    profiler = node_profiler(config, "gpu-7")
    _torch_steps(profiler, 2)
    files = profiler.stop()()
    trace = next(f for f in files if f.endswith(".pt.trace.json.gz"))
    assert trace.split("/")[-1].startswith("gpu-7.")
    events = json.loads(_gunzip(trace))["traceEvents"]
    names = {e.get("name") for e in events}
    assert {"zoo_step_1", "zoo_step_2", "aten::mm"} <= names
    table = next(f for f in files if Path(f).name.startswith("profiler_out_gpu-7.") and f.endswith(".txt"))
    assert "aten::mm" in Path(table).read_text()


def test_torchs_schedule_records_its_window_written_off_the_engine_thread(tmp_path):
    config = ProfilerConfig(
        profiler="torch", torch_profiler_dir=str(tmp_path), warmup_iterations=1, active_iterations=2,
        torch_profiler_dump_cuda_time_total=False,
    )  # fmt: skip
    profiler = node_profiler(config, "n1")
    _torch_steps(profiler, 4)
    assert not list(tmp_path.iterdir())  # nothing written on the engine thread
    assert len(profiler.stop()()) == 1  # the schedule's window, written by the callable the stop handed back
    names = {e.get("name") for f in tmp_path.glob("*.gz") for e in json.loads(_gunzip(f))["traceEvents"]}
    assert {"zoo_step_2", "zoo_step_3"} <= names and "zoo_step_1" not in names  # step 1 was the warmup


def test_a_cuda_capture_range_on_a_host_without_cuda_is_refused():
    import torch

    if torch.cuda.is_available():
        pytest.skip("this host has CUDA: the refusal is for hosts without")
    profiler = node_profiler(ProfilerConfig(profiler="cuda"), "n0")
    with pytest.raises(ProfilerError, match="no CUDA device"):
        profiler.start()


def test_jaxs_trace_of_a_jax_nodes_steps(tmp_path):
    import jax.numpy as jnp

    config = parse_profiler_config(json.dumps({"profiler": "jax", "jax_profiler_dir": str(tmp_path)}))
    profiler = node_profiler(config, "tpu-0")
    profiler.start()
    with profiler.step_range():
        (jnp.ones((16, 16)) @ jnp.ones((16, 16))).block_until_ready()
    profiler.after_step()
    files = profiler.stop()()
    assert any(f.endswith(".xplane.pb") for f in files)
    perfetto = next(f for f in files if f.endswith("perfetto_trace.json.gz"))
    assert "zoo_step_1" in _gunzip(perfetto).decode()


def test_the_nodes_load_reports_say_while_its_profiler_runs():
    thread = EngineThread(NodeCore(build_trivial_engine(), "n0"), report_interval_s=0.01)
    thread.profiler = _profiler([], delay_iterations=1)
    runner = _run(thread)

    def next_report_state() -> str:
        while True:
            for msg in thread.outbox.get(timeout=10):
                if isinstance(msg, LoadReport):
                    return msg.profiling

    assert next_report_state() == ""
    thread.profile(ProfileControl(action="start"))
    while next_report_state() != "waiting":  # for its one step of delay
        pass
    thread.add("r1", [5, 6], SamplingParams(max_tokens=2))
    while next_report_state() != "recording":
        pass
    thread.profile(ProfileControl(action="stop"))
    while next_report_state() != "":
        pass
    thread.stop()
    runner.join(10)


def test_a_trace_that_ends_by_its_limit_is_written_off_the_engine_thread_and_reported_at_the_next_stop():
    log: list = []
    thread = EngineThread(NodeCore(build_trivial_engine(), "n0"), report_interval_s=60.0)
    thread.profiler = _profiler(log, max_iterations=2, run_later=thread.write_later)
    runner = _run(thread)
    thread.profile(ProfileControl(action="start"))
    assert _next_answer(thread).ok
    thread.add("r1", [5, 6, 7], SamplingParams(max_tokens=4))
    finished = False
    while not finished:  # r1's 4 steps: the limit ends the trace after its second
        finished = any(isinstance(m, TokenChunk) and m.finished for m in thread.outbox.get(timeout=10))
    thread.profile(ProfileControl(action="stop"))
    stop = _next_answer(thread)
    assert stop.ok and stop.trace_files == ["/t/node.trace.json.gz"]
    assert log.count("zoo_step_1") + log.count("zoo_step_2") == 2 and log.count("write") == 1
    assert thread.profiler.sessions[0].written_on.startswith("zoo-trace-write")
    thread.stop()
    runner.join(10)
