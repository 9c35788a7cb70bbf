"""A LoRA adapter new to a node (or dropped from its host RAM) is read from disk off the engine thread (which
keeps stepping the others); the request reaches the engine once it is read, and an abort meanwhile drops it;
an adapter whose files are gone refuses its own request, not the node."""

from __future__ import annotations

import threading

from agent.engine_thread import EngineThread, _Abort, _Add
from agent.node_core import NodeCore
from backends.checkpoint.peft_adapter import AdapterError
from backends.sim.engine import build_sim_engine
from engine.clock import ManualClock
from engine.lora import LoraConfig, LoraRequest
from engine.sampling_params import SamplingParams
from transport.messages import ErrorReply


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


def _thread_with_one_adapter_in_host_ram():
    """Two adapters registered on a node that keeps one in host RAM: "a" is dropped (read again when next
    used). Returns (thread, store, reads: (adapter name, thread name) of every read from disk)."""
    engine = build_sim_engine(
        "sim:llama-3-8b", "h100-sxm", realtime=False, clock=ManualClock(),
        lora_config=LoraConfig(max_loras=1, max_cpu_loras=1),
    )  # fmt: skip
    thread = EngineThread(NodeCore(engine, "n0"), report_interval_s=1.0)
    store = engine.runner.lora_slots.store
    reads: list[tuple[str, str]] = []
    read = store._read

    def recording_read(lora):
        reads.append((lora.name, threading.current_thread().name))
        if lora.name in gone:
            raise AdapterError(f"LoRA adapter {lora.path!r} is not a directory")
        return read(lora)

    gone: set[str] = set()
    store._read = recording_read
    for name in ("a", "b"):
        engine.add_lora(LoraRequest(name, f"sim://{name}"))
    assert store.needs_read(LoraRequest("a", "sim://a").lora_id) and len(reads) == 2
    return thread, store, reads, gone


def test_an_adapter_dropped_from_host_ram_is_read_again_off_the_engine_thread():
    thread, store, reads, _ = _thread_with_one_adapter_in_host_ram()
    thread.add("r1", [5] * 20, SamplingParams(max_tokens=2), lora=LoraRequest("a", "sim://a"))
    cmd = thread.inbox.get(timeout=10)
    assert reads[2][0] == "a" and reads[2][1].startswith("zoo-lora-read")
    out: list = []
    thread._apply(cmd, out)
    engine = thread.core.engine
    engine.run_until_done()  # the step that loads "a" into its slot reads nothing from disk
    assert out == [] and len(reads) == 3
    assert store.resident_lora_ids() == [LoraRequest("a", "sim://a").lora_id]
    thread._reader.shutdown(wait=True)


def test_an_adapter_whose_files_are_gone_refuses_its_request_and_the_node_keeps_serving():
    thread, _, reads, gone = _thread_with_one_adapter_in_host_ram()
    gone.add("a")
    thread.add("r1", [5] * 20, SamplingParams(max_tokens=2), lora=LoraRequest("a", "sim://a"))
    out: list = []
    thread._apply(thread.inbox.get(timeout=10), out)  # read ahead failed; the engine thread's read too
    assert [type(m) for m in out] == [ErrorReply] and "is not a directory" in out[0].message
    assert [name for name, _ in reads] == ["a", "b", "a", "a"]
    engine = thread.core.engine
    assert not engine.has_unfinished_requests()
    thread.add("r2", [6] * 20, SamplingParams(max_tokens=2), lora=LoraRequest("b", "sim://b"))
    thread._apply(thread.inbox.get(timeout=10), out)
    final = engine.run_until_done()
    assert final["r2"].num_output_tokens == 2 and len(out) == 1
    if thread._reader is not None:
        thread._reader.shutdown(wait=True)
