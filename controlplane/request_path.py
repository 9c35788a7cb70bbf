"""RequestPath: a request's way through the fleet — placed, sent, relayed, resumed elsewhere, or failed.

    submit(ClientGenerate) ─► place_request (tokens, policy, admission) ─► GenerateRequest ─► node
         └─ refused ─► ErrorReply (counted by code)
    relay(chunk from its node) ─► its consumer (counts continue across resumes)
    its node was lost (LostNode: heartbeats, left, restarted) ─┐
    the send to its node failed (undeliverable: node suspect) ─┼─► resume: detach from that node, place again
    its node refused it (OVERLOADED: a refusal at send time) ──┘   without it — prompt + the tokens already
                                                                   relayed, max_tokens - their number, the
                                                                   same request id ─► another node
                                                                   └─ nowhere to go / max_resumes reached
                                                                      ─► fail(NODE_FAILED, why)

The client sees one stream: chunks keep the request id, ``num_output_tokens`` keeps counting and
``num_prompt_tokens`` stays the original prompt's (request_table.py). Greedy output is token-identical to
an uninterrupted run (the resumed node re-prefills exactly the tokens the lost one had). A seeded sampled
request resumes with its seed, but its generator starts afresh: its continuation is reproducible, not the
one the lost node would have drawn. Text: a stop string that spans the resume point is not detected, and
text a node held back (the tail that may still begin a stop string) is not re-sent.

Synchronous and without I/O: messages leave through ``send_to_node`` (raises MailboxFull).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from controlplane.cells import DEFAULT_CLASS, engine_priority
from controlplane.class_ledger import ClassLedger
from controlplane.fleet_ledger import FleetLedger
from controlplane.lora_table import LoraTable
from controlplane.registry import LostNode
from controlplane.request_intake import Placement, place_request, resumed_request
from controlplane.request_log import RequestLog
from controlplane.request_spans import RequestSpans, forwarded_headers
from controlplane.request_table import Inflight, RequestTable
from controlplane.router.router_config import RouterConfig
from controlplane.router.router_knobs import knobs_set
from controlplane.slo_forecast import SloForecast
from controlplane.tenants import TenantLimiter
from engine.llm_engine import EngineTokenizer
from transport.actor import MailboxFull
from transport.codec import WHY_UNENCODABLE
from transport.messages import ClientGenerate, Envelope, ErrorCode, ErrorReply, GenerateRequest, TokenChunk

log = logging.getLogger(__name__)

DRAINING = "the control plane is shutting down: it takes no new request (send it to another replica, or retry)"
DRAIN_RETRY_AFTER_S = 5.0  # a restart's typical time: the agents rejoin a new control plane within a heartbeat or two


@dataclass(slots=True, frozen=True)
class HeldRefusal:
    """A request refused for want of a node that its caller holds for a node (controlplane/cold_start.py): not counted
    as refused (nor logged, nor traced) until its wait ends refused (``RequestPath.settle_held``), for it may yet be
    served."""

    msg: ClientGenerate
    reply: ErrorReply
    arrival_ns: int


class RequestPath:
    """Places, resumes and fails requests; owns the RequestTable (``table``) and the request counters.

    registry / policy / admission / tokenizer / router: what ``place_request`` needs.
    fleet: the FleetLedger (routing decisions and queue-wait samples).
    send_to_node(msg, node_id): queue a message to a node (MailboxFull when the outbox is full).
    model_names(): the served models, the default first.
    max_resumes: the most times one request moves to another node before it fails.
    tenants: the tenants' classes, rate limits and usage (controlplane/tenants.py; None: a limiter that knows
        no tenant: no limits, usage still counted). classes: per traffic class books (class_ledger.py).
    loras: the fleet's LoRA adapters (controlplane/lora_table.py), selectable by ``model``.
    aliases: other names clients may give as ``model`` → what each stands for (controlplane/model_aliases.py).
    forecast: each placement's TTFT forecast on its node, in time or late (controlplane/slo_forecast.py).
    spans: each request's OpenTelemetry span (controlplane/request_spans.py; `zoo controlplane
        --otlp-traces-endpoint` sets it); None: no spans, a caller's trace headers are passed on to the node.
    """

    def __init__(
        self,
        *,
        registry,
        policy,
        admission,
        tokenizer: EngineTokenizer,
        router: RouterConfig,
        fleet: FleetLedger,
        send_to_node: Callable[[Envelope, str], None],
        model_names: Callable[[], list[str]],
        max_resumes: int,
        tenants: TenantLimiter | None = None,
        loras: LoraTable | None = None,
        aliases: dict[str, str] | None = None,
    ) -> None:
        self.registry = registry
        self.admission = admission
        self.tokenizer = tokenizer
        self.fleet = fleet
        self._send_to_node = send_to_node
        self._model_names = model_names
        self.max_resumes = max_resumes
        self.tenants = tenants if tenants is not None else TenantLimiter()
        self.classes = ClassLedger()
        self.forecast = SloForecast(router, now=registry.clock.now)
        self.loras = loras
        self.aliases = aliases if aliases is not None else {}
        self.table = RequestTable(registry, send_to_node, policy, on_done=self._on_done)
        self.router_reloads = {"ok": 0, "refused": 0}  # controlplane/router_reload.py
        self.use_router(router, policy)
        self.counters = self.table.counters
        self.refused: dict[ErrorCode, int] = dict.fromkeys(ErrorCode, 0)
        self.spans: RequestSpans | None = None
        self.request_log: RequestLog | None = None  # vLLM's --enable-log-requests (controlplane/request_log.py)
        self.draining = False  # the control plane is shutting down: new requests are refused (ControlPlane.start_drain)

    # -- new requests -------------------------------------------------------------------------------

    def use_router(self, router: RouterConfig, policy) -> None:
        """Route with ``policy`` under ``router`` from now on (at start, and at a router reload); the requests in
        flight go on where they are, their first tokens and finishes told to ``policy``."""
        self.router, self.policy, self.table.policy = router, policy, policy
        # the router's settings as running: its SLO and what the operator changed (--router-knobs, zoo.toml's
        # [controlplane.router]): zoo:router_config_info on /metrics, FleetStats.router_knobs in zoo top
        self.router_settings = {"slo_ttft_s": router.slo_ttft_s, "slo_tpot_s": router.slo_tpot_s}
        self.router_settings["knobs"] = knobs_set(router)
        self.router_settings["reloads"] = self.router_reloads
        self.forecast.use(router, policy)

    def submit(
        self,
        msg: ClientGenerate,
        consumer,
        arrival_ns: int,
        token_ids=None,
        held: Callable[[HeldRefusal], None] | None = None,
        again: bool = False,
    ) -> ErrorReply | None:
        """Validate, route and send one request; an ErrorReply (counted) when it is refused (every one while the
        control plane drains: 503 and Retry-After over HTTP, as vLLM's --shutdown-timeout refuses new requests).
        ``token_ids``: its prompt tokenized already (controlplane/offload_tokenize.py), or None. ``held``: the caller
        holds a request refused for want of a node (NO_NODE at placement) until a node joins: such a refusal is given
        to it, not counted; the caller settles it (``settle_held``) once it stops waiting. ``again``: a held request
        tried again: its pool counted it as an arrival at its first refusal, so neither a refusal for want of capacity
        nor its placement counts again; such a refusal (its pool's queues full, too) is given to ``held``."""
        if self.draining:
            refusal = ErrorReply(
                request_id=msg.request_id, code=ErrorCode.NO_NODE, message=DRAINING, retry_after_s=DRAIN_RETRY_AFTER_S
            )
            self.count_refusal(refusal)
            self.classes.on_refused(self._class_name(msg))
            return refusal
        trace = self.spans.begin(msg, arrival_ns) if self.spans is not None else None
        headers = forwarded_headers(msg, trace)
        if trace is not None and not trace.context.sampled:
            trace = None  # not recorded (the caller's decision, or the sample ratio's); its flag goes to the node
        short: list[bool] = []  # refused for want of capacity (a held request's: its pool's queues full too)
        unserved = self.fleet.count_unserved if not again else lambda model, cell: short.append(True)
        placed = self._place(msg, inflight=self.table, tenants=self.tenants, token_ids=token_ids, on_unserved=unserved)
        if isinstance(placed, Placement):
            routed_ns = time.monotonic_ns()
            placed = self._send(placed, msg, arrival_ns, routed_ns, trace_headers=headers)
        if isinstance(placed, ErrorReply):
            if held is not None and (placed.code is ErrorCode.NO_NODE or short):
                held(HeldRefusal(msg, placed, arrival_ns))  # counted only if its wait for a node ends refused
            else:
                self._refused(msg, placed, trace)
            return placed
        if self.request_log is not None:
            self.request_log.received(msg, placed)
        rid, node_id = msg.request_id, placed.node_id
        inflight = Inflight(
            rid,
            node_id,
            consumer,
            arrival_ns,
            placed.route.num_prompt_tokens,
            msg=msg,
            model=placed.route.lora_name or placed.route.model,  # a resumed request runs with the same adapter
            prompt_token_ids=placed.token_ids,
            traffic_class=placed.route.traffic_class,
            trace=trace,
            last_chunk_ns=routed_ns,  # its chunk timeout counts from here (a wait before, at the gateway, does not)
        )
        if trace is not None:
            self.spans.routed(trace, routed_ns, node_id)
        self.table.add(inflight)
        self.classes.on_routed(placed.route.traffic_class, placed.cell, placed.spilled)
        view = self.registry.view(node_id)  # as the policy saw it: before _record counts this request there
        if view is not None:
            self.fleet.on_forecast(node_id, self.forecast.on_placed(placed.route, view))
        self._record(placed, rid)
        self.counters["routed"] += 1
        self.fleet.on_routed(node_id, (routed_ns - arrival_ns) / 1e9, arrival=not again)
        return None

    def count_refusal(self, error: ErrorReply) -> None:
        self.counters["refused"] += 1
        self.refused[error.code] += 1

    def _refused(self, msg: ClientGenerate, error: ErrorReply, trace) -> None:
        """A refusal told to its client: counted (by code and by class), its span ended, logged."""
        self.count_refusal(error)
        self.classes.on_refused(self._class_name(msg))
        if trace is not None:
            self.spans.refused(trace, msg, error, time.monotonic_ns())
        if self.request_log is not None:
            self.request_log.refused(msg, error)

    def settle_held(self, held: HeldRefusal, refused: bool) -> None:
        """A held request's wait (``submit``'s ``held``) ended without its being served: ``refused`` (its refusal
        goes to its client, counted now, its span from its arrival) or not (its client left: counted as cancelled)."""
        if not refused:
            self.counters["cancelled"] += 1
            return
        trace = self.spans.begin(held.msg, held.arrival_ns) if self.spans is not None else None
        self._refused(held.msg, held.reply, trace if trace is not None and trace.context.sampled else None)

    def cancel(self, request_id: str) -> bool:
        """Forget a request and tell its node to stop; False when it was not in flight."""
        return self.table.cancel(request_id)

    def relay(self, node_id: str, chunk: TokenChunk, recv_ns: int) -> bool:
        """A chunk from ``node_id``; False when no request in flight is served there under its id (cancelled,
        failed or resumed elsewhere already: the caller tells the node to stop)."""
        inflight = self.table.get(chunk.request_id)
        if inflight is None or inflight.node_id != node_id or not inflight.attached:
            return False
        if inflight.trace is not None:
            inflight.trace.on_chunk(chunk, recv_ns)
        if chunk.finished and self.request_log is not None:
            self.request_log.finishing(chunk.request_id, chunk.finish_reason)
        self.table.relay(inflight, chunk, recv_ns)
        return True

    # -- failover ----------------------------------------------------------------------------------

    def on_node_lost(self, lost: LostNode) -> None:
        """The registry removed a node: each request in flight there resumes elsewhere, or fails."""
        for request_id in lost.request_ids:
            self.resume(request_id, lost.error_message)

    def on_undeliverable(self, msg: GenerateRequest, node_id: str, why: str) -> None:
        """A GenerateRequest never reached ``node_id``: the node is suspect (no routing there until it is
        heard from again) and the request goes to another node."""
        inflight = self.table.get(msg.request_id)
        if inflight is not None and inflight.node_id == node_id and why.startswith(WHY_UNENCODABLE):
            self.table.fail(msg.request_id, ErrorCode.INTERNAL, f"the request {why}")  # the message's fault:
            return  # no suspicion, no resume
        if self.registry.suspect(node_id):
            log.warning("node %s is suspect: a send to it failed (%s)", node_id, why)
        if inflight is None or inflight.node_id != node_id or not inflight.attached or inflight.prefilled:
            return  # not (or no longer) on its way there: tokens came from that node, it was resumed...
        self.resume(msg.request_id, f"could not reach node {node_id!r} ({why})")

    def on_node_error(self, node_id: str, reply: ErrorReply) -> bool:
        """An ErrorReply from ``node_id`` about one of its requests: a refusal at send time (OVERLOADED: the
        node's queue is full) resumes on another node, any other error fails the request. False when the
        request is not in flight there."""
        inflight = self.table.get(reply.request_id)
        if inflight is None or inflight.node_id != node_id or not inflight.attached:
            return False
        if reply.code is ErrorCode.OVERLOADED and not inflight.prefilled:
            self.resume(reply.request_id, f"node {node_id!r} refused it: {reply.message}", code=reply.code)
        else:
            self.table.fail(reply.request_id, reply.code, reply.message)
        return True

    def resume(self, request_id: str, why: str, code: ErrorCode = ErrorCode.NODE_FAILED) -> bool:
        """Move a request off its node to another one; when none can take it, fail it with ``code`` and
        ``why``. False when it failed (or was not in flight)."""
        inflight = self.table.detach(request_id)
        if inflight is None:
            return False
        refusal = self._resume(inflight)
        if refusal is None:
            return True
        self.table.fail(request_id, code, f"{why}; it could not resume elsewhere: {refusal}")
        return False

    def _resume(self, inflight: Inflight, only: str | None = None, also_exclude: tuple[str, ...] = ()) -> str | None:
        """Place and send a detached request again (``only``: on that node, a migration's target); None when it
        is on its way, else why it cannot be."""
        if inflight.msg is None:
            return "it was not resumable"
        if inflight.num_resumes >= self.max_resumes:
            return f"it resumed {inflight.num_resumes} times already (max_resumes)"
        if inflight.num_output_tokens >= inflight.msg.sampling.max_tokens:
            return "it had produced all its tokens"
        msg = resumed_request(inflight.msg, inflight.model, inflight.prompt_token_ids, inflight.output_token_ids)
        msg.traffic_class = inflight.traffic_class  # the class it was admitted as (its tenant's, if it has one)
        exclude = (inflight.node_id, *also_exclude)
        if only is not None:
            exclude = {v.node_id for v in self.registry.views()} - {only}
        placed = self._place(msg, inflight=(), exclude=exclude)
        if isinstance(placed, Placement):
            headers = forwarded_headers(msg, inflight.trace)
            num_resumed = len(inflight.output_token_ids)
            placed = self._send(placed, msg, inflight.arrival_ns, time.monotonic_ns(), num_resumed, headers)
        if isinstance(placed, ErrorReply):
            return placed.message
        lost_node_id = inflight.node_id
        self.table.attach(inflight, placed.node_id)
        if inflight.trace is not None and self.spans is not None:
            self.spans.resumed(inflight.trace, time.monotonic_ns(), lost_node_id, placed.node_id)
        self._record(placed, inflight.request_id)
        self.counters["resumed"] += 1
        self.fleet.count_decision(placed.node_id)
        log.info(
            "request %s resumes on %s after %d tokens (was on %s)",
            inflight.request_id,
            placed.node_id,
            inflight.num_output_tokens,
            lost_node_id,
        )
        return None

    # -- internals ---------------------------------------------------------------------------------

    def _on_done(self, inflight: Inflight, outcome: str) -> None:
        """A request left the table: its class's books, and its tenant's output tokens (charged to its
        tokens/min bucket; what a failed request streamed counts too)."""
        self.classes.on_done(inflight.traffic_class, inflight, outcome)
        if inflight.trace is not None and self.spans is not None:
            self.spans.done(inflight.trace, inflight, outcome, time.monotonic_ns())
        if inflight.msg is not None:
            self.tenants.on_finished(inflight.msg.tenant, inflight.num_output_tokens, self.registry.clock.now())
        if self.request_log is not None:
            self.request_log.done(inflight.request_id, inflight.output_token_ids, outcome)

    def _class_name(self, msg: ClientGenerate) -> str:
        """The class a request is counted under: its resolved class, or what it asked for if that is unknown."""
        asked = self.tenants.class_of(msg.tenant, msg.traffic_class)
        try:
            resolved = self.router.cells.resolve(asked)
        except ValueError:
            return "unknown"  # a name no config knows: not a label of its own (bounded metrics)
        if resolved is not None:
            return resolved.name
        return asked if self.router.cell_for(asked) is not None else DEFAULT_CLASS

    def _place(
        self, msg: ClientGenerate, *, inflight, exclude=(), tenants=None, token_ids=None, on_unserved=None
    ) -> Placement | ErrorReply:
        return place_request(
            msg,
            model_names=self._model_names(),
            inflight=inflight,
            tokenizer=self.tokenizer,
            registry=self.registry,
            policy=self.policy,
            admission=self.admission,
            router=self.router,
            exclude=exclude,
            tenants=tenants,
            loras=self.loras,
            aliases=self.aliases,
            token_ids=token_ids,
            on_unserved=on_unserved,
        )

    def _send(
        self,
        placed: Placement,
        msg: ClientGenerate,
        arrival_ns: int,
        routed_ns: int,
        num_resumed_tokens: int = 0,
        trace_headers: dict[str, str] | None = None,
    ) -> Placement | ErrorReply:
        """Send a placed request to its node (``num_resumed_tokens``: a resumed one's output already streamed, the
        last tokens of its prompt now; ``trace_headers``: the parent of the node's span)."""
        request = GenerateRequest(
            request_id=msg.request_id,
            prompt_token_ids=placed.token_ids,
            sampling=msg.sampling,
            arrival_ns=arrival_ns,
            routed_ns=routed_ns,
            priority=placed.priority,
            lora_name=None if placed.lora is None else placed.lora.name,
            lora_path=None if placed.lora is None else placed.lora.path,
            slo_tpot_s=placed.slo_tpot_s,
            num_resumed_tokens=num_resumed_tokens,
            trace_headers=trace_headers,
        )
        try:
            self._send_to_node(request, placed.node_id)
        except MailboxFull:
            return ErrorReply(
                request_id=msg.request_id,
                code=ErrorCode.OVERLOADED,
                message="the control plane's agent outbox is full",
                retry_after_s=1.0,
            )
        return placed

    def _record(self, placed: Placement, request_id: str) -> None:
        self.registry.on_routed(placed.node_id, request_id, placed.route.num_prompt_tokens, placed.route.max_tokens)
        self.policy.on_routed(placed.route, placed.node_id)

    # -- live migration ----------------------------------------------------------------------------

    def migrated(self, node_id: str, request_id: str, target_node_id: str, ok: bool, why: str) -> bool:
        """``node_id`` let ``request_id`` go (a MigrationDone; every chunk it produced there was relayed before
        it). ``ok``: its KV is on ``target_node_id``: resume it there (the target's prefix cache holds the KV,
        so it recomputes only the last partial block); else, or when the target cannot take it, resume it
        anywhere else by re-prefill. False when it was not in flight there (it finished, was cancelled)."""
        inflight = self.table.get(request_id)
        if inflight is None or inflight.node_id != node_id or not inflight.attached:
            return False
        self.table.detach(request_id)
        if ok and self._resume(inflight, only=target_node_id) is None:
            self.counters["migrated"] = self.counters.get("migrated", 0) + 1
            return True
        refusal = self._resume(inflight, also_exclude=(target_node_id,))  # the target failed: not there either
        if refusal is None or self._return_to(inflight, node_id):
            return True
        self.table.fail(request_id, ErrorCode.NODE_FAILED, f"{why}; it could not resume elsewhere: {refusal}")
        return False

    def _return_to(self, inflight: Inflight, node_id: str) -> bool:
        """Resume a detached request on ``node_id`` itself, bypassing the policy (a migration's source that is
        draining, when no other node can take the request: it finishes there). False when it cannot."""
        if node_id not in self.registry or inflight.msg is None:
            return False
        if inflight.num_output_tokens >= inflight.msg.sampling.max_tokens:
            return False
        msg = resumed_request(inflight.msg, inflight.model, inflight.prompt_token_ids, inflight.output_token_ids)
        lora_entry = self.loras.get(inflight.model) if self.loras is not None else None  # it keeps its adapter
        request = GenerateRequest(
            request_id=inflight.request_id,
            prompt_token_ids=msg.prompt_token_ids,
            sampling=msg.sampling,
            arrival_ns=inflight.arrival_ns,
            routed_ns=time.monotonic_ns(),
            priority=engine_priority(self._priority_of(inflight.traffic_class), msg.priority),  # its rank in the engine
            lora_name=None if lora_entry is None else lora_entry.lora.name,
            lora_path=None if lora_entry is None else lora_entry.lora.path,
            slo_tpot_s=self._slo_tpot_of(inflight.traffic_class),
            num_resumed_tokens=len(inflight.output_token_ids),
            trace_headers=forwarded_headers(msg, inflight.trace),
        )
        try:
            self._send_to_node(request, node_id)
        except MailboxFull:
            return False
        self.table.attach(inflight, node_id)
        self.registry.on_routed(node_id, inflight.request_id, len(msg.prompt_token_ids), msg.sampling.max_tokens)
        self.counters["resumed"] += 1
        log.info("request %s resumes on %s, the node it was migrating from", inflight.request_id, node_id)
        return True

    def _class_of(self, traffic_class: str):
        """The configured TrafficClass a request was admitted as; None: none (or no longer configured)."""
        try:
            return self.router.cells.resolve(traffic_class)
        except ValueError:
            return None

    def _slo_tpot_of(self, traffic_class: str) -> float:
        """The TPOT target a request admitted as ``traffic_class`` is routed by (its class's, else the router's)."""
        resolved = self._class_of(traffic_class)
        slo_tpot_s = None if resolved is None else resolved.slo_tpot_s
        return self.router.slo_tpot_s if slo_tpot_s is None else slo_tpot_s

    def _priority_of(self, traffic_class: str) -> int:
        """The engine priority of a request admitted as ``traffic_class`` (0: a class no longer configured)."""
        resolved = self._class_of(traffic_class)
        return 0 if resolved is None else resolved.priority
