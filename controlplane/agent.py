"""NodeAgent: one GPU host's daemon. It joins the control plane, runs the engine loop, streams tokens.

    control plane ROUTER ◄──► DEALER (routing id = node id), owned by the agent's Link
          │ Welcome/GenerateRequest/CancelRequest/Heartbeat echo
          ▼
    handlers ──► engine inbox (queue.SimpleQueue) ──► engine thread: add / abort / step / load report
                                                             │
    pump task ◄── engine outbox (queue.SimpleQueue) ◄────────┘  TokenChunks, ErrorReplies, LoadReports
          └──► Link outbox ──► control plane

The engine thread owns the LLMEngine (nothing else touches it) and touches only the two thread-safe
queues; it never sees a socket. Session (hello → Welcome → heartbeats): a hello unanswered within
``hello_timeout_s`` is sent again; a control plane silent for ``control_timeout_s`` (or one that answers
"unknown node") gets a fresh hello, and the requests in flight are aborted first: the control plane
that routed them has failed them already (or is a new process that never knew them).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import anyio
import zmq.asyncio

from controlplane.actors.link import Link
from controlplane.actors.runtime import Actor, MailboxFull
from controlplane.engine.config import EngineConfig
from controlplane.engine.llm_engine import LLMEngine, RequestOutput
from controlplane.engine.sampling_params import SamplingParams, SamplingParamsError
from controlplane.engine.scheduler_stats import SchedulerEvent, SchedulerEventKind, SchedulerStats
from transport.dispatch import Dispatcher, Incoming
from transport.messages import (
    CancelRequest,
    ErrorCode,
    ErrorReply,
    GenerateRequest,
    HardwareInfo,
    Heartbeat,
    KVInfo,
    LoadReport,
    NodeHello,
    NodeLeave,
    NodeTelemetry,
    Ping,
    Pong,
    Sampling,
    TokenChunk,
    Welcome,
)
from transport.sockets import Channel, Received, connect_dealer

log = logging.getLogger(__name__)

MAX_RECENT_STEPS = 64  # step times carried by one LoadReport


def served_model_name(model_path: str | os.PathLike | None) -> str:
    """The name a checkpoint is served under: its file or directory name without quantization suffixes
    (``SmolLM2-135M-Instruct.Q4_1.gguf`` → ``SmolLM2-135M-Instruct``); None is the embedded default."""
    if model_path is None:
        from backends.checkpoint.locate import DEFAULT_MODEL_FILENAME

        model_path = DEFAULT_MODEL_FILENAME
    name = Path(model_path).name
    return name.split(".")[0] if name.endswith(".gguf") else name


def default_node_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}"


@dataclass(slots=True)
class AgentConfig:
    """One agent.

    node_id: unique in the fleet; also the DEALER's routing id (≤ 255 bytes).
    model_name: served model name (None: derived from the engine's checkpoint path).
    gpu_profile: describe the hardware from this profile of controlplane/hardware.py instead of probing.
    hello_timeout_s: a NodeHello without a Welcome within this is sent again.
    control_timeout_s: no message from the control plane for this long → re-hello (it restarted or is gone).
    heartbeat_interval_s / report_interval_s: used until the Welcome says otherwise.
    max_inflight_requests: requests accepted but not finished; past it a GenerateRequest is refused (OVERLOADED).
    leave_timeout_s: how long a clean shutdown waits for the NodeLeave to be sent.
    """

    node_id: str
    model_name: str | None = None
    backend: str = "torch"
    cell: str = "default"
    gpu_profile: str | None = None
    hello_timeout_s: float = 2.0
    control_timeout_s: float = 6.0
    heartbeat_interval_s: float = 1.0
    report_interval_s: float = 0.25
    max_inflight_requests: int = 4096
    leave_timeout_s: float = 1.0

    def __post_init__(self) -> None:
        if not self.node_id or len(self.node_id.encode()) > 255:
            raise ValueError(f"node_id must be 1..255 bytes, got {self.node_id!r}")
        for name in ("hello_timeout_s", "control_timeout_s", "heartbeat_interval_s", "report_interval_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_inflight_requests < 1:
            raise ValueError(f"max_inflight_requests must be >= 1, got {self.max_inflight_requests}")


def sampling_params_from_wire(s: Sampling) -> SamplingParams:
    """Raises SamplingParamsError naming the bad field."""
    return SamplingParams(
        temperature=s.temperature,
        top_p=s.top_p,
        top_k=s.top_k,
        seed=s.seed,
        max_tokens=s.max_tokens,
        stop=tuple(s.stop),
        stop_token_ids=tuple(s.stop_token_ids),
        ignore_eos=s.ignore_eos,
        logprobs=s.logprobs,
    )


# --------------------------------------------------------------------------- the engine thread


@dataclass(slots=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


@dataclass(slots=True)
class _Abort:
    request_ids: list[str]


class _AbortAll:
    pass


@dataclass(slots=True)
class _SetReportInterval:
    interval_s: float


class _Stop:
    pass


@dataclass(slots=True)
class FinishedRequest:
    """One request the engine finished (engine clock, seconds; None: the request never got that far)."""

    queue_time_s: float | None
    ttft_s: float | None
    e2e_s: float | None
    num_prompt_tokens: int
    num_output_tokens: int
    finish_reason: str | None


@dataclass(slots=True)
class EngineObservation:
    """What one engine step (or report tick) showed, for the agent's exporter (``observe=True`` only).

    Rides in the engine outbox ahead of the step's TokenChunks, so a client that saw a request finish
    can scrape metrics that already include it.

    stats: the scheduler's snapshot after the step.
    inter_token_s: one entry per output token after a request's first (gap since its previous token).
    finished: requests that ended in this step.
    swaps: ("out" | "in", num_blocks, step_time_s) per swap the step carried; the runner does not time its
        swaps separately, so step_time_s (the whole step) bounds the swap's latency from above.
    """

    stats: SchedulerStats
    inter_token_s: list[float]
    finished: list[FinishedRequest]
    swaps: list[tuple[str, int, float]]


class EngineLoop:
    """The engine's busy loop, run in a worker thread. Touches only the engine and the two queues.

    inbox: _Add / _Abort / _AbortAll / _SetReportInterval / _Stop.
    outbox: lists of wire messages (TokenChunk / ErrorReply / LoadReport) to send, in order; an
        exception instance when the engine failed (the loop has ended).
    """

    def __init__(self, engine: LLMEngine, node_id: str, report_interval_s: float, observe: bool = False) -> None:
        self.engine = engine
        self.observe = observe  # also put EngineObservations in the outbox
        self.node_id = node_id
        self.report_interval_s = report_interval_s
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.done = threading.Event()
        self.num_inflight = 0  # read by the event loop for admission; written only here (int: atomic)
        self._prompt_lens: dict[str, int] = {}  # in-flight request → prompt tokens, until its first token
        self._decoding: set[str] = set()
        self._num_finished_total = 0
        self._prefill_tok_per_s = 0.0
        self._decode_step_ms = 0.0
        self._last_token_s: dict[str, float] = {}  # in-flight request → engine time of its latest token

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:
            log.exception("engine loop failed")
            self.outbox.put(e)
        finally:
            self.done.set()

    def _run(self) -> None:
        next_report_s = time.monotonic()
        while True:
            idle = not self.engine.has_unfinished_requests()
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
            if self.engine.has_unfinished_requests():
                busy_s = self.engine.busy_time_s
                outputs = self.engine.step()
                if self.observe:
                    out.append(self._observation(outputs, self.engine.busy_time_s - busy_s))
                for o in outputs:
                    out.append(self._chunk(o))
            if time.monotonic() >= next_report_s:
                if self.observe:
                    out.append(EngineObservation(self.engine.make_stats(), [], [], []))
                out.append(self._load_report())
                next_report_s = time.monotonic() + self.report_interval_s
            if out:
                self.outbox.put(out)

    def _apply(self, cmd, out: list) -> None:
        if isinstance(cmd, _Add):
            try:
                self.engine.add_request(cmd.prompt_token_ids, cmd.params, req_id=cmd.request_id)
            except ValueError as e:  # PromptError, SamplingParamsError, duplicate id
                out.append(ErrorReply(request_id=cmd.request_id, code=ErrorCode.INVALID_REQUEST, message=str(e)))
                return
            self.num_inflight += 1
            self._prompt_lens[cmd.request_id] = len(cmd.prompt_token_ids)
        elif isinstance(cmd, _Abort):
            ids = [r for r in cmd.request_ids if r in self._prompt_lens or r in self._decoding]
            self.engine.abort(ids)
            for r in ids:
                self._forget(r)
        elif isinstance(cmd, _AbortAll):
            self._apply(_Abort([*self._prompt_lens, *self._decoding]), out)
        elif isinstance(cmd, _SetReportInterval):
            self.report_interval_s = cmd.interval_s

    def _forget(self, request_id: str) -> None:
        self._last_token_s.pop(request_id, None)
        self._prompt_lens.pop(request_id, None)
        self._decoding.discard(request_id)
        self.num_inflight -= 1

    def _chunk(self, o: RequestOutput) -> TokenChunk:
        if o.new_token_ids and o.req_id in self._prompt_lens:
            del self._prompt_lens[o.req_id]
            self._decoding.add(o.req_id)
        if o.finished:
            self._forget(o.req_id)
            self._num_finished_total += 1
        return TokenChunk(
            request_id=o.req_id,
            token_ids=o.new_token_ids,
            text=o.new_text,
            finished=o.finished,
            finish_reason=o.finish_reason.value if o.finish_reason is not None else None,
            stop_reason=o.stop_reason,
            num_prompt_tokens=o.num_prompt_tokens,
            num_output_tokens=o.num_output_tokens,
            node_id=self.node_id,
            logprobs=[(lp.token_id, lp.logprob, list(lp.top)) for lp in o.new_logprobs] if o.new_logprobs else None,
        )

    def _observation(self, outputs: list[RequestOutput], step_time_s: float) -> EngineObservation:
        now_s = self.engine.clock.now()
        inter_token_s: list[float] = []
        finished: list[FinishedRequest] = []
        for o in outputs:
            if o.new_token_ids:
                previous_s = self._last_token_s.get(o.req_id)
                if previous_s is not None:
                    inter_token_s += [(now_s - previous_s) / len(o.new_token_ids)] * len(o.new_token_ids)
                elif len(o.new_token_ids) > 1:
                    inter_token_s += [0.0] * (len(o.new_token_ids) - 1)
                self._last_token_s[o.req_id] = now_s
            if o.finished:
                self._last_token_s.pop(o.req_id, None)
                m = o.metrics
                finished.append(
                    FinishedRequest(
                        queue_time_s=m.queue_time_s if m else None,
                        ttft_s=m.ttft_s if m else None,
                        e2e_s=m.e2e_s if m else None,
                        num_prompt_tokens=o.num_prompt_tokens,
                        num_output_tokens=o.num_output_tokens,
                        finish_reason=o.finish_reason.value if o.finish_reason is not None else None,
                    )
                )
        events: list[SchedulerEvent] = self.engine.scheduler.take_events()
        swaps = [
            ("out" if e.kind is SchedulerEventKind.SWAPPED_OUT else "in", int(e.details["num_blocks"]), step_time_s)
            for e in events
            if e.kind in (SchedulerEventKind.SWAPPED_OUT, SchedulerEventKind.SWAPPED_IN)
        ]
        return EngineObservation(self.engine.make_stats(), inter_token_s, finished, swaps)

    def _load_report(self) -> LoadReport:
        records = self.engine.take_step_records()
        prefill = [r for r in records if r.num_prefill_tokens > 0]
        prefill_time_s = sum(r.step_time_s for r in prefill)
        if prefill_time_s > 0:
            self._prefill_tok_per_s = sum(r.num_prefill_tokens for r in prefill) / prefill_time_s
        decode = [r for r in records if r.num_prefill_tokens == 0 and r.num_decode_requests > 0]
        if decode:
            self._decode_step_ms = 1e3 * sum(r.step_time_s for r in decode) / len(decode)
        stats = self.engine.make_stats()
        return LoadReport(
            node_id=self.node_id,
            num_running=stats.num_running,
            num_waiting=stats.num_waiting,
            num_swapped=stats.num_swapped,
            kv_usage=stats.kv_usage,
            num_free_device_blocks=stats.num_free_device_blocks,
            queued_prefill_tokens=sum(self._prompt_lens.values()),
            decode_batch_size=len(self._decoding),
            recent_step_ms=[1e3 * r.step_time_s for r in records[-MAX_RECENT_STEPS:]],
            prefill_tok_per_s=self._prefill_tok_per_s,
            decode_step_ms=self._decode_step_ms,
            num_preemptions_total=stats.num_preemptions_total,
            num_requests_finished_total=self._num_finished_total,
            prefix_cache_hit_rate=stats.prefix_cache_hit_rate,
        )


# --------------------------------------------------------------------------- the agent actor


def describe_hardware(engine_device: str, gpu_profile: str | None) -> HardwareInfo:
    """--gpu-profile wins; else the CUDA table for a CUDA device; else measured on this CPU."""
    from controlplane import hardware

    if gpu_profile is not None:
        return hardware.gpu_profile(gpu_profile)
    if engine_device.startswith("cuda"):
        index = int(engine_device.split(":")[1]) if ":" in engine_device else 0
        return hardware.describe_cuda_device(index)
    import torch

    return hardware.measure_cpu(torch.get_num_threads())


class NodeAgent(Actor):
    """Start with ``await tg.start(agent.run)`` (reports the agent once its socket is connecting).

    engine: an LLMEngine already built (tests give one with a fake runner), or an EngineConfig to build
        in a worker thread at start-up (the checkpoint path names the served model).
    hardware: what NodeHello says about the device; None: ``describe_hardware`` (profile / CUDA / measured).
    exporter: an observe/ exporter (``describe_node(hello, rejected)``, ``observe(EngineObservation)``,
        ``observe_hop(seconds)``, ``url``) fed from the event loop; None: no metrics beyond LoadReports.
    """

    def __init__(
        self,
        control_endpoint: str,
        engine: LLMEngine | EngineConfig,
        config: AgentConfig,
        *,
        hardware: HardwareInfo | None = None,
        context: zmq.asyncio.Context | None = None,
        exporter=None,
    ) -> None:
        super().__init__()
        self.control_endpoint = control_endpoint
        self.exporter = exporter
        self._hops_ns: list[int] = []  # router → node hops since the last NodeTelemetry
        self._telemetry_welcome = 0  # num_welcomes when the last NodeTelemetry was sent
        self.config = config
        self._engine_or_config = engine
        self.hardware = hardware
        self._ctx = context
        self._own_ctx = context is None
        self.engine: LLMEngine | None = engine if isinstance(engine, LLMEngine) else None
        self.model_name = config.model_name or (
            served_model_name(engine.model) if isinstance(engine, EngineConfig) else "model"
        )
        self.welcomed = anyio.Event()  # set at every Welcome; replaced when a re-hello starts
        self.num_welcomes = 0
        self.heartbeat_interval_s = config.heartbeat_interval_s
        self._last_control_s = time.monotonic()
        self._rehello = anyio.Event()
        self._link: Link | None = None
        self._loop: EngineLoop | None = None
        self._dispatcher = Dispatcher(
            {
                Welcome: self.handle_welcome,
                GenerateRequest: self.handle_generate,
                CancelRequest: self.handle_cancel,
                Heartbeat: self.handle_heartbeat,
                Ping: self.handle_ping,
                ErrorReply: self.handle_error_reply,
            },
            reply=lambda _peer, reply: self._send(reply),
            name=f"agent {config.node_id}",
        )

    @property
    def rejected(self) -> dict:
        return self._dispatcher.rejected

    # -- life cycle -------------------------------------------------------------------------------

    async def setup(self) -> NodeAgent:
        if self.engine is None:
            from zoo.engine_builder import build_engine

            self.engine = await anyio.to_thread.run_sync(lambda: build_engine(self._engine_or_config, progress=False))
        if self.hardware is None:
            device = self._engine_or_config.device if isinstance(self._engine_or_config, EngineConfig) else "cpu"
            self.hardware = await anyio.to_thread.run_sync(describe_hardware, device, self.config.gpu_profile)
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sock = connect_dealer(self._ctx, self.control_endpoint, routing_id=self.config.node_id.encode())
        self._link = Link(Channel(sock), self._on_receive, name=f"agent {self.config.node_id}")
        observe = self.exporter is not None
        self._loop = EngineLoop(self.engine, self.config.node_id, self.config.report_interval_s, observe=observe)
        if observe:
            self.exporter.describe_node(self._hello(), self._dispatcher.rejected)
        return self

    def loops(self):
        return (self._link.read_loop, self._link.write_loop, self._engine_thread, self._pump, self._session)

    async def cleanup(self) -> None:
        if self._loop is not None:
            self._loop.inbox.put(_Stop())
            self._loop.outbox.put(None)  # releases the pump's abandoned worker thread
        if self._link is not None:
            try:  # best effort: tell the control plane now rather than at heartbeat expiry
                self._link.channel.send(NodeLeave(node_id=self.config.node_id, reason="shutdown"))
            except Exception:
                log.debug("agent %s: NodeLeave not sent", self.config.node_id, exc_info=True)
            # the one close that lingers: long enough for the NodeLeave to leave
            self._link.close(linger_ms=int(1e3 * self.config.leave_timeout_s))
        if self._loop is not None:
            await anyio.to_thread.run_sync(self._loop.done.wait, self.config.leave_timeout_s)
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()

    async def _engine_thread(self) -> None:
        await anyio.to_thread.run_sync(self._loop.run, abandon_on_cancel=True)
        raise RuntimeError(f"agent {self.config.node_id}: the engine loop ended")

    async def _pump(self) -> None:
        """Engine outbox → Link outbox (a worker thread waits on the queue so the event loop never blocks)."""
        outbox = self._loop.outbox
        while True:
            batch = await anyio.to_thread.run_sync(outbox.get, abandon_on_cancel=True)
            while True:
                if isinstance(batch, BaseException):
                    raise RuntimeError(f"agent {self.config.node_id}: the engine failed") from batch
                if batch is None:
                    return
                for msg in batch:
                    if isinstance(msg, EngineObservation):
                        self.exporter.observe(msg)
                        continue
                    if isinstance(msg, LoadReport):
                        if not self.welcomed.is_set():
                            continue  # not a member (yet): the report would be answered "unknown node"
                        telemetry = self._telemetry()
                        if telemetry is not None:
                            await self._link.send(telemetry)
                    await self._link.send(msg)
                try:
                    batch = outbox.get_nowait()
                except queue.Empty:
                    break

    async def _session(self) -> None:
        """hello until Welcome; then heartbeats; back to hello when the control plane is lost."""
        while True:
            self._rehello = anyio.Event()
            self.welcomed = anyio.Event()
            self._abort_all()
            while not self.welcomed.is_set():
                self._send(self._hello())
                with anyio.move_on_after(self.config.hello_timeout_s):
                    await self.welcomed.wait()
            while not self._rehello.is_set():
                if time.monotonic() - self._last_control_s > self.config.control_timeout_s:
                    log.warning("agent %s: control plane silent; joining again", self.config.node_id)
                    break
                self._send(Heartbeat(node_id=self.config.node_id))
                with anyio.move_on_after(self.heartbeat_interval_s):
                    await self._rehello.wait()

    def _hello(self) -> NodeHello:
        engine = self.engine
        cache = engine.cache_config
        return NodeHello(
            node_id=self.config.node_id,
            model=self.model_name,
            backend=self.config.backend,
            hardware=self.hardware,
            kv=KVInfo(
                num_device_blocks=cache.num_device_blocks,
                num_host_blocks=cache.num_host_blocks,
                block_size=cache.block_size,
                bytes_per_block=engine.runner.kv_bytes_per_block(cache.block_size),
            ),
            max_model_len=engine.scheduler_config.max_model_len,
            power_score=_power_score(self.hardware),
            cell=self.config.cell,
            pid=os.getpid(),
        )

    def _telemetry(self) -> NodeTelemetry | None:
        """Hops since the last one; also once after every Welcome (a new control plane learns the metrics URL)."""
        if not self._hops_ns and self._telemetry_welcome == self.num_welcomes:
            return None
        hops, self._hops_ns = self._hops_ns, []
        self._telemetry_welcome = self.num_welcomes
        url = self.exporter.url if self.exporter is not None else ""
        return NodeTelemetry(node_id=self.config.node_id, router_to_node_hop_ns=hops, metrics_url=url)

    def _abort_all(self) -> None:
        """Drop every request in flight (their control plane is gone or has failed them)."""
        self._loop.inbox.put(_AbortAll())

    # -- receiving ----------------------------------------------------------------------------------

    def _on_receive(self, batch: list[Received]) -> None:
        self._last_control_s = time.monotonic()
        for received in batch:
            self._dispatcher.dispatch(received)

    def _send(self, msg) -> None:
        try:
            self._link.send_nowait(msg)
        except MailboxFull:
            log.warning("agent %s: outbox full, dropped %s", self.config.node_id, type(msg).__name__)

    def handle_welcome(self, incoming: Incoming) -> None:
        msg: Welcome = incoming.msg
        self.heartbeat_interval_s = msg.heartbeat_interval_s
        self._loop.inbox.put(_SetReportInterval(msg.report_interval_s))
        self.num_welcomes += 1
        self.welcomed.set()

    def handle_generate(self, incoming: Incoming) -> None:
        msg: GenerateRequest = incoming.msg
        hop_ns = incoming.recv_ns - msg.sent_ns
        self._hops_ns.append(hop_ns)
        if self.exporter is not None:
            self.exporter.observe_hop(hop_ns / 1e9)
        if self._loop.num_inflight + 1 > self.config.max_inflight_requests:
            self._send(
                ErrorReply(
                    request_id=msg.request_id, code=ErrorCode.OVERLOADED, message="node queue full", retry_after_s=1.0
                )
            )
            return
        try:
            params = sampling_params_from_wire(msg.sampling)
        except SamplingParamsError as e:
            self._send(ErrorReply(request_id=msg.request_id, code=ErrorCode.INVALID_REQUEST, message=str(e)))
            return
        self._loop.inbox.put(_Add(msg.request_id, msg.prompt_token_ids, params))

    def handle_cancel(self, incoming: Incoming) -> None:
        self._loop.inbox.put(_Abort([incoming.msg.request_id]))

    def handle_heartbeat(self, incoming: Incoming) -> None:
        """The control plane's echo: it is alive (``_last_control_s`` was refreshed on receipt)."""

    def handle_ping(self, incoming: Incoming) -> None:
        msg: Ping = incoming.msg
        self._send(Pong(request_id=msg.request_id, payload=msg.payload, ping_sent_ns=msg.sent_ns))

    def handle_error_reply(self, incoming: Incoming) -> None:
        msg: ErrorReply = incoming.msg
        if not msg.request_id and self.welcomed.is_set():  # about the node itself: the control plane forgot us
            log.info("agent %s: control plane says %s: %s; joining again", self.config.node_id, msg.code, msg.message)
            self._rehello.set()


def _power_score(hw: HardwareInfo) -> float:
    from controlplane import hardware

    return float(hardware.power_score(hw))
