"""The ControlPlane actor: agents and clients in, routing decisions and token streams out.

    agents  DEALER ──► ROUTER agent_endpoint  (default tcp://127.0.0.1:5555) ──► agent Link ─┐
    clients DEALER ──► ROUTER client_endpoint (default tcp://127.0.0.1:5556) ──► client Link ─┤ handlers (sync):
    HTTP gateway (same process) ──► Frontend.generate() ──────────────────────────────────────┤ registry, policy,
                                                                                              │ admission, requests
    expiry loop (every heartbeat_timeout_s / 4) ──► registry.expire() ─► resume elsewhere ────┘

Agents and clients get separate ROUTER sockets: a client cannot speak the agent protocol (its NodeHello is rejected
as UNKNOWN_TYPE), each side has its own high-water marks, and agents' routing ids are their node ids (ROUTER_HANDOVER
lets a restarted agent take its id over).

The life of a request: resolve a model alias, tokenize (chat template for ``messages``), validate the sampling
parameters, check the prompt against the context of the live nodes, snapshot the registry, let the policy choose,
ask admission control, send a GenerateRequest to the node; every TokenChunk the node streams back goes to the
request's consumer (a ZeroMQ client identity, or an in-process ``generate`` iterator), until one ``finished``.
A client's CancelRequest, a closed iterator or a client that vanished sends a CancelRequest to the node. A node
that leaves, restarts or misses its heartbeats, or that a send cannot reach (it becomes suspect), has its requests
resumed on other nodes from the tokens already streamed (controlplane/request_path.py); one with nowhere to go
fails with NODE_FAILED. A draining node (NodeDrain: its agent got SIGTERM, or `zoo drain` asked for it) gets no
new requests; those it has finish there, or resume elsewhere when it leaves.

A client's Ping lists its requests in flight; the Pong names those this process does not know (and when it started):
a client of a control plane that restarted learns it at its next ping.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import anyio
import msgspec
import zmq.asyncio

from controlplane.capacity_plan import CapacityPlanner
from controlplane.client_requests import ClientRequests
from controlplane.client_sleeps import ClientSleeps
from controlplane.cold_start import ColdStart
from controlplane.control_plane_config import ControlPlaneConfig
from controlplane.fleet_ledger import FleetLedger
from controlplane.frontend import client_generates
from controlplane.idle_sleep import idle_sleep_of
from controlplane.lora_table import LoraTable
from controlplane.migrations import Migrations
from controlplane.node_asks import NODE_ANSWERS, NodeAsks
from controlplane.node_drains import NodeDrains
from controlplane.node_latency import LatencyKind, LatencySample, NodeLatency
from controlplane.node_sleeps import NodeSleeps
from controlplane.offload_tokenize import TokenizeWorkers, request_stream
from controlplane.prefix_reset import DEFAULT_RESET_TIMEOUT_S, reset_prefix_caches
from controlplane.probe_inbox import ProbeInbox
from controlplane.profiling import PROFILE_TIMEOUT_S, profile_nodes
from controlplane.request_path import RequestPath
from controlplane.router.policies import make_policy
from controlplane.spec_pairing import SpecPairing
from controlplane.tenants import TenantLimiter
from engine.clock import Clock, MonotonicClock
from engine.llm_engine import EngineTokenizer
from transport.actor import Actor, MailboxFull
from transport.codec import WHY_UNENCODABLE, clip
from transport.curve import ZapHandler
from transport.dispatch import Dispatcher, Incoming
from transport.link import Link, Outgoing
from transport.messages import (
    MAX_TOKEN_CHUNKS,
    CancelRequest,
    ClientGenerate,
    Envelope,
    ErrorCode,
    ErrorReply,
    GenerateRequest,
    Heartbeat,
    KvEvents,
    LoadReport,
    MigrationDone,
    NodeDrain,
    NodeHello,
    NodeLeave,
    NodeTelemetry,
    Ping,
    Pong,
    ProbeSnapshot,
    SleepControl,
    TokenChunk,
    TokenChunks,
    Welcome,
    kv_events_from_wire,
)
from transport.sockets import AGENT_MAX_MSG_BYTES, CLIENT_MAX_MSG_BYTES, Channel, Received, bind_router

__all__ = ["ControlPlane", "ControlPlaneConfig", "LatencyKind", "LatencySample", "NodeLatency"]

log = logging.getLogger(__name__)


class ControlPlane(Actor):
    """Start with ``await tg.start(cp.run)``; it reports itself once both sockets are bound (``cp.agent_endpoint`` /
    ``cp.client_endpoint`` then hold the real addresses). Implements Frontend.

    tokenizer: the served model's (``load_checkpoint(path).tokenizer``); the control plane tokenizes.
    registry / policy / admission: built from the config unless given (tests may inject them).
    lora_check(path): raises ValueError when a LoRA directory cannot be served (None: the nodes check it alone).
    """

    def __init__(
        self,
        config: ControlPlaneConfig,
        tokenizer: EngineTokenizer,
        *,
        clock: Clock | None = None,
        context: zmq.asyncio.Context | None = None,
        registry=None,
        policy=None,
        admission=None,
        lora_check=None,
    ) -> None:
        super().__init__()
        from controlplane.admission import AdmissionConfig, AdmissionControl
        from controlplane.registry import ClusterRegistry

        self.config = config
        self.tokenizer = tokenizer
        self.tokenize_workers = TokenizeWorkers(tokenizer)  # long prompts, HTTP's and clients' (offload_tokenize.py)
        self.clock = clock or MonotonicClock()
        self.registry = registry or ClusterRegistry(self.clock, config.heartbeat_timeout_s)
        self.policy = policy or make_policy(config.router.policy, config.router)
        self.admission = admission or AdmissionControl(config.admission or AdmissionConfig())
        self._ctx, self._own_ctx = context, context is None
        self.agent_endpoint, self.client_endpoint = config.agent_endpoint, config.client_endpoint
        self._agents: Link | None = None
        self.zap: ZapHandler | None = None  # with config.curve: admits agents and clients by public key
        self._clients: Link | None = None
        self.started_ns = time.monotonic_ns()  # told to clients in every Pong: a new value = a restart
        self.local_streams: set[str] = set()  # in-process (HTTP) requests whose stream is open
        self.fleet = FleetLedger(config.max_pending_events)
        self.loras = LoraTable(lora_check)
        for lora in config.lora_modules:
            self.loras.add(lora.name, lora.path, config.model_name, [*config.model_aliases])  # an alias is taken
        self.hellos, self.metrics_urls = self.fleet.hellos, self.fleet.metrics_urls  # the same dicts
        self.path = RequestPath(
            registry=self.registry, policy=self.policy, admission=self.admission, tokenizer=tokenizer,
            router=config.router, fleet=self.fleet, send_to_node=self._send_to_node, aliases=config.model_aliases,
            model_names=lambda: self.model_names, max_resumes=config.max_resumes,
            tenants=TenantLimiter(config.tenants, now_s=self.clock.now()), loras=self.loras,
        )  # fmt: skip
        self.requests, self.model_aliases = self.path.table, self.path.aliases  # aliases: controlplane/model_aliases.py
        self.counters, self.refused = self.path.counters, self.path.refused  # the same dicts: by outcome, by code
        self._changed = anyio.Event()
        self.probe = ProbeInbox(self.clock)
        self.kv_moves = Migrations(self.registry, self.path, self._send_to_node)  # live migration
        self.migrations = self.kv_moves.counts  # "reason:ok|failed|refused" → count (MigrationDone)
        self.drains = NodeDrains(self.registry, self._send_to_node, self.kv_moves.migrate_off)  # zoo drain [--resume]
        self.capacity = CapacityPlanner(config.capacity)  # nodes wanted per GPU type, for autoscalers
        self.cold_start = ColdStart(self.capacity, self.registry, self.path, self.wait_until)  # held for a first node
        self.spec_pairs = SpecPairing(self.registry, self.fleet.hellos, self._send_to_node, config.spec_pairs)
        self.node_asks = NodeAsks()  # the nodes' answers to /reset_prefix_cache, /start_profile, /stop_profile
        self.sleeps = NodeSleeps(
            self.registry, self.node_asks, self._send_to_node, self.path.resume, self.kv_moves.migrate_off
        )
        self.idle_sleep = idle_sleep_of(self) if config.sleep_idle_ttl_s else None  # vLLM's --sleep-idle-ttl
        reply = lambda msg, peer: self._clients.send_nowait(msg, peer)  # noqa: E731
        self.client_sleeps = ClientSleeps(self.sleeps, lambda: self.node_ids, reply, config.sleep_mode)  # zoo top's
        self.agent_dispatcher = Dispatcher(
            {
                NodeHello: self.handle_node_hello,
                Heartbeat: self.handle_heartbeat,
                LoadReport: self.handle_load_report,
                NodeLeave: self.handle_node_leave,
                NodeDrain: self.handle_node_drain,
                **dict.fromkeys(NODE_ANSWERS, self._node_answer),  # /reset_prefix_cache, /start_profile, /sleep...
                KvEvents: self.handle_kv_events,
                NodeTelemetry: self.handle_node_telemetry,
                TokenChunk: lambda incoming: self._relay_chunk(incoming.peer, incoming.msg, incoming.recv_ns),
                TokenChunks: self.handle_token_chunks,
                ErrorReply: self.handle_agent_error,
                Pong: lambda incoming: None,
                MigrationDone: self.handle_migration_done,
            },
            reply=self._reply_agent,
            name="control plane (agents)",
        )
        self.client_dispatcher = Dispatcher(
            {
                ClientGenerate: lambda incoming: self.client_requests.on_generate(incoming),
                CancelRequest: lambda incoming: self.client_requests.on_cancel(incoming),
                Ping: lambda incoming: self.client_requests.on_ping(incoming),
                NodeDrain: self.handle_client_drain,
                SleepControl: self.client_sleeps.on_ask,  # AsyncZooClient.sleep/wake (controlplane/client_sleeps.py)
                ProbeSnapshot: self.handle_probe_snapshot,
            },
            reply=self._reply_client,
            name="control plane (clients)",
            on_invalid=self._refuse_invalid,
        )

    # -- life cycle -------------------------------------------------------------------------------

    async def setup(self) -> ControlPlane:
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        curve = self.config.curve  # CURVE: the ZAP handler is bound before the sockets (transport/curve.py)
        self.zap = ZapHandler(self._ctx, curve.zap_policy()) if curve is not None else None
        agent_curve, client_curve = (None, None) if curve is None else (curve.agent_server, curve.client_server)
        sock, self.agent_endpoint = bind_router(
            self._ctx, self.config.agent_endpoint, handover=True, max_msg_bytes=AGENT_MAX_MSG_BYTES, curve=agent_curve
        )
        channel = Channel(sock, peers_bound_to_keys=curve is not None)  # with CURVE: node id = key name
        self._agents = Link(channel, self._on_agent_batch, self._on_agent_undeliverable, name="cp agents")
        if self.config.client_endpoint is not None:
            sock, self.client_endpoint = bind_router(self._ctx, self.config.client_endpoint, handover=False,
                                                     max_msg_bytes=CLIENT_MAX_MSG_BYTES, curve=client_curve)  # fmt:skip
            self._clients = Link(Channel(sock), self._on_client_batch, self._on_client_undeliverable, name="cp clients")
            self.client_requests = ClientRequests(  # a long prompt is tokenized off the loop (client_requests.py)
                workers=self.tokenize_workers, min_chars=self.config.offload_tokenize_chars,
                max_pending=self.config.offload_tokenize_max_pending, link=self._clients, submit=self.submit,
                cancel=self.cancel, count_refusal=self.path.count_refusal, table=self.requests, notify=self._notify,
                started_ns=self.started_ns, idle=self.idle_sleep, cold_start=self.cold_start,  # woken; held at zero
                model_names=lambda: self.model_names)  # fmt: skip
        return self

    def loops(self):
        loops = [self._agents.read_loop, self._agents.write_loop, self._expiry_loop]
        if self._clients is not None:
            loops += [self._clients.read_loop, self._clients.write_loop, self.client_requests.serve]
            loops.append(self.client_sleeps.serve)
        if self.zap is not None:
            loops.append(self.zap.serve)
        loops += [] if self.idle_sleep is None else [self.idle_sleep.run]
        return loops

    async def cleanup(self) -> None:
        self.shut_down_requests()
        for closable in (self._agents, self._clients, self.zap):
            if closable is not None:
                closable.close()
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()

    draining = property(lambda self: self.path.draining)  # shutting down (start_drain): no new request is taken
    node_ids = property(lambda self: [view.node_id for view in self.registry.views()])  # the registered nodes

    def start_drain(self) -> None:
        """Refuse new requests (503 over HTTP, an ErrorReply over ZeroMQ), /health "draining"; those in flight go on."""
        self.path.draining = True
        self._notify()  # a /v1/models waiting for a first node answers now

    async def reset_prefix_cache(self, timeout_s: float = DEFAULT_RESET_TIMEOUT_S) -> dict[str, dict | None]:
        """POST /reset_prefix_cache: each registered node's answer (controlplane/prefix_reset.py)."""
        return await reset_prefix_caches(self.node_asks, self.node_ids, self._send_to_node, self.policy, timeout_s)

    async def profile(self, action: str, node_ids: list[str], timeout_s: float = PROFILE_TIMEOUT_S) -> dict:
        """POST /start_profile, /stop_profile: each of ``node_ids``' answer (controlplane/profiling.py)."""
        return await profile_nodes(self.node_asks, action, node_ids, self._send_to_node, timeout_s)

    def shut_down_requests(self) -> None:
        """Fail every request in flight (the control plane stops): ZeroMQ clients' ErrorReplies are flushed at once,
        so none waits for its timeout; HTTP streams get theirs as SSE error events while the gateway runs."""
        self.requests.fail_all(ErrorCode.NODE_FAILED, "the control plane is shutting down")
        if self._clients is not None:
            self.client_requests.shut_down()  # those waiting for their tokens too
            self._clients.flush_now()  # a client that misses it learns from its pings instead

    async def _expiry_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.expiry_interval_s)
            for lost in self.registry.expire():
                log.warning("node %s missed its heartbeats (silent %.2f s): marked dead", lost.node_id, lost.silent_s)
                self._lost(lost)
            for request_id in self.requests.time_out_silent(time.monotonic_ns(), self.config.chunk_timeout_s):
                log.warning("request %s: no chunk for %g s: failed", request_id, self.config.chunk_timeout_s)
            self._notify()

    def _lost(self, lost) -> None:  # a node the registry removed (LostNode): its requests resume elsewhere, or fail
        self.policy.on_node_removed(lost.node_id)
        self.path.on_node_lost(lost)
        self.spec_pairs.on_node_lost(lost.node_id)
        self.sleeps.on_node_lost(lost.node_id)

    # -- observation ------------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, predicate, timeout_s: float) -> None:
        """Wait until ``predicate()`` holds, re-checked after every batch of messages and expiry pass."""
        with anyio.fail_after(timeout_s):
            while not predicate():
                await self._changed.wait()

    def node_view(self, node_id: str):  # while it may be routed to (None: unknown, or not up)
        return next((v for v in self.registry.snapshot().nodes if v.node_id == node_id), None)

    def stats(self) -> dict:  # a plain snapshot for the latency table, the dashboard and the exporters
        nodes = self.fleet.nodes(views := self.registry.views(), self.requests.latency)
        for node_id, row in nodes.items():  # "up" | "suspect" | "draining" | "leaving" (draining to stop) | "dead"
            row["state"] = "leaving" if self.registry.leaving(node_id) else str(self.registry.state(node_id) or "dead")
            row["sleep_level"] = self.sleeps.levels.get(node_id, 0)  # vLLM's sleep mode: 1, 2, -1 (about to)
        return {
            "policy": self.policy.name,
            "draining": self.draining,  # shutting down (zoo/controlplane_shutdown.py): new requests refused
            "router": self.path.router_settings,  # the SLO and the knobs set (request_path.py)
            "nodes": nodes,
            "requests": {**self.counters, "inflight": len(self.requests) + self.tokenize_workers.num_waiting},
            "tokenizing": self.tokenize_workers.summary(),  # long prompts waiting for tokens (offload_tokenize.py)
            "refused": {code.value: n for code, n in self.refused.items() if n},
            "rejected_messages": {
                "agents": {c.value: n for c, n in self.agent_dispatcher.rejected.items() if n},
                "clients": {c.value: n for c, n in self.client_dispatcher.rejected.items() if n},
            },
            "classes": self.path.classes.summary(),
            "tenants": {name: dataclasses.asdict(usage) for name, usage in self.path.tenants.usage().items()},
            "migrations": dict(self.migrations),  # "reason:outcome" → count
            "registry": dataclasses.asdict(self.registry.make_stats()),  # membership counts (RegistryStats)
            "spec_pairs": self.spec_pairs.summary(),
            "slo_forecast": self.path.forecast.summary(),  # controlplane/slo_forecast.py
            "idle_sleep": None if self.idle_sleep is None else self.idle_sleep.summary(),  # --sleep-idle-ttl
            "capacity": self.capacity.summary(
                self.clock.now(), views, nodes, self.path.router_settings["slo_ttft_s"], self.fleet.arrivals_by_pool()
            ),
        }

    def take_events(self) -> list[LatencySample]:  # latency samples since the last call (FleetLedger.take_events)
        return self.fleet.take_events()

    # -- Frontend ---------------------------------------------------------------------------------

    @property
    def model_names(self) -> list[str]:
        names, default = self.capacity.served_models(self.registry.model_names()), self.config.model_name
        return [default, *(name for name in names if name != default)] if default in names else names  # default first

    # -- LoRA adapters (controlplane/lora_table.py; the gateway's lora_routes.py) -------------------

    @property
    def allow_runtime_lora_updating(self) -> bool:
        return self.config.allow_runtime_lora_updating

    def lora_models(self) -> list[tuple[str, str, str]]:
        return self.loras.models(self.model_names[0] if self.model_names else (self.config.model_name or ""))

    def load_lora_adapter(self, name: str, path: str) -> None:  # LoraTableError (400): name taken, files refused
        self.loras.add(name, path, self.config.model_name, [*self.model_names, *self.model_aliases])
        log.info("LoRA adapter %s loaded from %s", name, path)

    def unload_lora_adapter(self, name: str) -> None:  # LoraTableError (404): unknown; running requests finish
        self.loras.remove(name)
        log.info("LoRA adapter %s unloaded", name)

    def health(self) -> dict:
        num_nodes = len(self.registry)
        return {
            "status": "draining" if self.draining else "ok" if num_nodes else "degraded",
            "nodes": num_nodes,
            "models": self.model_names,
            "inflight": len(self.requests) + self.tokenize_workers.num_waiting,  # with those waiting for tokens
            "policy": self.policy.name,
        }

    @property
    def request_spans(self):
        """The requests' OpenTelemetry spans (request_spans.py; None: not traced), the gateway's batches' too."""
        return self.path.spans

    def rate_limit_status(self, tenant: str):
        """Frontend.rate_limit_status: the tenant's buckets now (TenantLimiter.status)."""
        return self.path.tenants.status(tenant, self.clock.now())

    def generate(
        self, request_id: str, *, model: str | None, arrival_ns: int | None = None, **fields: Any
    ) -> AsyncIterator[TokenChunk]:
        """Frontend.generate (controlplane/frontend.py names the keywords: ``fields`` are client_generates')."""
        msgs = client_generates(request_id, model=model, **fields)
        arrival_ns = time.monotonic_ns() if arrival_ns is None else arrival_ns  # a wait for a node counts from it
        offload = (self.tokenize_workers, self.config.offload_tokenize_chars, {})  # long prompts: off the loop, once
        rest, names = (self.cancel, self.local_streams, arrival_ns), self.model_names  # cold_start.py: held for a node
        return self.cold_start.held(msgs[0].model, names, lambda s=self.submit: request_stream(msgs, offload, s, *rest))

    # -- the request path (synchronous; called by handlers and by generate) -------------------------

    def submit(self, msg: ClientGenerate, consumer, arrival_ns: int, token_ids=None, **held) -> ErrorReply | None:
        """Validate, route and send one request; an ErrorReply when it is refused (request_path.py; ``held``: its
        ``held`` and ``again``, for a request held for a node: cold_start.py)."""
        return self.path.submit(msg, consumer, arrival_ns, token_ids, **held)

    def cancel(self, request_id: str) -> bool:
        """Forget a request and tell its node to stop; False when it was not in flight."""
        return self.path.cancel(request_id)

    # -- agent socket ------------------------------------------------------------------------------

    def _on_agent_batch(self, batch: list[Received]) -> None:
        for received in batch:
            self.agent_dispatcher.dispatch(received)
        self._notify()

    def _reply_agent(self, peer: bytes | None, reply: ErrorReply) -> None:
        self._agents.send_nowait(reply, peer)

    def _send_to_node(self, msg: Envelope, node_id: str) -> None:
        self._agents.send_nowait(msg, node_id.encode())

    def _on_agent_undeliverable(self, item: Outgoing, why: str) -> None:
        """A send to a node failed: it is suspect, and a GenerateRequest that did not reach it goes elsewhere."""
        if item.peer is None:
            return
        node_id = item.peer.decode(errors="replace")
        if isinstance(item.msg, GenerateRequest):
            self.path.on_undeliverable(item.msg, node_id, why)
        elif not why.startswith(WHY_UNENCODABLE) and self.registry.suspect(node_id):  # the node's fault only
            log.warning("node %s is suspect: a send to it failed (%s)", node_id, why)

    def _node_answer(self, incoming: Incoming) -> None:  # an answer to a NodeAsks question, from the node it names
        self._node_of(incoming, incoming.msg.node_id) and self.node_asks.answer(incoming.msg)

    def _node_of(self, incoming: Incoming, node_id: str) -> bool:
        """The message names the node its routing id says; unknown nodes are told to say hello."""
        if incoming.peer != node_id.encode():
            message = f"node_id {node_id!r} differs from the routing id"
            self._agents.send_nowait(ErrorReply(code=ErrorCode.INVALID_REQUEST, message=message), incoming.peer)
            return False
        if node_id not in self.registry:
            hello = ErrorReply(code=ErrorCode.INVALID_REQUEST, message=f"unknown node {node_id!r}: send NodeHello")
            self._agents.send_nowait(hello, incoming.peer)
            return False
        return True

    def handle_node_hello(self, incoming: Incoming) -> None:
        hello: NodeHello = incoming.msg
        if incoming.peer != hello.node_id.encode():
            refusal = ErrorReply(code=ErrorCode.INVALID_REQUEST, message="the DEALER routing id must be the node id")
            self._agents.send_nowait(refusal, incoming.peer)
            return
        if self.config.model_name is not None and hello.model != self.config.model_name:
            message = "node %s serves %r; this control plane tokenizes for %r"
            log.warning(message, hello.node_id, hello.model, self.config.model_name)
        cell = self.config.router.cells.cell_of_node(hello.cell, hello.hardware.gpu_type)  # by label or GPU type
        if cell != hello.cell:
            hello = msgspec.structs.replace(hello, cell=cell)
        try:
            lost = self.registry.join(hello)
        except ValueError as e:
            self._agents.send_nowait(ErrorReply(code=ErrorCode.INVALID_REQUEST, message=str(e)), incoming.peer)
            return
        if lost is not None:
            log.info("node %s joined again (restarted or lost contact)", hello.node_id)
            self._lost(lost)
        self.fleet.on_hello(hello)
        self.requests.latency.setdefault(hello.node_id, NodeLatency())
        gpu, power = hello.hardware.gpu_type, hello.power_score
        log.info("node %s joined: %s, %s, power %.2f", hello.node_id, hello.model, gpu, power)
        self._agents.send_nowait(self._welcome(hello), incoming.peer)

    def _welcome(self, hello: NodeHello) -> Welcome:
        return Welcome(
            node_id=hello.node_id,
            heartbeat_interval_s=self.config.heartbeat_interval_s,
            report_interval_s=self.config.report_interval_s,
            peers=self.kv_moves.data_peers(hello),
            kv_events=getattr(self.policy, "wants_kv_events", False),  # its KV cache events: KvEvents
            kv_snapshot=getattr(self.policy, "wants_kv_snapshot", False),  # or its cache once
            token_chunk_batches=True,  # an engine pass's chunks in one TokenChunks (agent/chunk_batches.py)
        )

    def welcome_again(self) -> None:
        """Each node's Welcome sent again: a reloaded router asks for other KV events (router_reload.py)."""
        for view in self.registry.views():
            with contextlib.suppress(MailboxFull):  # that node is heard as before, until it joins again
                self._send_to_node(self._welcome(self.registry.hello(view.node_id)), view.node_id)

    def handle_kv_events(self, incoming: Incoming) -> None:
        msg: KvEvents = incoming.msg  # for a policy that indexes the nodes' caches (Dynamo's KV router)
        wanted = getattr(self.policy, "wants_kv_events", False) or getattr(self.policy, "wants_kv_snapshot", False)
        if self._node_of(incoming, msg.node_id) and wanted:
            self.policy.on_kv_events(msg.node_id, kv_events_from_wire(msg.events))

    def handle_heartbeat(self, incoming: Incoming) -> None:
        msg: Heartbeat = incoming.msg
        if self._node_of(incoming, msg.node_id):
            self.registry.heartbeat(msg.node_id)
            self._agents.send_nowait(self.kv_moves.heartbeat_echo(msg.node_id), incoming.peer)

    def handle_load_report(self, incoming: Incoming) -> None:
        msg: LoadReport = incoming.msg
        if self._node_of(incoming, msg.node_id):
            self.registry.report(msg)
            self.fleet.on_load_report(msg)
            self.kv_moves.rebalance()
            self.spec_pairs.on_load_report(msg)
            self.sleeps.on_report(msg)  # a node asleep is not routed to (controlplane/node_sleeps.py)

    def handle_node_leave(self, incoming: Incoming) -> None:
        msg: NodeLeave = incoming.msg
        if incoming.peer != msg.node_id.encode():
            return
        lost = self.registry.leave(msg.node_id, msg.reason)
        if lost is not None:
            log.info("node %s left: %s", msg.node_id, clip(msg.reason))
            self._lost(lost)

    def handle_node_drain(self, incoming: Incoming) -> None:
        """The agent drains (SIGTERM, or again after a Welcome): nothing new goes there (controlplane/node_drains)."""
        if self._node_of(incoming, incoming.msg.node_id):
            self.drains.on_agent_drain(incoming.msg)

    def drain(self, node_id: str, reason: str = "") -> bool:
        """Route nothing new to ``node_id``, tell its agent; its requests finish there (False: no such node)."""
        return self.drains.drain(node_id, reason)

    def handle_node_telemetry(self, incoming: Incoming) -> None:
        msg: NodeTelemetry = incoming.msg
        if self._node_of(incoming, msg.node_id):
            self.fleet.on_telemetry(msg)

    def handle_token_chunks(self, incoming: Incoming) -> None:
        """An engine pass's chunks in one message: each relayed as if it came alone, sent when the message was."""
        msg: TokenChunks = incoming.msg
        if len(msg.chunks) > MAX_TOKEN_CHUNKS:  # refused whole: a pass of this agent never holds more
            message = f"TokenChunks holds {len(msg.chunks)} chunks, at most {MAX_TOKEN_CHUNKS}"
            self._agents.send_nowait(ErrorReply(code=ErrorCode.INVALID_REQUEST, message=message), incoming.peer)
            return
        for chunk in msg.chunks:
            chunk.sent_ns = msg.sent_ns
            self._relay_chunk(incoming.peer, chunk, incoming.recv_ns)

    def _relay_chunk(self, peer: bytes, chunk: TokenChunk, recv_ns: int) -> None:
        node_id = peer.decode()
        if not self.path.relay(node_id, chunk, recv_ns):
            if not chunk.finished:  # cancelled, failed or resumed elsewhere already: make sure the node stops
                with contextlib.suppress(MailboxFull):  # its next chunk asks again
                    self._agents.send_nowait(CancelRequest(request_id=chunk.request_id), peer)
            return
        self.fleet.on_chunk_return(node_id, (recv_ns - chunk.sent_ns) / 1e9)

    def handle_agent_error(self, incoming: Incoming) -> None:
        msg: ErrorReply = incoming.msg
        if not self.path.on_node_error(incoming.peer.decode(errors="replace"), msg):  # OVERLOADED: resumes
            log.info("node %r reports %s: %s", incoming.peer, msg.code, clip(msg.message))

    # -- client socket -----------------------------------------------------------------------------

    def _on_client_batch(self, batch: list[Received]) -> None:
        for received in batch:
            self.client_dispatcher.dispatch(received)
        self._notify()

    def _reply_client(self, peer: bytes | None, reply: ErrorReply) -> None:
        self._clients.send_nowait(reply, peer)

    def _refuse_invalid(self, peer: bytes | None, reply: ErrorReply) -> None:
        """A request whose decoding found an invalid field (a sampling parameter): refused like any other."""
        self.path.count_refusal(reply)
        self._clients.send_nowait(reply, peer)

    def _on_client_undeliverable(self, item: Outgoing, why: str) -> None:
        """The client vanished (or stopped reading): stop its request on the node."""
        if isinstance(item.msg, TokenChunk) and not item.msg.finished:
            self.cancel(item.msg.request_id)

    def handle_probe_snapshot(self, incoming: Incoming) -> None:  # from `zoo probe`: shown beside the app figures
        self.probe.put(incoming.msg.snapshot)

    def latest_probe_snapshot(self) -> dict | None:
        return self.probe.latest()  # None when no probe reported within PROBE_STALE_S (controlplane/probe_inbox.py)

    def handle_client_drain(self, incoming: Incoming) -> None:
        """`zoo drain [--resume] NODE`: answered with a NodeDrain (its requests in flight then), or an error."""
        self._clients.send_nowait(self.drains.answer(incoming.msg), incoming.peer)

    def handle_migration_done(self, incoming: Incoming) -> None:
        """A source agent let a request go (controlplane/migrations.py)."""
        msg: MigrationDone = incoming.msg
        if self._node_of(incoming, msg.node_id):
            self.kv_moves.on_done(msg)

    # -- what the gateway asks besides generate (OpenAI details: /v1/models at start, /tokenize) ------

    async def wait_for_models(self, timeout_s: float) -> list[str]:
        """The served models once some node has joined (at most ``timeout_s``; then whatever there is)."""
        with anyio.move_on_after(timeout_s):
            while not self.model_names and not self.draining:
                await self._changed.wait()
        return self.model_names

    @property
    def max_model_len(self) -> int | None:  # the longest context a live node serves (None: no node yet)
        return self.model_max_len(None)

    def node_hello(self, node_id: str) -> NodeHello | None:  # the gateway's system_fingerprint; None: gone
        return self.registry.hello(node_id) if node_id in self.registry else None

    def model_max_len(self, model: str | None) -> int | None:
        """The longest context a live node serving ``model`` (None: any) serves; None: no such node."""
        lengths = [view.max_model_len for view in self.registry.snapshot(model).nodes]
        return max(lengths) if lengths else None
