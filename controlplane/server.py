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
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import anyio
import zmq.asyncio
from anyio.streams.memory import MemoryObjectSendStream

from controlplane.actors.link import Link, Outgoing
from controlplane.actors.runtime import Actor, MailboxFull
from controlplane.agent import sampling_params_from_wire
from controlplane.engine.clock import Clock, MonotonicClock
from controlplane.engine.llm_engine import EngineTokenizer
from controlplane.engine.sampling_params import SamplingParamsError
from controlplane.frontend import FrontendError
from controlplane.router.block_hashes import prompt_block_hashes
from controlplane.router.policies import make_policy
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig
from transport.dispatch import Dispatcher, Incoming
from transport.messages import (
    CancelRequest,
    ChatMessage,
    ClientGenerate,
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
    Sampling,
    TokenChunk,
    Welcome,
)
from transport.sockets import (
    AGENT_MAX_MSG_BYTES,
    CLIENT_MAX_MSG_BYTES,
    DEFAULT_AGENT_ENDPOINT,
    DEFAULT_CLIENT_ENDPOINT,
    Channel,
    Received,
    bind_router,
)

log = logging.getLogger(__name__)


@dataclass(slots=True)
class ControlPlaneConfig:
    """The control plane.

    agent_endpoint / client_endpoint: ROUTER bind addresses (``tcp://127.0.0.1:0``: a free port);
        client_endpoint None: no ZeroMQ client socket (HTTP only).
    model_name: the model the tokenizer belongs to (None: whatever the first node serves).
    router: the routing policy by name and its knobs.
    admission: queue limits (None: AdmissionConfig's defaults).
    heartbeat_interval_s / report_interval_s: what each Welcome tells the agents.
    heartbeat_timeout_s: a node silent this long is dead; its requests fail with NODE_FAILED.
    chunk_timeout_s: an in-process ``generate`` waiting this long for its next chunk gives up.
    max_latency_samples: TTFT/TPOT samples kept per node for the latency table.
    max_pending_events: latency samples kept for ``take_events`` (the oldest are dropped when nobody takes them).
    """

    agent_endpoint: str = DEFAULT_AGENT_ENDPOINT
    client_endpoint: str | None = DEFAULT_CLIENT_ENDPOINT
    model_name: str | None = None
    router: RouterConfig = field(default_factory=RouterConfig)
    admission: Any = None
    heartbeat_interval_s: float = 1.0
    report_interval_s: float = 0.25
    heartbeat_timeout_s: float = 5.0
    chunk_timeout_s: float = 300.0
    max_latency_samples: int = 10_000
    max_pending_events: int = 100_000

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval_s", "report_interval_s", "heartbeat_timeout_s", "chunk_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ValueError("heartbeat_timeout_s must exceed heartbeat_interval_s")


# --------------------------------------------------------------------------- requests and latency


class _ZmqConsumer:
    __slots__ = ("link", "peer")

    def __init__(self, link: Link, peer: bytes) -> None:
        self.link = link
        self.peer = peer

    def deliver(self, msg: TokenChunk | ErrorReply) -> None:
        self.link.send_nowait(msg, self.peer)  # MailboxFull → the caller cancels the request


class _LocalConsumer:
    __slots__ = ("stream",)

    def __init__(self, stream: MemoryObjectSendStream) -> None:
        self.stream = stream

    def deliver(self, msg: TokenChunk | ErrorReply) -> None:
        try:
            self.stream.send_nowait(msg)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise MailboxFull("consumer gone or behind") from None


@dataclass(slots=True)
class _Inflight:
    request_id: str
    node_id: str
    consumer: _ZmqConsumer | _LocalConsumer
    arrival_ns: int
    num_prompt_tokens: int
    first_token_ns: int = 0
    last_token_ns: int = 0
    num_output_tokens: int = 0


@dataclass(slots=True)
class NodeLatency:
    """One node's served requests as the control plane saw them (TTFT includes routing and both hops)."""

    ttft_s: deque = field(default_factory=lambda: deque(maxlen=10_000))
    tpot_s: deque = field(default_factory=lambda: deque(maxlen=10_000))
    num_served: int = 0
    num_failed: int = 0

    def summary(self) -> dict[str, float | int | None]:
        return {
            "ttft_ms_p50": _percentile_ms(self.ttft_s, 50),
            "ttft_ms_p99": _percentile_ms(self.ttft_s, 99),
            "tpot_ms_p50": _percentile_ms(self.tpot_s, 50),
            "tpot_ms_p99": _percentile_ms(self.tpot_s, 99),
            "requests_served": self.num_served,
            "requests_failed": self.num_failed,
        }


class LatencyKind:
    """What a LatencySample measured (all on time.monotonic_ns, one clock per host)."""

    ROUTER_QUEUE_WAIT = "router_queue_wait"  # GenerateRequest.routed_ns - arrival_ns
    ROUTER_TO_NODE_HOP = "router_to_node_hop"  # agent recv_ns - GenerateRequest.sent_ns (NodeTelemetry)
    NODE_TO_ROUTER_RETURN = "node_to_router_return"  # control plane recv_ns - TokenChunk.sent_ns, per chunk


@dataclass(slots=True, frozen=True)
class LatencySample:
    """An event for the exporters (``ControlPlane.take_events``)."""

    kind: str  # a LatencyKind value
    node_id: str
    value_s: float


def _percentile_ms(samples, q: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return 1e3 * ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# --------------------------------------------------------------------------- the actor


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
        self.hellos: dict[str, NodeHello] = {}  # every node ever seen (live ones are in the registry)
        self._requests: dict[str, _Inflight] = {}
        self.latency: dict[str, NodeLatency] = {}
        self.counters: dict[str, int] = {"routed": 0, "completed": 0, "failed": 0, "cancelled": 0, "refused": 0}
        self.refused: dict[ErrorCode, int] = dict.fromkeys(ErrorCode, 0)
        self.decisions: dict[str, int] = {}  # node id → requests the policy routed there
        self.preemptions: dict[str, int] = {}  # node id → num_preemptions_total of its last LoadReport
        self.metrics_urls: dict[str, str] = {}  # node id → its agent's /metrics (from NodeTelemetry)
        self._events: deque[LatencySample] = deque(maxlen=config.max_pending_events)
        self._changed = anyio.Event()
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
            },
            reply=self._reply_client,
            name="control plane (clients)",
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
        for request_id in list(self._requests):
            self._fail(request_id, ErrorCode.NODE_FAILED, "the control plane is shutting down")
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
            self._fail(request_id, ErrorCode.NODE_FAILED, lost.error_message)
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
        views = {v.node_id: v for v in self.registry.snapshot().nodes}
        nodes = {}
        for node_id in sorted(set(self.latency) | set(views)):
            hello = self.hellos.get(node_id)
            view = views.get(node_id)
            nodes[node_id] = {
                "alive": view is not None,
                "gpu_type": hello.hardware.gpu_type if hello else None,
                "cell": hello.cell if hello else None,
                "model": hello.model if hello else None,
                "power_score": hello.power_score if hello else None,
                "num_running": view.num_running if view else 0,
                "num_waiting": view.num_waiting if view else 0,
                "num_swapped": view.num_swapped if view else 0,
                "kv_usage": view.kv_usage if view else 0.0,
                "num_inflight": view.num_inflight if view else 0,
                "num_preemptions_total": self.preemptions.get(node_id, 0),
                "requests_routed": self.decisions.get(node_id, 0),
                "metrics_url": self.metrics_urls.get(node_id, ""),
                **self.latency.get(node_id, NodeLatency()).summary(),
            }
        return {
            "policy": self.policy.name,
            "nodes": nodes,
            "requests": {**self.counters, "inflight": len(self._requests)},
            "refused": {code.value: n for code, n in self.refused.items() if n},
            "rejected_messages": {
                "agents": {c.value: n for c, n in self.agent_dispatcher.rejected.items() if n},
                "clients": {c.value: n for c, n in self.client_dispatcher.rejected.items() if n},
            },
        }

    def take_events(self) -> list[LatencySample]:
        """Latency samples since the last call (for observe/; at most ``max_pending_events``, oldest dropped)."""
        events = list(self._events)
        self._events.clear()
        return events

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
            "inflight": len(self._requests),
            "policy": self.policy.name,
        }

    async def generate(
        self,
        request_id: str,
        *,
        model: str | None,
        prompt: str | None = None,
        messages: list[ChatMessage] | None = None,
        prompt_token_ids: list[int] | None = None,
        sampling: Sampling,
        traffic_class: str = "default",
    ) -> AsyncIterator[TokenChunk]:
        # room for every chunk the request can produce: the node's chunks never wait on this consumer
        send, receive = anyio.create_memory_object_stream[TokenChunk | ErrorReply](max(1, sampling.max_tokens) + 2)
        msg = ClientGenerate(
            request_id=request_id,
            model=model,
            prompt=prompt,
            messages=messages,
            prompt_token_ids=prompt_token_ids,
            sampling=sampling,
            traffic_class=traffic_class,
        )
        error = self.submit(msg, _LocalConsumer(send), time.monotonic_ns())
        if error is not None:
            send.close()
            receive.close()
            raise FrontendError(error.code, error.message, error.retry_after_s, _param_of(error))
        finished = False
        try:
            with receive:
                while True:
                    try:
                        with anyio.fail_after(self.config.chunk_timeout_s):
                            item = await receive.receive()
                    except TimeoutError:
                        raise FrontendError(ErrorCode.INTERNAL, "timed out waiting for the node") from None
                    if isinstance(item, ErrorReply):
                        finished = True
                        raise FrontendError(item.code, item.message, item.retry_after_s)
                    finished = item.finished
                    yield item
                    if finished:
                        return
        finally:
            if not finished:
                self.cancel(request_id)

    # -- the request path (synchronous; called by handlers and by generate) -------------------------

    def submit(self, msg: ClientGenerate, consumer, arrival_ns: int) -> ErrorReply | None:
        """Validate, route and send one request; an ErrorReply when it is refused."""
        error = self._route(msg, consumer, arrival_ns)
        if error is not None:
            self.counters["refused"] += 1
            self.refused[error.code] += 1
        return error

    def _route(self, msg: ClientGenerate, consumer, arrival_ns: int) -> ErrorReply | None:
        rid = msg.request_id

        def refuse(code: ErrorCode, message: str, retry_after_s: float | None = None) -> ErrorReply:
            return ErrorReply(request_id=rid, code=code, message=message, retry_after_s=retry_after_s)

        if not rid:
            return refuse(ErrorCode.INVALID_REQUEST, "request_id must not be empty")
        if rid in self._requests:
            return refuse(ErrorCode.INVALID_REQUEST, f"request id {rid!r} is already in flight")
        model_names = self.model_names
        if not model_names:
            return refuse(ErrorCode.NO_NODE, "no node is serving", retry_after_s=1.0)
        model = msg.model or model_names[0]
        if model not in model_names:
            return refuse(ErrorCode.UNKNOWN_MODEL, f"the model {model!r} is not served (served: {model_names})")
        try:
            params = sampling_params_from_wire(msg.sampling)
        except SamplingParamsError as e:
            return refuse(ErrorCode.INVALID_REQUEST, f"invalid sampling parameter {e}")
        try:
            token_ids = self._tokenize(msg)
        except ValueError as e:
            return refuse(ErrorCode.INVALID_REQUEST, str(e))
        cell = self.config.router.cell_for(msg.traffic_class)
        snapshot: ClusterSnapshot = self.registry.snapshot(model=model, cell=cell)
        if not snapshot.nodes:
            return refuse(ErrorCode.NO_NODE, f"no live node serves {model!r} in cell {cell!r}", retry_after_s=1.0)
        num_prompt_tokens = len(token_ids)
        longest = max(v.max_model_len for v in snapshot.nodes)
        if num_prompt_tokens >= longest:
            return refuse(
                ErrorCode.PROMPT_TOO_LONG,
                f"the prompt has {num_prompt_tokens} tokens; the longest context served is {longest} tokens "
                "(prompt + output)",
            )
        route = RouteRequest(
            request_id=rid,
            model=model,
            num_prompt_tokens=num_prompt_tokens,
            max_tokens=params.max_tokens,
            block_hashes=prompt_block_hashes(token_ids, snapshot.nodes[0].block_size),
            traffic_class=msg.traffic_class,
        )
        node_id = self.policy.choose(route, snapshot)
        if node_id is None:
            return refuse(ErrorCode.NO_NODE, "no node can take this request now", retry_after_s=1.0)
        refusal = self.admission.check(snapshot, node_id)
        if refusal is not None:
            return refuse(ErrorCode.OVERLOADED, _refusal_message(refusal), _refusal_retry_after(refusal))
        routed_ns = time.monotonic_ns()
        request = GenerateRequest(
            request_id=rid,
            prompt_token_ids=token_ids,
            sampling=msg.sampling,
            arrival_ns=arrival_ns,
            routed_ns=routed_ns,
        )
        try:
            self._agents.send_nowait(request, node_id.encode())
        except MailboxFull:
            return refuse(ErrorCode.OVERLOADED, "the control plane's agent outbox is full", retry_after_s=1.0)
        self._requests[rid] = _Inflight(rid, node_id, consumer, arrival_ns, num_prompt_tokens)
        self.registry.on_routed(node_id, rid, num_prompt_tokens)
        self.policy.on_routed(route, node_id)
        self.counters["routed"] += 1
        self.decisions[node_id] = self.decisions.get(node_id, 0) + 1
        self._events.append(LatencySample(LatencyKind.ROUTER_QUEUE_WAIT, node_id, (routed_ns - arrival_ns) / 1e9))
        return None

    def _tokenize(self, msg: ClientGenerate) -> list[int]:
        given = [x is not None for x in (msg.prompt, msg.messages, msg.prompt_token_ids)]
        if sum(given) != 1:
            raise ValueError("exactly one of prompt, messages, prompt_token_ids must be given")
        if msg.prompt_token_ids is not None:
            token_ids = msg.prompt_token_ids
            vocab = self.tokenizer.vocab_size
            bad = [t for t in token_ids if not 0 <= t < vocab]
            if bad:
                raise ValueError(f"prompt token ids out of range [0, {vocab}): {bad[:5]}")
        elif msg.messages is not None:
            if not msg.messages:
                raise ValueError("messages must not be empty")
            rendered = self.tokenizer.apply_chat_template(
                [{"role": m.role, "content": m.content} for m in msg.messages]
            )
            token_ids = self.tokenizer.encode(rendered)
        else:
            token_ids = self.tokenizer.encode(msg.prompt)
        if not token_ids:
            raise ValueError("the prompt is empty")
        return token_ids

    def cancel(self, request_id: str) -> bool:
        """Forget a request and tell its node to stop; False when it was not in flight."""
        inflight = self._requests.pop(request_id, None)
        if inflight is None:
            return False
        self.registry.on_finished(inflight.node_id, request_id)
        self.counters["cancelled"] += 1
        try:
            self._agents.send_nowait(CancelRequest(request_id=request_id), inflight.node_id.encode())
        except MailboxFull:
            log.warning("could not send a CancelRequest for %s: agent outbox full", request_id)
        return True

    def _fail(self, request_id: str, code: ErrorCode, message: str) -> None:
        inflight = self._requests.pop(request_id, None)
        if inflight is None:
            return
        self.registry.on_finished(inflight.node_id, request_id)
        self.counters["failed"] += 1
        self.latency.setdefault(inflight.node_id, NodeLatency()).num_failed += 1
        try:
            inflight.consumer.deliver(ErrorReply(request_id=request_id, code=code, message=message))
        except MailboxFull:
            log.debug("the consumer of %s is gone", request_id)

    # -- agent socket ------------------------------------------------------------------------------

    def _on_agent_batch(self, batch: list[Received]) -> None:
        for received in batch:
            self.agent_dispatcher.dispatch(received)
        self._notify()

    def _reply_agent(self, peer: bytes | None, reply: ErrorReply) -> None:
        self._agents.send_nowait(reply, peer)

    def _on_agent_undeliverable(self, item: Outgoing, why: str) -> None:
        if isinstance(item.msg, GenerateRequest):
            self._fail(item.msg.request_id, ErrorCode.NODE_FAILED, f"could not reach the node: {why}")

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
        self.hellos[hello.node_id] = hello
        self.latency.setdefault(hello.node_id, NodeLatency())
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
            self.preemptions[msg.node_id] = msg.num_preemptions_total

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
            self.metrics_urls[msg.node_id] = msg.metrics_url
            kind = LatencyKind.ROUTER_TO_NODE_HOP
            self._events.extend(LatencySample(kind, msg.node_id, hop_ns / 1e9) for hop_ns in msg.router_to_node_hop_ns)

    def handle_token_chunk(self, incoming: Incoming) -> None:
        chunk: TokenChunk = incoming.msg
        node_id = incoming.peer.decode()
        inflight = self._requests.get(chunk.request_id)
        if inflight is None or inflight.node_id != node_id:
            if not chunk.finished:  # cancelled or failed here already: make sure the node stops too
                self._agents.send_nowait(CancelRequest(request_id=chunk.request_id), incoming.peer)
            return
        now_ns = incoming.recv_ns
        self._events.append(LatencySample(LatencyKind.NODE_TO_ROUTER_RETURN, node_id, (now_ns - chunk.sent_ns) / 1e9))
        if chunk.token_ids:
            if not inflight.first_token_ns:
                inflight.first_token_ns = now_ns
                self.registry.on_first_token(node_id, chunk.request_id)
            inflight.last_token_ns = now_ns
            inflight.num_output_tokens += len(chunk.token_ids)
        chunk.node_id = node_id
        if chunk.finished:
            del self._requests[chunk.request_id]
            self.registry.on_finished(node_id, chunk.request_id)
            self.counters["completed"] += 1
            self._record(inflight)
        try:
            inflight.consumer.deliver(chunk)
        except MailboxFull:
            if not chunk.finished:
                self.cancel(chunk.request_id)

    def _record(self, r: _Inflight) -> None:
        latency = self.latency.setdefault(r.node_id, NodeLatency())
        latency.num_served += 1
        if r.first_token_ns:
            latency.ttft_s.append((r.first_token_ns - r.arrival_ns) / 1e9)
        if r.num_output_tokens >= 2:
            latency.tpot_s.append((r.last_token_ns - r.first_token_ns) / 1e9 / (r.num_output_tokens - 1))

    def handle_agent_error(self, incoming: Incoming) -> None:
        msg: ErrorReply = incoming.msg
        inflight = self._requests.get(msg.request_id)
        if inflight is None or inflight.node_id.encode() != incoming.peer:
            log.info("node %r reports %s: %s", incoming.peer, msg.code, msg.message)
            return
        self._fail(msg.request_id, msg.code, msg.message)

    # -- client socket -----------------------------------------------------------------------------

    def _on_client_batch(self, batch: list[Received]) -> None:
        for received in batch:
            self.client_dispatcher.dispatch(received)
        self._notify()

    def _reply_client(self, peer: bytes | None, reply: ErrorReply) -> None:
        self._clients.send_nowait(reply, peer)

    def _on_client_undeliverable(self, item: Outgoing, why: str) -> None:
        """The client vanished (or stopped reading): stop its request on the node."""
        if isinstance(item.msg, TokenChunk) and not item.msg.finished:
            self.cancel(item.msg.request_id)

    def handle_client_generate(self, incoming: Incoming) -> None:
        msg: ClientGenerate = incoming.msg
        error = self.submit(msg, _ZmqConsumer(self._clients, incoming.peer), incoming.recv_ns)
        if error is not None:
            self._clients.send_nowait(error, incoming.peer)

    def handle_client_cancel(self, incoming: Incoming) -> None:
        inflight = self._requests.get(incoming.msg.request_id)
        if inflight is not None and getattr(inflight.consumer, "peer", None) == incoming.peer:
            self.cancel(inflight.request_id)

    def handle_client_ping(self, incoming: Incoming) -> None:
        msg: Ping = incoming.msg
        self._clients.send_nowait(
            Pong(request_id=msg.request_id, payload=msg.payload, ping_sent_ns=msg.sent_ns), incoming.peer
        )


def _param_of(error: ErrorReply) -> str | None:
    if error.code is ErrorCode.INVALID_REQUEST and error.message.startswith("invalid sampling parameter "):
        return error.message.removeprefix("invalid sampling parameter ").split(":", 1)[0]
    if error.code is ErrorCode.UNKNOWN_MODEL:
        return "model"
    return None


def _refusal_message(refusal) -> str:
    return str(getattr(refusal, "message", refusal))


def _refusal_retry_after(refusal) -> float | None:
    return getattr(refusal, "retry_after_s", 1.0)
