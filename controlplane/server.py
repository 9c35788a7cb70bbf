"""The ControlPlane actor: agents and clients in, routing decisions and token streams out.

    agents  DEALER ──► ROUTER agent_endpoint  (default tcp://127.0.0.1:5555) ──► agent Link ─┐
    clients DEALER ──► ROUTER client_endpoint (default tcp://127.0.0.1:5556) ──► client Link ─┤ handlers (sync):
    HTTP gateway (same process) ──► Frontend.generate() ──────────────────────────────────────┤ registry, policy,
                                                                                              │ admission, requests
    expiry loop (every heartbeat_timeout_s / 4) ──► registry.expire() ─► NODE_FAILED ────────┘

Agents and clients get separate ROUTER sockets: a client cannot speak the agent protocol (its NodeHello
is rejected as UNKNOWN_TYPE), each side has its own high-water marks, and agents' routing ids are
their node ids (ROUTER_HANDOVER lets a restarted agent take its id over).

The life of a request: tokenize (chat template for ``messages``), validate the sampling parameters,
check the prompt against the context of the live nodes, snapshot the registry, let the policy choose,
ask admission control, send a GenerateRequest to the node; every TokenChunk the node streams back goes
to the request's consumer (a ZeroMQ client identity, or an in-process ``generate`` iterator), until a
chunk with ``finished``. A client's CancelRequest, a closed iterator or a client that vanished sends a
CancelRequest to the node; a node that leaves, restarts or misses its heartbeats fails its requests
with NODE_FAILED.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator

import anyio
import zmq.asyncio

from controlplane.control_plane_config import ControlPlaneConfig
from controlplane.fleet_ledger import FleetLedger
from controlplane.node_latency import LatencyKind, LatencySample, NodeLatency
from controlplane.request_intake import place_request
from controlplane.request_table import Inflight, RequestTable, ZmqConsumer, local_stream
from controlplane.router.policies import make_policy
from engine.clock import Clock, MonotonicClock
from engine.llm_engine import EngineTokenizer
from engine.sampling_params import SamplingParams
from transport.actor import Actor, MailboxFull
from transport.dispatch import Dispatcher, Incoming
from transport.link import Link, Outgoing
from transport.messages import (
    CancelRequest,
    ChatMessage,
    ClientGenerate,
    Envelope,
    ErrorCode,
    ErrorReply,
    GenerateRequest,
    Heartbeat,
    LoadReport,
    NodeHello,
    NodeLeave,
    NodeTelemetry,
    Ping,
    Pong,
    ProbeSnapshot,
    TokenChunk,
    Welcome,
)
from transport.sockets import AGENT_MAX_MSG_BYTES, CLIENT_MAX_MSG_BYTES, Channel, Received, bind_router

__all__ = ["ControlPlane", "ControlPlaneConfig", "LatencyKind", "LatencySample", "NodeLatency"]

log = logging.getLogger(__name__)
PROBE_STALE_S = 10.0  # an eBPF snapshot older than this is not shown (the probe stopped)


class ControlPlane(Actor):
    """Start with ``await tg.start(cp.run)``; it reports itself once both sockets are bound
    (``cp.agent_endpoint`` / ``cp.client_endpoint`` then hold the real addresses). Implements Frontend.

    tokenizer: the served model's (``load_checkpoint(path).tokenizer``); the control plane tokenizes.
    registry / policy / admission: built from the config unless given (tests may inject them).
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
    ) -> None:
        super().__init__()
        from controlplane.admission import AdmissionConfig, AdmissionControl
        from controlplane.registry import ClusterRegistry

        self.config = config
        self.tokenizer = tokenizer
        self.clock = clock or MonotonicClock()
        self.registry = registry or ClusterRegistry(self.clock, config.heartbeat_timeout_s)
        self.policy = policy or make_policy(config.router.policy, config.router)
        self.admission = admission or AdmissionControl(config.admission or AdmissionConfig())
        self._ctx = context
        self._own_ctx = context is None
        self.agent_endpoint = config.agent_endpoint
        self.client_endpoint = config.client_endpoint
        self._agents: Link | None = None
        self._clients: Link | None = None
        self.requests = RequestTable(self.registry, self._send_to_node)
        self.counters = self.requests.counters  # the same dict: routed and refused are counted here
        self.refused: dict[ErrorCode, int] = dict.fromkeys(ErrorCode, 0)
        self.fleet = FleetLedger(config.max_pending_events)
        self.hellos, self.metrics_urls = self.fleet.hellos, self.fleet.metrics_urls  # the same dicts
        self._changed = anyio.Event()
        self._probe_snapshot: tuple[dict, float] | None = None
        self.agent_dispatcher = Dispatcher(
            {
                NodeHello: self.handle_node_hello,
                Heartbeat: self.handle_heartbeat,
                LoadReport: self.handle_load_report,
                NodeLeave: self.handle_node_leave,
                NodeTelemetry: self.handle_node_telemetry,
                TokenChunk: self.handle_token_chunk,
                ErrorReply: self.handle_agent_error,
                Pong: lambda incoming: None,
            },
            reply=self._reply_agent,
            name="control plane (agents)",
        )
        self.client_dispatcher = Dispatcher(
            {
                ClientGenerate: self.handle_client_generate,
                CancelRequest: self.handle_client_cancel,
                Ping: self.handle_client_ping,
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
        sock, self.agent_endpoint = bind_router(
            self._ctx, self.config.agent_endpoint, handover=True, max_msg_bytes=AGENT_MAX_MSG_BYTES
        )
        self._agents = Link(Channel(sock), self._on_agent_batch, self._on_agent_undeliverable, name="cp agents")
        if self.config.client_endpoint is not None:
            sock, self.client_endpoint = bind_router(
                self._ctx, self.config.client_endpoint, handover=False, max_msg_bytes=CLIENT_MAX_MSG_BYTES
            )
            self._clients = Link(Channel(sock), self._on_client_batch, self._on_client_undeliverable, name="cp clients")
        return self

    def loops(self):
        loops = [self._agents.read_loop, self._agents.write_loop, self._expiry_loop]
        if self._clients is not None:
            loops += [self._clients.read_loop, self._clients.write_loop]
        return loops

    async def cleanup(self) -> None:
        self.requests.fail_all(ErrorCode.NODE_FAILED, "the control plane is shutting down")
        for link in (self._agents, self._clients):
            if link is not None:
                link.close()
        if self._own_ctx and self._ctx is not None:
            self._ctx.term()

    async def _expiry_loop(self) -> None:
        while True:
            await anyio.sleep(self.config.heartbeat_timeout_s / 4)
            for lost in self.registry.expire():
                log.warning("node %s missed its heartbeats: marked dead", lost.node_id)
                self._lost(lost)
            self._notify()

    def _lost(self, lost) -> None:
        """A node the registry removed (LostNode): fail what was in flight there."""
        for request_id in lost.request_ids:
            self.requests.fail(request_id, ErrorCode.NODE_FAILED, lost.error_message)
        self.policy.on_node_removed(lost.node_id)

    # -- observation ------------------------------------------------------------------------------

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()

    async def wait_until(self, predicate, timeout_s: float) -> None:
        """Wait until ``predicate()`` holds, re-checked after every batch of messages and expiry pass."""
        with anyio.fail_after(timeout_s):
            while not predicate():
                await self._changed.wait()

    def node_view(self, node_id: str):
        for view in self.registry.snapshot().nodes:
            if view.node_id == node_id:
                return view
        return None

    def stats(self) -> dict:
        """A plain snapshot for the latency table, the dashboard and the exporters."""
        return {
            "policy": self.policy.name,
            "nodes": self.fleet.nodes(self.registry.snapshot().nodes, self.requests.latency),
            "requests": {**self.counters, "inflight": len(self.requests)},
            "refused": {code.value: n for code, n in self.refused.items() if n},
            "rejected_messages": {
                "agents": {c.value: n for c, n in self.agent_dispatcher.rejected.items() if n},
                "clients": {c.value: n for c, n in self.client_dispatcher.rejected.items() if n},
            },
        }

    def take_events(self) -> list[LatencySample]:
        """Latency samples since the last call (for observe/; at most ``max_pending_events``, oldest dropped)."""
        return self.fleet.take_events()

    # -- Frontend ---------------------------------------------------------------------------------

    @property
    def model_names(self) -> list[str]:
        names = self.registry.model_names()
        default = self.config.model_name
        if default in names:
            names.remove(default)
            names.insert(0, default)
        return names

    def health(self) -> dict:
        num_nodes = len(self.registry)
        return {
            "status": "ok" if num_nodes else "degraded",
            "nodes": num_nodes,
            "models": self.model_names,
            "inflight": len(self.requests),
            "policy": self.policy.name,
        }

    def generate(
        self,
        request_id: str,
        *,
        model: str | None,
        prompt: str | None = None,
        messages: list[ChatMessage] | None = None,
        prompt_token_ids: list[int] | None = None,
        sampling: SamplingParams,
        traffic_class: str = "default",
    ) -> AsyncIterator[TokenChunk]:
        msg = ClientGenerate(
            request_id=request_id,
            model=model,
            prompt=prompt,
            messages=messages,
            prompt_token_ids=prompt_token_ids,
            sampling=sampling,
            traffic_class=traffic_class,
        )
        return local_stream(msg, self.submit, self.cancel, self.config.chunk_timeout_s)

    # -- the request path (synchronous; called by handlers and by generate) -------------------------

    def submit(self, msg: ClientGenerate, consumer, arrival_ns: int) -> ErrorReply | None:
        """Validate, route and send one request; an ErrorReply when it is refused."""
        error = self._route(msg, consumer, arrival_ns)
        if error is not None:
            self._count_refusal(error)
        return error

    def _count_refusal(self, error: ErrorReply) -> None:
        self.counters["refused"] += 1
        self.refused[error.code] += 1

    def _route(self, msg: ClientGenerate, consumer, arrival_ns: int) -> ErrorReply | None:
        placed = place_request(
            msg,
            model_names=self.model_names,
            inflight=self.requests,
            tokenizer=self.tokenizer,
            registry=self.registry,
            policy=self.policy,
            admission=self.admission,
            router=self.config.router,
        )
        if isinstance(placed, ErrorReply):
            return placed
        rid, node_id, num_prompt_tokens = msg.request_id, placed.node_id, placed.route.num_prompt_tokens
        routed_ns = time.monotonic_ns()
        request = GenerateRequest(
            request_id=rid,
            prompt_token_ids=placed.token_ids,
            sampling=msg.sampling,
            arrival_ns=arrival_ns,
            routed_ns=routed_ns,
        )
        try:
            self._send_to_node(request, node_id)
        except MailboxFull:
            return ErrorReply(
                request_id=rid,
                code=ErrorCode.OVERLOADED,
                message="the control plane's agent outbox is full",
                retry_after_s=1.0,
            )
        self.requests.add(Inflight(rid, node_id, consumer, arrival_ns, num_prompt_tokens))
        self.registry.on_routed(node_id, rid, num_prompt_tokens)
        self.policy.on_routed(placed.route, node_id)
        self.counters["routed"] += 1
        self.fleet.on_routed(node_id, (routed_ns - arrival_ns) / 1e9)
        return None

    def cancel(self, request_id: str) -> bool:
        """Forget a request and tell its node to stop; False when it was not in flight."""
        return self.requests.cancel(request_id)

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
        if isinstance(item.msg, GenerateRequest):
            self.requests.fail(item.msg.request_id, ErrorCode.NODE_FAILED, f"could not reach the node: {why}")

    def _node_of(self, incoming: Incoming, node_id: str) -> bool:
        """The message names the node its routing id says; unknown nodes are told to say hello."""
        if incoming.peer != node_id.encode():
            self._agents.send_nowait(
                ErrorReply(code=ErrorCode.INVALID_REQUEST, message=f"node_id {node_id!r} differs from the routing id"),
                incoming.peer,
            )
            return False
        if node_id not in self.registry:
            self._agents.send_nowait(
                ErrorReply(code=ErrorCode.INVALID_REQUEST, message=f"unknown node {node_id!r}: send NodeHello"),
                incoming.peer,
            )
            return False
        return True

    def handle_node_hello(self, incoming: Incoming) -> None:
        hello: NodeHello = incoming.msg
        if incoming.peer != hello.node_id.encode():
            self._agents.send_nowait(
                ErrorReply(code=ErrorCode.INVALID_REQUEST, message="the DEALER routing id must be the node id"),
                incoming.peer,
            )
            return
        if self.config.model_name is not None and hello.model != self.config.model_name:
            log.warning(
                "node %s serves %r; this control plane tokenizes for %r",
                hello.node_id,
                hello.model,
                self.config.model_name,
            )
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
        log.info(
            "node %s joined: %s, %s, power %.2f", hello.node_id, hello.model, hello.hardware.gpu_type, hello.power_score
        )
        self._agents.send_nowait(
            Welcome(
                node_id=hello.node_id,
                heartbeat_interval_s=self.config.heartbeat_interval_s,
                report_interval_s=self.config.report_interval_s,
            ),
            incoming.peer,
        )

    def handle_heartbeat(self, incoming: Incoming) -> None:
        msg: Heartbeat = incoming.msg
        if self._node_of(incoming, msg.node_id):
            self.registry.heartbeat(msg.node_id)
            self._agents.send_nowait(Heartbeat(node_id=msg.node_id), incoming.peer)

    def handle_load_report(self, incoming: Incoming) -> None:
        msg: LoadReport = incoming.msg
        if self._node_of(incoming, msg.node_id):
            self.registry.report(msg)
            self.fleet.on_load_report(msg)

    def handle_node_leave(self, incoming: Incoming) -> None:
        msg: NodeLeave = incoming.msg
        if incoming.peer != msg.node_id.encode():
            return
        lost = self.registry.leave(msg.node_id, msg.reason)
        if lost is not None:
            log.info("node %s left: %s", msg.node_id, msg.reason)
            self._lost(lost)

    def handle_node_telemetry(self, incoming: Incoming) -> None:
        msg: NodeTelemetry = incoming.msg
        if self._node_of(incoming, msg.node_id):
            self.fleet.on_telemetry(msg)

    def handle_token_chunk(self, incoming: Incoming) -> None:
        chunk: TokenChunk = incoming.msg
        node_id = incoming.peer.decode()
        inflight = self.requests.get(chunk.request_id)
        if inflight is None or inflight.node_id != node_id:
            if not chunk.finished:  # cancelled or failed here already: make sure the node stops too
                self._agents.send_nowait(CancelRequest(request_id=chunk.request_id), incoming.peer)
            return
        self.fleet.on_chunk_return(node_id, (incoming.recv_ns - chunk.sent_ns) / 1e9)
        self.requests.relay(inflight, chunk, incoming.recv_ns)

    def handle_agent_error(self, incoming: Incoming) -> None:
        msg: ErrorReply = incoming.msg
        inflight = self.requests.get(msg.request_id)
        if inflight is None or inflight.node_id.encode() != incoming.peer:
            log.info("node %r reports %s: %s", incoming.peer, msg.code, msg.message)
            return
        self.requests.fail(msg.request_id, msg.code, msg.message)

    # -- client socket -----------------------------------------------------------------------------

    def _on_client_batch(self, batch: list[Received]) -> None:
        for received in batch:
            self.client_dispatcher.dispatch(received)
        self._notify()

    def _reply_client(self, peer: bytes | None, reply: ErrorReply) -> None:
        self._clients.send_nowait(reply, peer)

    def _refuse_invalid(self, peer: bytes | None, reply: ErrorReply) -> None:
        """A request whose decoding found an invalid field (a sampling parameter): refused like any other."""
        self._count_refusal(reply)
        self._clients.send_nowait(reply, peer)

    def _on_client_undeliverable(self, item: Outgoing, why: str) -> None:
        """The client vanished (or stopped reading): stop its request on the node."""
        if isinstance(item.msg, TokenChunk) and not item.msg.finished:
            self.cancel(item.msg.request_id)

    def handle_client_generate(self, incoming: Incoming) -> None:
        msg: ClientGenerate = incoming.msg
        error = self.submit(msg, ZmqConsumer(self._clients, incoming.peer), incoming.recv_ns)
        if error is not None:
            self._clients.send_nowait(error, incoming.peer)

    def handle_client_cancel(self, incoming: Incoming) -> None:
        inflight = self.requests.get(incoming.msg.request_id)
        if inflight is not None and getattr(inflight.consumer, "peer", None) == incoming.peer:
            self.cancel(inflight.request_id)

    def handle_probe_snapshot(self, incoming: Incoming) -> None:
        """`zoo probe` pushes its eBPF snapshot here; the stats stream shows it beside the app figures."""
        self._probe_snapshot = (incoming.msg.snapshot, self.clock.now())

    def latest_probe_snapshot(self) -> dict | None:
        """The last eBPF snapshot, or None when no probe reported within PROBE_STALE_S."""
        if self._probe_snapshot is None:
            return None
        snapshot, received_s = self._probe_snapshot
        return snapshot if self.clock.now() - received_s <= PROBE_STALE_S else None

    def handle_client_ping(self, incoming: Incoming) -> None:
        msg: Ping = incoming.msg
        self._clients.send_nowait(
            Pong(request_id=msg.request_id, payload=msg.payload, ping_sent_ns=msg.sent_ns), incoming.peer
        )
