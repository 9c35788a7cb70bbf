"""NodeAgent: one GPU host's daemon. It joins the control plane, runs the engine thread, streams tokens.

    control plane ROUTER ◄──► DEALER (routing id = node id), owned by the agent's Link
          │ Welcome/GenerateRequest/CancelRequest/Heartbeat echo
          ▼
    handlers ──► engine inbox (queue.SimpleQueue) ──► engine thread: add / abort / step / load report
                                                             │
    pump task ◄── engine outbox (queue.SimpleQueue) ◄────────┘  TokenChunks, ErrorReplies, LoadReports
          └──► Link outbox ──► control plane

The engine thread owns the NodeCore and its LLMEngine (nothing else touches them) and touches only the two thread-safe
queues; it never sees a socket. Session (hello → Welcome → heartbeats): a hello unanswered within
``hello_timeout_s`` is sent again; a control plane silent for ``control_timeout_s`` (or one that answers
"unknown node") gets a fresh hello, and the requests in flight are aborted first: the control plane
that routed them has resumed or failed them already (or is a new process that never knew them).

Drain (``drain()``: `zoo agent` calls it at SIGTERM)::

    NodeDrain ──► control plane: no new requests here ──► requests finish (a LoadReport shows the engine
    empty) ──► outbox flushed ──► drain() returns; the caller stops the agent: NodeLeave, and whatever is
    still here at ``drain_timeout_s`` resumes on other nodes (the control plane's failover)

A NodeDrain from the control plane (`zoo drain NODE`) marks the agent draining without stopping it, and one with
``resume`` (`zoo drain --resume NODE`) undoes that; a draining agent says so again after every Welcome (a restarted
control plane learns it), and whether it is leaving (SIGTERM: a drain that cannot be undone).
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import time
from pathlib import Path

import anyio
import msgspec
import zmq.asyncio

from agent.agent_config import AgentConfig
from agent.chunk_batches import wire_messages
from agent.engine_thread import EngineThread, ExportedForMigration
from agent.hardware_probe import describe_hardware
from agent.kv_data_plane import DataPlaneConfig, KVDataPlane, KVTransferError, accept_spec_for
from agent.kv_events import KVEventPublisher
from agent.kv_remote_io import AgentRemoteKV, RemoteDropAsk, RemoteFetchAsk, RemoteOut, remote_capable
from agent.kv_remote_store import RemoteKVStore
from agent.kv_remote_swap import RemoteSwapper
from agent.node_core import EngineObservation, NodeCore
from agent.node_profiler import node_profiler
from agent.request_age import request_age_s
from agent.serving_digest import serving_digest
from agent.verifier_pairing import VerifierPairing
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine
from engine.lora import LoraRequest
from engine.spec.vocab_id import vocab_id
from transport.actor import Actor, MailboxFull
from transport.codec import clip
from transport.dispatch import Dispatcher, Incoming
from transport.kv_transfer import ReceivedKV
from transport.link import Link
from transport.messages import (
    CancelRequest,
    ErrorCode,
    ErrorReply,
    GenerateRequest,
    HardwareInfo,
    Heartbeat,
    LoadReport,
    MigrateRequest,
    MigrationDone,
    NodeDrain,
    NodeHello,
    NodeLeave,
    NodeTelemetry,
    Ping,
    Pong,
    ProfileControl,
    ResetPrefixCache,
    SleepControl,
    SpecPair,
    Welcome,
)
from transport.sockets import Channel, Received, connect_dealer

__all__ = ["AgentConfig", "NodeAgent", "default_node_id", "served_model_name"]

log = logging.getLogger(__name__)


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


class NodeAgent(Actor):
    """Start with ``await tg.start(agent.run)`` (reports the agent once its socket is connecting).

    engine: an LLMEngine already built (tests give one with a fake runner), or an EngineConfig to build
        in a worker thread at start-up (the checkpoint path names the served model).
    hardware: what NodeHello says about the device; None: ``describe_hardware`` (profile / CUDA / measured).
    exporter: an observe/ exporter (``describe_node(hello, rejected)``, ``observe(EngineObservation)``,
        ``observe_hop(seconds)``, ``url``) fed from the event loop; None: no metrics beyond LoadReports.
    tracer: the node's request spans (observe/node_spans.py: ``describe_node``, ``on_generate``, ``on_cancel``,
        ``observe``), fed from the event loop; None: no spans.
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
        drafter=None,
        tracer=None,
    ) -> None:
        super().__init__()
        self.control_endpoint = control_endpoint
        self.exporter = exporter
        self.tracer = tracer
        self.drafter = drafter  # agent/draft_server.py DraftServer this node runs for verifiers elsewhere, or None
        self.pairing: VerifierPairing | None = None  # this node as a verifier paired with a fleet drafter
        self._hops_ns: list[int] = []  # router → node hops since the last NodeTelemetry
        self._telemetry_welcome = 0  # num_welcomes when the last NodeTelemetry was sent
        self._digest: str | None = None  # the hello's config_digest, once worked out
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
        self.chunk_batches = (
            False  # send a pass's chunks as one TokenChunks (the Welcome says the control plane reads it)
        )
        self.heartbeat_interval_s = config.heartbeat_interval_s
        self._last_control_s = time.monotonic()
        self._rehello = anyio.Event()
        self.draining = False  # no new requests are routed here (SIGTERM, or `zoo drain`)
        self.leaving = False  # draining to stop (SIGTERM: drain()): a resume is refused
        self._drained = anyio.Event()  # draining, and a LoadReport showed the engine empty
        self._link: Link | None = None
        self._thread: EngineThread | None = None
        self.data_plane: KVDataPlane | None = None
        self.kv_events: KVEventPublisher | None = None  # the KV cache events' PUB socket (agent/kv_events.py)
        self.peers: dict[str, str] = {}  # peer node id → its data endpoint (from the latest Welcome)
        self.received_kv: dict[str, ReceivedKV] = {}  # request id → KV a peer sent for it, not yet taken
        self.remote_swap: RemoteSwapper | None = None  # the remote KV tier (with the data plane)
        self._send_migrations, self._migrations = anyio.create_memory_object_stream[ExportedForMigration](256)
        self._dispatcher = Dispatcher(
            {
                Welcome: self.handle_welcome,
                GenerateRequest: self.handle_generate,
                CancelRequest: self.handle_cancel,
                Heartbeat: self.handle_heartbeat,
                Ping: self.handle_ping,
                ErrorReply: self.handle_error_reply,
                NodeDrain: self.handle_node_drain,
                ResetPrefixCache: self.handle_reset_prefix_cache,
                ProfileControl: lambda i: self._thread.profile(
                    msgspec.structs.replace(i.msg, node_id=self.config.node_id)
                ),
                SleepControl: lambda i: self._thread.sleep_control(i.msg),
                MigrateRequest: self.handle_migrate,
                SpecPair: self.handle_spec_pair,
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
            from backends.builder import build_engine

            self.engine = await anyio.to_thread.run_sync(lambda: build_engine(self._engine_or_config, progress=False))
        if self.hardware is None:
            device = self._engine_or_config.device if isinstance(self._engine_or_config, EngineConfig) else "cpu"
            self.hardware = await anyio.to_thread.run_sync(describe_hardware, device, self.config.gpu_profile)
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sock = connect_dealer(
            self._ctx, self.control_endpoint, routing_id=self.config.node_id.encode(), curve=self.config.curve
        )
        self._link = Link(Channel(sock), self._on_receive, name=f"agent {self.config.node_id}")
        observe = self.exporter is not None or self.tracer is not None  # both read the engine's observations
        core = NodeCore(
            self.engine, self.config.node_id, observe=observe, memory_bandwidth_gbps=self.hardware.memory_bandwidth_gbps
        )
        if self.config.kv_events is not None and self.config.kv_events.enabled:  # before the profile: it caches too
            self.engine.enable_kv_events()
            self.kv_events = KVEventPublisher(self.config.kv_events, self.engine.scheduler.kv_cache_manager.block_size)
            log.info("agent %s: KV cache events on %s", self.config.node_id, self.kv_events.endpoint)
        if self.config.profile_at_start and not self.engine.has_unfinished_requests():
            rates = await anyio.to_thread.run_sync(core.profile)
            log.info("agent %s: measured %.0f prefill tok/s, %.2f ms decode step", self.config.node_id, *rates)
        if self.config.step_budget_tpot_slo_s is not None and core.profile_prompt_tokens:
            budget = core.size_step_budget(self.config.step_budget_tpot_slo_s)
            log.info("agent %s: step token budget %s", self.config.node_id, budget.describe())
        elif self.config.step_budget_tpot_slo_s is not None:
            log.warning("agent %s: no start-up profile; step token budget kept", self.config.node_id)
        self._thread = EngineThread(core, self.config.report_interval_s)
        self._thread.kv_events = self.kv_events
        self._thread.profiler = node_profiler(self.config.profiler, self.config.node_id, self._thread.write_later)
        self.pairing = VerifierPairing(self._thread, self.engine.tokenizer.vocab_size, self.config.pair_draft_timeout_s)
        self.vocab_id = vocab_id(self.engine.tokenizer)  # engine/spec/vocab_id.py: what drafters must share
        if self.drafter is not None:
            log.info("agent %s: drafting for others at %s", self.config.node_id, await self.drafter.setup())
        if self.config.data_endpoint is not None:
            self._setup_data_plane()
        if self.tracer is not None:
            self.tracer.describe_node(self._hello())
        if self.exporter is not None:
            self.exporter.describe_node(self._hello(), self._dispatcher.rejected)
            if self.data_plane is not None:
                self.exporter.describe_kv_plane(self.data_plane.receiver.refused)
            if self.kv_events is not None:
                self.exporter.describe_kv_events(self.kv_events)
        return self

    def loops(self):
        loops = (self._link.read_loop, self._link.write_loop, self._engine_thread, self._pump, self._session)
        loops += (self.pairing.run,) if self.drafter is None else (self.pairing.run, self.drafter.serve)
        if self.data_plane is None:
            return loops
        return (*loops, self.data_plane.run, self._migration_loop, self.remote_swap.run)

    async def cleanup(self) -> None:
        if self._thread is not None:
            self._thread.stop()
            self._thread.outbox.put(None)  # releases the pump's abandoned worker thread
        if self._link is not None:
            try:  # best effort: tell the control plane now rather than at heartbeat expiry
                self._link.channel.send(NodeLeave(node_id=self.config.node_id, reason="shutdown"))
            except Exception:
                log.debug("agent %s: NodeLeave not sent", self.config.node_id, exc_info=True)
            # the one close that lingers: long enough for the NodeLeave to leave
            self._link.close(linger_ms=int(1e3 * self.config.leave_timeout_s))
        if self._thread is not None:
            await anyio.to_thread.run_sync(self._thread.done.wait, self.config.leave_timeout_s)
        if self.kv_events is not None:
            await anyio.to_thread.run_sync(self.kv_events.close)
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()

    async def _engine_thread(self) -> None:
        await anyio.to_thread.run_sync(self._thread.run, abandon_on_cancel=True)
        raise RuntimeError(f"agent {self.config.node_id}: the engine thread ended")

    async def _pump(self) -> None:
        """Engine outbox → Link outbox (a worker thread waits on the queue so the event loop never blocks)."""
        outbox = self._thread.outbox
        while True:
            batch = await anyio.to_thread.run_sync(outbox.get, abandon_on_cancel=True)
            while True:
                if isinstance(batch, BaseException):
                    raise RuntimeError(f"agent {self.config.node_id}: the engine failed") from batch
                if batch is None:
                    return
                for msg in wire_messages(batch, self.chunk_batches):  # a pass's chunks as one message
                    if isinstance(msg, EngineObservation):
                        if self.exporter is not None:
                            self.exporter.observe(msg)
                        if self.tracer is not None:
                            self.tracer.observe(msg)
                        continue
                    if isinstance(msg, ExportedForMigration):
                        await self._send_migrations.send(msg)
                        continue
                    if isinstance(msg, RemoteOut | RemoteFetchAsk | RemoteDropAsk):
                        self.remote_swap.submit(msg)
                        continue
                    if isinstance(msg, LoadReport):
                        if self.remote_swap is not None:
                            msg.kv_store_free_bytes = self.remote_swap.store.free_bytes
                            msg.kv_remote_moves = dict(self.remote_swap.counts)
                        if self.exporter is not None and self.engine is not None:
                            self.exporter.observe_lora(self.engine.scheduler_config.max_loras, msg)
                        if self.draining and msg.num_running + msg.num_waiting + msg.num_swapped == 0:
                            self._drained.set()  # every chunk before this report is in the link's outbox
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

    async def drain(self, reason: str = "draining") -> bool:
        """Stop taking requests and let those here finish: NodeDrain to the control plane, then wait until a
        LoadReport shows the engine empty and the outbox is flushed (True), or ``drain_timeout_s`` passes,
        or the control plane falls silent (False). The caller then stops the agent (NodeLeave): requests
        still here resume on other nodes."""
        if self._link is None:
            return False  # not started
        self.draining = self.leaving = True
        self._send(NodeDrain(node_id=self.config.node_id, reason=reason, leaving=True))
        with anyio.move_on_after(self.config.drain_timeout_s):
            while not self._drained.is_set():
                if time.monotonic() - self._last_control_s > self.config.control_timeout_s:
                    return False  # nobody is waiting for these requests any more
                with anyio.move_on_after(self.heartbeat_interval_s):
                    await self._drained.wait()
            while len(self._link.outbox):  # the writer sends each batch without awaiting: empty = sent
                await anyio.sleep(0.005)
            return True
        return False

    def _hello(self) -> NodeHello:
        hello = self._thread.core.hello(
            model=self.model_name,
            backend=self.config.backend,
            hardware=self.hardware,
            cell=self.config.cell,
            pid=os.getpid(),
        )
        if self.data_plane is not None:
            hello = msgspec.structs.replace(hello, data_endpoint=self.data_plane.endpoint)
        if self.config.role != "both":
            hello = msgspec.structs.replace(hello, role=self.config.role)
        hello.host, hello.rack = self.config.host_id, self.config.rack
        hello.config_digest = self._config_digest(hello)
        hello.vocab_id = self.vocab_id
        if self.drafter is not None:
            hello.draft_models = list(self.drafter.draft_models)
            hello.draft_endpoint, hello.draft_vocab_id = self.drafter.endpoint, self.drafter.vocab_id
            hello.draft_step_ms = self.drafter.draft_step_ms
        return hello

    def _config_digest(self, hello: NodeHello) -> str:
        """The node's serving digest (agent/serving_digest.py), worked out at its first hello."""
        if self._digest is None:
            engine = self._engine_or_config if isinstance(self._engine_or_config, EngineConfig) else None
            self._digest = serving_digest(
                model=hello.model, backend=hello.backend, hardware=hello.hardware, kernels=hello.kernels, engine=engine
            )
        return self._digest

    def _telemetry(self) -> NodeTelemetry | None:
        """Hops since the last one; also once after every Welcome (a new control plane learns the metrics URL)."""
        if not self._hops_ns and self._telemetry_welcome == self.num_welcomes:
            return None
        hops, self._hops_ns = self._hops_ns, []
        self._telemetry_welcome = self.num_welcomes
        url = self.exporter.url if self.exporter is not None else ""
        return NodeTelemetry(node_id=self.config.node_id, router_to_node_hop_ns=hops, metrics_url=url)

    def health(self) -> dict:
        """Readiness, for the agent's ``/health`` (observe/agent_http.py; any thread: reads attributes only).
        "ok" once a control plane has welcomed this node and it takes requests; "starting" before (model
        loading, joining), "draining" after SIGTERM / `zoo drain`, "disconnected" when the control plane
        has been silent for ``control_timeout_s`` (the agent is joining again)."""
        if self.draining:
            status = "draining"
        elif not self.welcomed.is_set():
            status = "starting" if self.num_welcomes == 0 else "disconnected"
        elif time.monotonic() - self._last_control_s > self.config.control_timeout_s:
            status = "disconnected"
        else:
            status = "ok"
        return {"status": status, "node_id": self.config.node_id, "model": self.model_name}

    def _abort_all(self) -> None:
        """Drop every request in flight (their control plane is gone or has failed them)."""
        self._thread.abort_all()

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
        self._thread.set_report_interval(msg.report_interval_s)
        self.num_welcomes += 1
        self.peers = dict(msg.peers)
        self._thread.send_kv_events(msg.kv_events, msg.kv_snapshot)  # the router indexes them, or its cache once
        self.chunk_batches = msg.token_chunk_batches  # the control plane reads TokenChunks (agent/chunk_batches.py)
        self.welcomed.set()
        if self.draining:  # a control plane that (re)admitted us must not route here
            self._send(NodeDrain(node_id=self.config.node_id, reason="draining", leaving=self.leaving))

    def handle_spec_pair(self, incoming: Incoming) -> None:
        """The control plane pairs this node with a drafter, or unpairs it (agent/verifier_pairing.py)."""
        self.pairing.handle(incoming.msg)

    def handle_node_drain(self, incoming: Incoming) -> None:
        """The control plane drains this node (`zoo drain`): it routes nothing new here; the agent keeps running.
        With ``resume`` (`zoo drain --resume`) it takes new requests again, unless it is leaving (then it says so
        again: the control plane must not route here)."""
        msg: NodeDrain = incoming.msg
        if msg.resume and self.leaving:
            self._send(NodeDrain(node_id=self.config.node_id, reason="shutting down", leaving=True))
        elif msg.resume:
            if self.draining:
                log.info("agent %s: resumed by the control plane (%s)", self.config.node_id, clip(msg.reason))
            self.draining = False
            self._drained = anyio.Event()  # an empty engine seen while drained says nothing of a later drain
        else:
            if not self.draining:
                log.info("agent %s: drained by the control plane (%s)", self.config.node_id, clip(msg.reason))
            self.draining = True

    def handle_reset_prefix_cache(self, incoming: Incoming) -> None:
        """POST /reset_prefix_cache reached this node: the engine thread forgets its prefix cache and answers."""
        msg: ResetPrefixCache = incoming.msg
        self._thread.reset_prefix_cache(msgspec.structs.replace(msg, node_id=self.config.node_id))

    def handle_generate(self, incoming: Incoming) -> None:
        msg: GenerateRequest = incoming.msg
        hop_ns = incoming.recv_ns - msg.sent_ns
        self._hops_ns.append(hop_ns)
        if self.exporter is not None:
            self.exporter.observe_hop(hop_ns / 1e9)
        if self._thread.num_inflight + 1 > self.config.max_inflight_requests:
            self._send(
                ErrorReply(
                    request_id=msg.request_id, code=ErrorCode.OVERLOADED, message="node queue full", retry_after_s=1.0
                )
            )
            return
        lora = None
        if msg.lora_name is not None:
            try:
                lora = LoraRequest(msg.lora_name, msg.lora_path or "")
            except ValueError as e:
                self._send(ErrorReply(request_id=msg.request_id, code=ErrorCode.INVALID_REQUEST, message=str(e)))
                return
        if self.tracer is not None:
            self.tracer.on_generate(msg, incoming.recv_ns)
        kv = self.received_kv.pop(msg.request_id, None)  # a migrated request: its KV came ahead of it
        facts = {"priority": msg.priority, "slo_tpot_s": msg.slo_tpot_s, "num_resumed_tokens": msg.num_resumed_tokens}
        if kv is not None:
            self._thread.add_with_kv(msg.request_id, msg.prompt_token_ids, msg.sampling, kv, lora=lora, **facts)
            return
        age_s = request_age_s(msg.arrival_ns, msg.sent_ns, incoming.recv_ns, time.monotonic_ns())
        self._thread.add(msg.request_id, msg.prompt_token_ids, msg.sampling, age_s, lora=lora, **facts)  # validated

    def handle_cancel(self, incoming: Incoming) -> None:
        self._thread.abort([incoming.msg.request_id])
        if self.tracer is not None:
            self.tracer.on_cancel(incoming.msg.request_id)

    def handle_heartbeat(self, incoming: Incoming) -> None:
        """The control plane's echo: it is alive (``_last_control_s`` was refreshed on receipt), and who the live
        data peers are, with their KV stores' room (the remote KV tier)."""
        if self.remote_swap is not None:
            self.remote_swap.update_peers(incoming.msg.peers, incoming.msg.peer_kv_free_bytes)

    def handle_ping(self, incoming: Incoming) -> None:
        msg: Ping = incoming.msg
        self._send(Pong(request_id=msg.request_id, payload=msg.payload, ping_sent_ns=msg.sent_ns))

    def handle_error_reply(self, incoming: Incoming) -> None:
        msg: ErrorReply = incoming.msg
        if not msg.request_id and self.welcomed.is_set():  # about the node itself: the control plane forgot us
            log.info("agent %s: control plane says %s: %s; joining again", self.config.node_id, msg.code, msg.message)
            self._rehello.set()

    # -- the KV data plane ------------------------------------------------------------------------------

    MAX_HELD_KV = 64  # received transfers held for their requests; the oldest is dropped past it

    def _setup_data_plane(self) -> None:
        spec = accept_spec_for(self.engine)
        if spec is None:
            log.warning("agent %s: this engine's runner has no KV geometry; no data plane", self.config.node_id)
            return
        observe = self.exporter.observe_kv_transfer if self.exporter is not None else None
        self.data_plane = KVDataPlane(
            self.config.node_id,
            spec,
            self._on_received_kv,
            DataPlaneConfig(endpoint=self.config.data_endpoint, transfer_timeout_s=self.config.kv_transfer_timeout_s),
            context=self._ctx,
            on_transfer=observe,
            on_command=lambda sender, cmd: self.remote_swap.handle_command(sender, cmd),
            admit=lambda sender, chunk, nbytes: self.remote_swap.admit(sender, chunk, nbytes),
        )
        store = RemoteKVStore(self.config.kv_store_bytes, self.config.kv_store_owner_timeout_s)
        self.remote_swap = RemoteSwapper(
            self.config.node_id, self.data_plane, self._thread.report_remote, store, self.config.kv_transfer_timeout_s
        )
        if self.engine.cache_config.remote_swap != "off" and remote_capable(self.engine):
            self.engine.set_remote_kv(AgentRemoteKV(self.engine))  # before the engine thread starts
        self.data_plane.bind()
        log.info("agent %s: KV data plane at %s", self.config.node_id, self.data_plane.endpoint)

    def _on_received_kv(self, kv: ReceivedKV) -> None:
        if kv.purpose:  # the remote KV tier's "store" / "return"
            self.remote_swap.on_received(kv)
            return
        self.received_kv[kv.request_id] = kv
        while len(self.received_kv) > self.MAX_HELD_KV:
            del self.received_kv[next(iter(self.received_kv))]

    # -- live migration (the source's side; the target's is handle_generate with received_kv) -----------

    def handle_migrate(self, incoming: Incoming) -> None:
        """Move a request to a peer: the engine thread takes it off (with its KV), ``_migration_loop`` ships the KV
        and answers MigrationDone. Without a data plane the request stays here (``left=False``)."""
        msg: MigrateRequest = incoming.msg
        if self.data_plane is None:
            self._send(self._migration_done(msg, ok=False, left=False, message="this node has no KV data plane"))
            return
        self._thread.export(msg)

    async def _migration_loop(self) -> None:
        async for item in self._migrations:
            msg, exported = item.migrate, item.exported
            if exported is None:
                self._send(self._migration_done(msg, ok=False, left=False, message="request not running here"))
                continue
            done = self._migration_done(msg, ok=True, num_tokens=len(exported.state.token_ids))
            if exported.kv is not None:
                s = exported.state
                try:
                    done.transfer_s = await self.data_plane.send(
                        msg.target_data_endpoint,
                        s.req_id,
                        s.block_ids,
                        exported.layout,
                        exported.kv_bytes(),
                        peer_name=msg.target_node_id,
                        lora_id=s.lora_id or 0,
                    )
                    done.kv_bytes = exported.kv_nbytes
                except KVTransferError as e:
                    done.ok, done.message = False, clip(str(e))
                    log.warning("agent %s: migrating %s failed: %s", self.config.node_id, s.req_id, done.message)
            self._send(done)

    def _migration_done(self, msg: MigrateRequest, *, ok: bool, left: bool = True, **fields) -> MigrationDone:
        return MigrationDone(
            request_id=msg.request_id,
            node_id=self.config.node_id,
            target_node_id=msg.target_node_id,
            ok=ok,
            reason=msg.reason,
            left=left,
            **fields,
        )
