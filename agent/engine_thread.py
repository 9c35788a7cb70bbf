"""EngineThread: the agent's worker thread that drives its NodeCore. No sockets, no event loop.

    agent (event loop) ──► inbox: add / abort / abort_all / set_report_interval / stop
                                     │
                           engine thread: apply commands ─► core.step() ─► TokenChunks
                                     │   every report_interval_s: LoadReport (+ EngineObservation)
    agent pump ◄── outbox: [TokenChunk | ErrorReply | LoadReport | EngineObservation, ...] per pass
                           (an exception instance when the engine failed: the thread has ended)

Both queues are thread-safe ``queue.SimpleQueue``s; the thread owns the NodeCore (nothing else touches
it). ``num_inflight`` is written only here and read by the event loop for admission (an int: atomic).
The fleet simulator drives the same NodeCore on a virtual clock (sim/des.py).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import queue
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import msgspec

from agent.drafter_switch import DrafterSwitch
from agent.kv_events import KVEventPublisher
from agent.kv_remote_io import RemoteReport
from agent.node_core import NodeCore
from agent.node_profiler import NodeProfiler, ProfilerError
from agent.node_sleep import NodeSleep
from engine.kv.block_pool import Tier
from engine.lora import LoraRequest
from engine.sampling_params import SamplingParams
from transport.kv_transfer import ReceivedKV
from transport.messages import (
    KV_CLEARED,
    KV_STORED,
    ErrorCode,
    ErrorReply,
    KvEvents,
    MigrateRequest,
    ProfileControl,
    ResetPrefixCache,
    SleepControl,
    kv_events_to_wire,
)

log = logging.getLogger(__name__)

KV_SNAPSHOT_CHUNK = 100_000  # block hashes per KvEvents of a snapshot (~1 MB of msgpack)
ENGINE_THREAD_NAME = "zoo-engine"  # how `zoo probe` (observe/ebpf/sched_probe.py) finds the thread
_PR_SET_NAME = 15


@dataclass(slots=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams
    age_s: float = 0.0  # how old the request was when queued here (since its arrival at the gateway)
    queued_s: float = 0.0  # time.monotonic() when queued here
    priority: int = 0
    lora: LoraRequest | None = None
    slo_tpot_s: float = 0.0  # its TPOT target (0: none): NodeCore.add
    num_resumed_tokens: int = 0  # its prompt's last tokens that are its output before a resume: NodeCore.add


@dataclass(slots=True)
class _Abort:
    request_ids: list[str]


class _AbortAll:
    pass


@dataclass(slots=True)
class _ResetPrefixCache:
    msg: ResetPrefixCache  # answered with its request id, this node's id, what the engine dropped


@dataclass(slots=True)
class _Profile:
    msg: ProfileControl  # answered with its request id, this node's id, what the profiler did


@dataclass(slots=True)
class _Sleep:
    msg: SleepControl  # a sleep or a wake_up (agent/node_sleep.py), answered with what the node did


@dataclass(slots=True)
class _SendKvEvents:
    on: bool
    snapshot: bool = False  # off: still the whole cache, once


@dataclass(slots=True)
class _SetReportInterval:
    interval_s: float


class _Stop:
    pass


@dataclass(slots=True)
class _Export:
    migrate: MigrateRequest


@dataclass(slots=True)
class _AddWithKV:
    add: _Add
    kv: ReceivedKV


@dataclass(slots=True)
class _SetDrafter:
    proposer: object | None  # a RemoteProposer, paired and checked; None: back to the node's own speculator
    spec: object | None  # its SpecDecodeConfig
    drafter_node_id: str


@dataclass(slots=True)
class ExportedForMigration:
    """Outbox item: a request taken off this engine for ``migrate`` (exported None: it was not here), queued
    after every chunk it produced here."""

    migrate: MigrateRequest
    exported: object | None  # agent/kv_migration.py ExportedRequest


def set_thread_name(name: str = ENGINE_THREAD_NAME) -> None:
    """Name the calling OS thread (≤ 15 bytes, shown in /proc/<pid>/task/<tid>/comm); Linux only, best effort."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.prctl(_PR_SET_NAME, ctypes.c_char_p(name.encode()[:15]), 0, 0, 0)


class EngineThread:
    """Runs ``core`` in a worker thread (``run``). Touches only the core and the two queues.

    inbox: _Add / _Abort / _AbortAll / _SetReportInterval / _Stop (put there by the command methods).
    outbox: lists of wire messages (TokenChunk / ErrorReply / LoadReport, and EngineObservations when
        the core observes) to send, in order; an exception instance when the engine failed.
    """

    def __init__(self, core: NodeCore, report_interval_s: float) -> None:
        self.core = core
        self.report_interval_s = report_interval_s
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.done = threading.Event()
        # LoRA adapters new to this node (or dropped from its host RAM) are read from disk here, not on the
        # engine thread (which keeps stepping the others); the request is queued once its adapter is read
        self._reader: ThreadPoolExecutor | None = None
        self._reading: set[str] = set()  # request ids waiting for their adapter's read
        self._cancelled: set[str] = set()  # of those, aborted meanwhile
        self._reading_lock = threading.Lock()
        self._pairing = DrafterSwitch()  # the fleet pair's proposer (agent/drafter_switch.py)
        self.kv_events: KVEventPublisher | None = None  # set: each pass's KV cache events published (kv_events.py)
        self._send_kv_events = False  # each pass's KV cache events to the control plane too (KvEvents)
        self.profiler: NodeProfiler | None = None  # set: --profiler-config (agent/node_profiler.py); None: off
        self._trace_writer: ThreadPoolExecutor | None = None  # writes the profiler's traces off this thread
        self.sleep = NodeSleep(core)  # vLLM's sleep mode (agent/node_sleep.py)

    @property
    def num_inflight(self) -> int:
        """Requests accepted and not finished (read by the event loop for admission)."""
        return self.core.num_inflight

    # -- commands (any thread; applied by the thread in order, before its next step) ------------------

    def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        age_s: float = 0.0,
        *,
        priority: int = 0,
        lora: LoraRequest | None = None,
        slo_tpot_s: float = 0.0,
        num_resumed_tokens: int = 0,
    ) -> None:
        """Queue a request that arrived ``age_s`` ago (``slo_tpot_s``, ``num_resumed_tokens``: NodeCore.add's); the
        time it then waits (its adapter's read, the inbox) is added when the thread applies it, so the engine's
        clocks start at the request's arrival."""
        cmd = _Add(
            request_id, prompt_token_ids, params, age_s, time.monotonic(), priority, lora, slo_tpot_s,
            num_resumed_tokens=num_resumed_tokens,
        )  # fmt: skip
        self._queue_after_read(cmd, cmd)

    def _queue_after_read(self, cmd: _Add | _AddWithKV, add: _Add) -> None:
        """Queue ``cmd`` for the engine thread, once ``add``'s adapter is in host RAM: read here, off the engine
        thread, when it is new to this node or was dropped from RAM (so no step waits for a disk read)."""
        store = _lora_store(self.core) if add.lora is not None else None
        if store is None or not store.needs_read(add.lora.lora_id):
            self.inbox.put(cmd)
            return
        with self._reading_lock:
            self._reading.add(add.request_id)
            if self._reader is None:
                self._reader = ThreadPoolExecutor(1, thread_name_prefix="zoo-lora-read")
        try:
            self._reader.submit(self._read_then_queue, store, cmd, add)
        except RuntimeError:  # the thread has stopped (its reader with it): the engine thread reads, if ever
            with self._reading_lock:
                self._reading.discard(add.request_id)
            self.inbox.put(cmd)

    def _read_then_queue(self, store, cmd: _Add | _AddWithKV, add: _Add) -> None:
        try:
            store.prefetch(add.lora)
        except Exception as e:  # queued anyway: the engine thread reads it again and refuses it with a reply
            log.info("LoRA adapter %s could not be read ahead: %s", add.lora.name, e)
        with self._reading_lock:
            self._reading.discard(add.request_id)
            if add.request_id in self._cancelled:
                self._cancelled.discard(add.request_id)
                return
        self.inbox.put(cmd)

    def abort(self, request_ids: list[str]) -> None:
        with self._reading_lock:
            self._cancelled.update(r for r in request_ids if r in self._reading)
        self.inbox.put(_Abort(request_ids))

    def abort_all(self) -> None:
        with self._reading_lock:
            self._cancelled.update(self._reading)
        self.inbox.put(_AbortAll())

    def send_kv_events(self, on: bool, snapshot: bool = False) -> None:
        """The control plane's Welcome says whether it indexes the node's KV cache events (``Welcome.kv_events``):
        on, from the next pass a KvEvents in the outbox with each pass's events, the first one the whole cache then
        (a clear, then every cached block); off, none (the engine stops logging them unless they are published),
        but with ``snapshot`` (``Welcome.kv_snapshot``) the whole cache once."""
        self.inbox.put(_SendKvEvents(on, snapshot))

    def reset_prefix_cache(self, msg: ResetPrefixCache) -> None:
        """Forget the engine's prefix cache between two steps; the answer (a ResetPrefixCache) goes in the outbox."""
        self.inbox.put(_ResetPrefixCache(msg))

    def profile(self, msg: ProfileControl) -> None:
        """Start or stop this node's profiler between two steps; the answer (a ProfileControl) goes in the outbox."""
        self.inbox.put(_Profile(msg))

    def sleep_control(self, msg: SleepControl) -> None:
        """Sleep or wake this node between two steps; the answer (a SleepControl) goes in the outbox (a "wait" sleep's
        once the node's requests are done)."""
        self.inbox.put(_Sleep(msg))

    def export(self, migrate: MigrateRequest) -> None:
        """Take ``migrate.request_id`` off the engine with its KV (an ExportedForMigration in the outbox)."""
        self.inbox.put(_Export(migrate))

    def add_with_kv(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        kv: ReceivedKV,
        *,
        priority: int = 0,
        lora: LoraRequest | None = None,
        slo_tpot_s: float = 0.0,
        num_resumed_tokens: int = 0,
    ) -> None:
        """``add``, after putting ``kv`` (a peer's transfer of the prompt's first blocks) into the prefix cache, keyed
        under the request's salt and adapter (``lora``: read ahead as ``add`` reads it)."""
        add = _Add(
            request_id, prompt_token_ids, params, priority=priority, lora=lora, slo_tpot_s=slo_tpot_s,
            num_resumed_tokens=num_resumed_tokens,
        )  # fmt: skip
        self._queue_after_read(_AddWithKV(add, kv), add)

    def report_remote(self, report: RemoteReport) -> None:
        """How a remote KV move ended (agent/kv_remote_swap.py → the engine's mover, agent/kv_remote_io.py)."""
        self.inbox.put(report)

    def set_drafter(self, proposer, spec, drafter_node_id: str) -> None:
        """Draft with ``proposer`` (a fleet pair's RemoteProposer, ``spec`` its SpecDecodeConfig) from the next
        step on, or with None go back to the node's own speculator (or plain decode). The thread owns the
        proposer from here on (it closes it when replaced)."""
        self.inbox.put(_SetDrafter(proposer, spec, drafter_node_id))

    def set_report_interval(self, interval_s: float) -> None:
        self.inbox.put(_SetReportInterval(interval_s))

    def stop(self) -> None:
        """The thread returns at its next pass (``done`` is set then)."""
        self.inbox.put(_Stop())

    # -- the engine thread -------------------------------------------------------------------------

    def run(self) -> None:
        set_thread_name()
        try:
            self._run()
        except BaseException as e:
            log.exception("engine thread failed")
            self.outbox.put(e)
        finally:
            self._stop_profiler()
            if self._reader is not None:
                self._reader.shutdown(wait=False, cancel_futures=True)
            self.done.set()

    def _stop_profiler(self) -> None:
        """The node stops while its profiler runs: its trace is written, not lost (nor any being written)."""
        if self.profiler is not None and self.profiler.state != "off":
            try:
                log.info("profiler stopped as the node stops: %s", ", ".join(self.profiler.stop()()))
            except ProfilerError as e:
                log.warning("%s", e)
        if self._trace_writer is not None:
            self._trace_writer.shutdown(wait=True)

    def write_later(self, fn) -> Future:
        """Run ``fn`` on the trace writer thread (a trace's export and op table took 1.3 s for 25 steps of SmolLM2
        here: on this thread, a stall of every request of the node)."""
        if self._trace_writer is None:
            self._trace_writer = ThreadPoolExecutor(1, thread_name_prefix="zoo-trace-write")
        return self._trace_writer.submit(fn)

    def _run(self) -> None:
        core = self.core
        next_report_s = time.monotonic()
        while True:
            idle = not core.has_work()
            timeout_s = max(0.0, next_report_s - time.monotonic()) if idle else 0.0
            commands = []
            try:
                commands.append(self.inbox.get(timeout=timeout_s) if idle else self.inbox.get_nowait())
                while True:
                    commands.append(self.inbox.get_nowait())
            except queue.Empty:
                pass
            out: list = []
            for cmd in commands:
                if isinstance(cmd, _Stop):
                    return
                self._apply(cmd, out)
            mover = core.engine.remote_kv
            if mover is not None and commands:
                core.engine.flush_remote_drops()  # aborts' remote KV: the holders may forget it now
            if core.has_work():
                busy_s = core.engine.busy_time_s
                if self.profiler is None:
                    outputs = core.step()
                else:  # each step a range in the trace while it records; the delay and the limit count steps
                    with self.profiler.step_range():
                        outputs = core.step()
                    self.profiler.after_step()
                if core.observe:
                    out.append(core.observation(outputs, core.engine.busy_time_s - busy_s))
                out.extend(core.token_chunk(o) for o in outputs)
            if self.sleep.waiting is not None:  # a "wait" sleep, once the node's requests are done
                out.extend(self.sleep.after_pass())
            if mover is not None:  # the remote KV tier's asks (agent/kv_remote_io.py), after the step that made them
                out.extend(mover.take_asks())
            if self.kv_events is not None or self._send_kv_events:  # this pass's changes to the prefix cache
                events = core.engine.take_kv_events()  # (its step, a reset, an import)
                if events and self.kv_events is not None:
                    self.kv_events.publish(events)
                if events and self._send_kv_events:
                    out.append(KvEvents(node_id=core.node_id, events=kv_events_to_wire(events)))
            if time.monotonic() >= next_report_s:
                if core.observe:
                    out.append(core.stats_observation())
                report = self._pairing.report(core.load_report(), core.engine)
                if self.profiler is not None and self.profiler.state != "off":  # seen in zoo top and /metrics
                    report = msgspec.structs.replace(report, profiling=self.profiler.state)
                if self.sleep.level:
                    report = msgspec.structs.replace(report, sleep_level=self.sleep.level, sleep_idle=self.sleep.idle)
                out.append(report)
                next_report_s = time.monotonic() + self.report_interval_s
            if out:
                self.outbox.put(out)

    def _start_kv_events(self, out: list) -> None:
        """KvEvents from now on, the first one the whole cache (what is logged so far is in it, so only published)."""
        engine = self.core.engine
        engine.enable_kv_events()
        pending = engine.take_kv_events()
        if pending and self.kv_events is not None:
            self.kv_events.publish(pending)
        self._send_kv_events = True
        self._kv_snapshot(out)

    def _kv_snapshot(self, out: list) -> None:
        """The whole device cache as KvEvents: a clear, then every cached block, in chunks."""
        engine = self.core.engine
        cached = [h.hash_value for h in engine.scheduler.kv_cache_manager.pool(Tier.DEVICE).cached_blocks()]
        node_id = self.core.node_id
        out.append(KvEvents(node_id=node_id, events=[(KV_CLEARED, [])]))
        for i in range(0, len(cached), KV_SNAPSHOT_CHUNK):  # each message well under the payload cap
            out.append(KvEvents(node_id=node_id, events=[(KV_STORED, cached[i : i + KV_SNAPSHOT_CHUNK])]))

    def _apply(self, cmd, out: list) -> None:
        add = cmd.add if isinstance(cmd, _AddWithKV) else cmd
        if isinstance(add, _Add) and (refusal := self.sleep.refusal(add.request_id)) is not None:
            out.append(refusal)  # asleep (or about to be): the control plane resumes it on another node
        elif isinstance(cmd, _Add):
            try:
                age_s = cmd.age_s + (time.monotonic() - cmd.queued_s if cmd.queued_s else 0.0)
                self.core.add(
                    cmd.request_id,
                    cmd.prompt_token_ids,
                    cmd.params,
                    age_s,
                    priority=cmd.priority,
                    lora=cmd.lora,
                    slo_tpot_s=cmd.slo_tpot_s,
                    num_resumed_tokens=cmd.num_resumed_tokens,
                )
            except ValueError as e:  # PromptError, duplicate id, an adapter this node cannot serve
                out.append(ErrorReply(request_id=cmd.request_id, code=ErrorCode.INVALID_REQUEST, message=str(e)))
        elif isinstance(cmd, _Abort):
            self.core.abort(cmd.request_ids)
        elif isinstance(cmd, _AbortAll):
            self.core.abort_all()
        elif isinstance(cmd, _ResetPrefixCache):
            num_blocks = self.core.engine.reset_prefix_cache()  # None: blocks in use (vLLM's rule)
            if num_blocks is not None:
                log.info("prefix cache reset: %d cached blocks dropped", num_blocks)
            answer = {"ok": num_blocks is not None, "num_blocks": num_blocks or 0}
            out.append(msgspec.structs.replace(cmd.msg, **answer))
        elif isinstance(cmd, _Profile):
            answer = self._profile(cmd.msg)
            if answer is not None:  # None: a stop, answered by the writer thread once its trace is written
                out.append(answer)
        elif isinstance(cmd, _Sleep):
            out.extend(self.sleep.ask(cmd.msg))
        elif isinstance(cmd, _SetDrafter):
            self._pairing.switch(self.core.engine, cmd.proposer, cmd.spec, cmd.drafter_node_id)
        elif isinstance(cmd, _SendKvEvents) and cmd.on:
            self._start_kv_events(out)
        elif isinstance(cmd, _SendKvEvents):
            if self._send_kv_events:
                self._send_kv_events = False
                if self.kv_events is None:
                    self.core.engine.disable_kv_events()  # nobody takes them any more
            if cmd.snapshot:
                self._kv_snapshot(out)
        elif isinstance(cmd, _SetReportInterval):
            self.report_interval_s = cmd.interval_s
        elif isinstance(cmd, _Export):
            from agent.kv_migration import export_for_migration

            exported = export_for_migration(self.core.engine, cmd.migrate.request_id)
            self.core.abort([cmd.migrate.request_id])  # the core's bookkeeping (the engine has let it go)
            out.append(ExportedForMigration(cmd.migrate, exported))
        elif isinstance(cmd, RemoteReport):
            self.core.engine.remote_kv.apply(cmd)
        elif isinstance(cmd, _AddWithKV):
            from agent.kv_migration import import_migrated_kv

            try:
                add = cmd.add  # the blocks keyed as the request's own (engine/prefix_key.py): its salt, its adapter
                lora_id = None if add.lora is None else add.lora.lora_id
                tokens, salt = add.prompt_token_ids, add.params.cache_salt
                num_blocks = import_migrated_kv(self.core.engine, tokens, cmd.kv, salt, lora_id)
                log.info("request %s: %d KV blocks taken from a peer", cmd.add.request_id, num_blocks)
            except Exception:  # a transfer we cannot place: the request recomputes its prompt
                log.exception("request %s: the peer's KV could not be imported", cmd.add.request_id)
            self._apply(cmd.add, out)

    def _profile(self, msg: ProfileControl) -> ProfileControl | None:
        """``msg`` answered: what this node's profiler did, or why not; a stop's answer goes in the outbox from the
        writer thread, after its trace is written (None here)."""
        if self.profiler is None:
            detail = "profiling is off on this node: start its agent with --profiler-config"
            return msgspec.structs.replace(msg, ok=False, detail=detail)
        try:
            if msg.action == "start":
                return msgspec.structs.replace(msg, ok=True, detail=self.profiler.start())
            if msg.action == "stop":
                self.write_later(functools.partial(self._answer_stop, msg, self.profiler.stop()))
                return None
        except ProfilerError as e:
            return msgspec.structs.replace(msg, ok=False, detail=str(e))
        return msgspec.structs.replace(msg, ok=False, detail=f"unknown action {msg.action[:64]!r}: start or stop")

    def _answer_stop(self, msg: ProfileControl, written) -> None:
        """On the writer thread: the stop's trace written, its answer to the outbox."""
        try:
            files = written()
        except ProfilerError as e:
            self.outbox.put([msgspec.structs.replace(msg, ok=False, detail=str(e))])
            return
        detail = f"{self.profiler.config.profiler} profiler stopped, {len(files)} files written"
        self.outbox.put([msgspec.structs.replace(msg, ok=True, detail=detail, trace_files=files)])


def _lora_store(core: NodeCore):
    """The runner's LoRA store (backends/lora_store.py), or None when it serves no adapters."""
    return getattr(getattr(core.engine.runner, "lora_slots", None), "store", None)
