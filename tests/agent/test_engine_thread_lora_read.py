"""A LoRA adapter new to a node is read from disk off the engine thread (which keeps stepping the others);
the request reaches the engine once it is read, and an abort meanwhile drops it."""

from __future__ import annotations

import threading

from agent.engine_thread import EngineThread, _Abort, _Add
from agent.node_core import NodeCore
from backends.sim.engine import build_sim_engine
from engine.clock import ManualClock
from engine.lora import LoraConfig, LoraRequest
from engine.sampling_params import SamplingParams


def _thread_with_recorded_reads(gate: threading.Event | None = None):
    engine = build_sim_engine(
        "sim:llama-3-8b", "h100-sxm", realtime=False, clock=ManualClock(), lora_config=LoraConfig(max_loras=2)
    )
    thread = EngineThread(NodeCore(engine, "n0"), report_interval_s=1.0)
    store = engine.runner.lora_slots.store
    reads: list[str] = []
    read = store._read

    def recording_read(lora):
        reads.append(threading.current_thread().name)
        if gate is not None:
            gate.wait(10)
        return read(lora)

    store._read = recording_read
    return thread, reads


def test_the_adapter_is_read_off_the_engine_thread_then_the_request_is_queued():
    thread, reads = _thread_with_recorded_reads()
    lora = LoraRequest("sql", "sim://sql")
    thread.add("r1", [5] * 20, SamplingParams(max_tokens=2), lora=lora)
    cmd = thread.inbox.get(timeout=10)
    assert isinstance(cmd, _Add) and cmd.request_id == "r1"
    assert reads and reads[0].startswith("zoo-lora-read")
    out: list = []
    thread._apply(cmd, out)  # what the engine thread does with it: the adapter is not read again
    assert out == [] and len(reads) == 1
    assert thread.core.engine.get_lora("sql") is not None
    thread.add("r2", [6] * 20, SamplingParams(max_tokens=2), lora=lora)  # known now: queued at once
    assert thread.inbox.get(timeout=1).request_id == "r2" and len(reads) == 1
    thread._reader.shutdown(wait=True)


def test_a_request_aborted_while_its_adapter_is_read_never_reaches_the_engine():
    gate = threading.Event()
    thread, reads = _thread_with_recorded_reads(gate)
    thread.add("r1", [5] * 20, SamplingParams(max_tokens=2), lora=LoraRequest("sql", "sim://sql"))
    thread.abort(["r1"])
    gate.set()
    thread._reader.shutdown(wait=True)
    queued = []
    while not thread.inbox.empty():
        queued.append(thread.inbox.get())
    assert [type(c) for c in queued] == [_Abort]
    assert len(reads) == 1
