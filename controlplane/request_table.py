"""The requests in flight at the control plane: which node serves each, who consumes its chunks, its timings.

    routed ──► add(Inflight) ──► relay(chunk) … relay(chunk, finished) ──► completed, latency recorded
                    ├─ cancel(): client cancelled, iterator closed, consumer gone ──► CancelRequest to the node
                    ├─ detach() … attach(other node): its node was lost / unreachable / refused it, and it
                    │     resumes elsewhere (controlplane/request_path.py); the consumer sees one stream
                    └─ fail():   node lost and nowhere to resume, node error ──► ErrorReply to the consumer

A consumer is where a request's TokenChunks and its ErrorReply go: a ZeroMQ client (ZmqConsumer: the
client Link's outbox) or an in-process ``generate`` iterator (LocalConsumer: a memory stream). ``deliver``
never blocks; it raises MailboxFull when the consumer is gone or behind, and the request is cancelled.

Every request leaves the table exactly once (completed, cancelled or failed). The registry and the policy
hear ``on_first_token`` and ``on_finished`` once per node a request was on (a detach finishes it on the
node it leaves), so their in-flight accounting stays exact. No I/O of its own: CancelRequests go out
through the ``send_to_node`` callable the actor gives it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field

import anyio
from anyio.streams.memory import MemoryObjectSendStream

from controlplane.frontend import FrontendError
from controlplane.node_latency import NodeLatency
from controlplane.request_spans import RequestTrace
from controlplane.router.policy import Policy, PolicyHooks
from transport.actor import MailboxFull
from transport.link import Link
from transport.messages import CancelRequest, ClientGenerate, Envelope, ErrorCode, ErrorReply, TokenChunk

log = logging.getLogger(__name__)

TIMED_OUT = "timed out waiting for the node"  # an in-process request's failure when no chunk came for too long


class ZmqConsumer:
    __slots__ = ("link", "peer")

    def __init__(self, link: Link, peer: bytes) -> None:
        self.link = link
        self.peer = peer

    def deliver(self, msg: TokenChunk | ErrorReply) -> None:
        self.link.send_nowait(msg, self.peer)  # MailboxFull → the caller cancels the request


class LocalConsumer:
    __slots__ = ("stream",)

    def __init__(self, stream: MemoryObjectSendStream) -> None:
        self.stream = stream

    def deliver(self, msg: TokenChunk | ErrorReply) -> None:
        try:
            self.stream.send_nowait(msg)
        except (anyio.WouldBlock, anyio.BrokenResourceError, anyio.ClosedResourceError):
            raise MailboxFull("consumer gone or behind") from None


async def local_stream(
    msg: ClientGenerate | list[ClientGenerate],
    submit: Callable[[ClientGenerate, LocalConsumer, int], ErrorReply | None],
    cancel: Callable[[str], bool],
    open_streams: set[str] | None = None,
    arrival_ns: int | None = None,
) -> AsyncIterator[TokenChunk]:
    """An in-process request (``ControlPlane.generate``): submit it with a LocalConsumer, then yield its chunks
    until the finished one. FrontendError when it is refused or fails (also when no chunk came for too long:
    ``RequestTable.time_out_silent`` fails it); leaving early (closed, cancelled) cancels it on its node.
    ``open_streams``: holds the request id while the stream is open (a shutdown waits for it to empty).
    ``arrival_ns``: when it arrived (``time.monotonic_ns()`` at the gateway; None: now).

    A list of messages is one request of several choices (OpenAI's ``n``): each is its own engine request with
    its own id, all deliver to one stream, chunks come interleaved (``chunk.request_id`` tells them apart) until
    every one has finished; any refusal or failure fails them all (the others are cancelled)."""
    msgs = msg if isinstance(msg, list) else [msg]
    arrival_ns = time.monotonic_ns() if arrival_ns is None else arrival_ns
    # room for every chunk the requests can produce: the node's chunks never wait on this consumer
    capacity = sum(max(1, m.sampling.max_tokens) + 2 for m in msgs)
    send, receive = anyio.create_memory_object_stream[TokenChunk | ErrorReply](capacity)
    consumer = LocalConsumer(send)
    unfinished: list[str] = []
    for m in msgs:
        error = submit(m, consumer, arrival_ns)
        if error is not None:
            for request_id in unfinished:
                cancel(request_id)
            send.close()
            receive.close()
            raise FrontendError(error.code, error.message, error.retry_after_s, error.param)
        unfinished.append(m.request_id)
    if open_streams is not None:
        open_streams.update(unfinished)
    try:
        with receive:
            while unfinished:
                item = await receive.receive()  # no timeout scope per chunk: time_out_silent watches them all
                if isinstance(item, ErrorReply):
                    if item.request_id in unfinished:
                        unfinished.remove(item.request_id)
                    raise FrontendError(item.code, item.message, item.retry_after_s)
                if item.finished and item.request_id in unfinished:
                    unfinished.remove(item.request_id)
                yield item
    finally:
        for m in msgs:
            if open_streams is not None:
                open_streams.discard(m.request_id)
        for request_id in unfinished:
            cancel(request_id)


@dataclass(slots=True)
class Inflight:
    """One request in flight. Counts are its client's: across resumes ``num_output_tokens`` keeps counting
    and ``num_prompt_tokens`` stays the original prompt's.

    node_id: the node serving it now (the last one while detached).
    msg / model / prompt_token_ids: what a resume needs (the request as received, the model it is served
        as, its prompt's tokens); output_token_ids: the tokens relayed to the consumer so far.
    num_resumes: how many times it moved to another node; output_offset: output tokens produced before
        the current node took it (that node counts its own from 0).
    attached: the registry and the policy count it on ``node_id`` (False between detach and attach).
    prefilled: the current node has sent its first token.
    """

    request_id: str
    node_id: str
    consumer: ZmqConsumer | LocalConsumer
    arrival_ns: int
    num_prompt_tokens: int
    first_token_ns: int = 0
    last_token_ns: int = 0
    num_output_tokens: int = 0
    msg: ClientGenerate | None = None
    model: str = ""
    prompt_token_ids: list[int] = field(default_factory=list)
    output_token_ids: list[int] = field(default_factory=list)
    num_resumes: int = 0
    output_offset: int = 0
    attached: bool = True
    prefilled: bool = False
    traffic_class: str = "default"  # the class it was placed as (controlplane/cells.py)
    trace: RequestTrace | None = None  # its span while in flight (controlplane/request_spans.py); None: not traced
    prompt_ids_relayed: bool = False  # its first chunk named its prompt's tokens (ClientGenerate asked)
    last_chunk_ns: int = 0  # when its last chunk came, else when it was routed (0: its arrival), ``time_out_silent``


class RequestTable:
    """Requests in flight by id, with the control plane's request counters and per-node latency records.

    registry: the ClusterRegistry (told ``on_first_token`` / ``on_finished``).
    send_to_node(msg, node_id): queue a message to a node; raises MailboxFull when the outbox is full.
    policy: the routing policy, told ``on_first_token`` / ``on_finished`` too (None: no policy to tell).
    counters: routed / resumed / completed / failed / cancelled / refused; this table counts completed,
        failed and cancelled, the caller routed, resumed and refused (it decides those).
    latency: node id → NodeLatency of the requests that ended there.
    on_done(inflight, outcome): called once per request as it leaves the table ("completed", "cancelled",
        "failed"), for per-class and per-tenant books (request_path.py).
    """

    def __init__(
        self,
        registry,
        send_to_node: Callable[[Envelope, str], None],
        policy: Policy | None = None,
        on_done: Callable[[Inflight, str], None] | None = None,
    ) -> None:
        self.on_done = on_done
        self.registry = registry
        self._send_to_node = send_to_node
        self.policy = policy if policy is not None else PolicyHooks()
        self._requests: dict[str, Inflight] = {}
        self.counters: dict[str, int] = {
            "routed": 0,
            "resumed": 0,
            "completed": 0,
            "failed": 0,
            "cancelled": 0,
            "refused": 0,
        }
        self.latency: dict[str, NodeLatency] = {}

    def __len__(self) -> int:
        return len(self._requests)

    def __contains__(self, request_id: object) -> bool:
        return request_id in self._requests

    def get(self, request_id: str) -> Inflight | None:
        return self._requests.get(request_id)

    def add(self, inflight: Inflight) -> None:
        self._requests[inflight.request_id] = inflight

    def detach(self, request_id: str) -> Inflight | None:
        """Take a request off its node (lost, unreachable, or it refused the request) so that it can resume
        on another; it stays in the table. None when it is not in flight."""
        inflight = self._requests.get(request_id)
        if inflight is not None:
            self._finished_on_node(inflight)
        return inflight

    def attach(self, inflight: Inflight, node_id: str) -> None:
        """A detached request was sent to ``node_id``; its chunks come from there now (counted from 0 there)."""
        inflight.node_id = node_id
        inflight.num_resumes += 1
        inflight.output_offset = inflight.num_output_tokens
        inflight.attached = True
        inflight.prefilled = False

    def _finished_on_node(self, inflight: Inflight) -> None:
        if inflight.attached:
            inflight.attached = False
            self.registry.on_finished(inflight.node_id, inflight.request_id)
            self.policy.on_finished(inflight.request_id, inflight.node_id)

    def relay(self, inflight: Inflight, chunk: TokenChunk, recv_ns: int) -> None:
        """A chunk from the node serving ``inflight``, received at ``recv_ns``: update the request's token
        timings, retire it when the chunk is its last, and pass the chunk on to its consumer (with the
        client's counts when the request resumed: the node counts its own prompt and output)."""
        node_id = inflight.node_id
        inflight.last_chunk_ns = recv_ns
        if chunk.token_ids:
            if not inflight.first_token_ns:
                inflight.first_token_ns = recv_ns
            if not inflight.prefilled:
                inflight.prefilled = True
                self.registry.on_first_token(node_id, chunk.request_id)
                self.policy.on_first_token(chunk.request_id, node_id)
            inflight.last_token_ns = recv_ns
            inflight.num_output_tokens += len(chunk.token_ids)
            if inflight.msg is not None:
                inflight.output_token_ids += chunk.token_ids
        if inflight.num_resumes:
            chunk.num_prompt_tokens = inflight.num_prompt_tokens
            chunk.num_output_tokens += inflight.output_offset
        chunk.node_id = node_id
        if not inflight.prompt_ids_relayed and inflight.msg is not None and inflight.msg.return_prompt_token_ids:
            chunk.prompt_token_ids = inflight.prompt_token_ids  # the prompt as served (truncated, rendered), once
            inflight.prompt_ids_relayed = True
        if chunk.finished:
            del self._requests[chunk.request_id]
            self._finished_on_node(inflight)
            self.counters["completed"] += 1
            self.latency.setdefault(node_id, NodeLatency()).record_served(
                inflight.arrival_ns, inflight.first_token_ns, inflight.last_token_ns, inflight.num_output_tokens
            )
            if self.on_done is not None:
                self.on_done(inflight, "completed")
        try:
            inflight.consumer.deliver(chunk)
        except MailboxFull:
            if not chunk.finished:
                self.cancel(chunk.request_id)

    def cancel(self, request_id: str) -> bool:
        """Forget a request and tell its node to stop; False when it was not in flight."""
        inflight = self._requests.pop(request_id, None)
        if inflight is None:
            return False
        attached = inflight.attached
        self._finished_on_node(inflight)
        self.counters["cancelled"] += 1
        if self.on_done is not None:
            self.on_done(inflight, "cancelled")
        if attached:
            try:
                self._send_to_node(CancelRequest(request_id=request_id), inflight.node_id)
            except MailboxFull:
                log.warning("could not send a CancelRequest for %s: agent outbox full", request_id)
        return True

    def fail(self, request_id: str, code: ErrorCode, message: str) -> None:
        """Forget a request and tell its consumer why (no-op when it is not in flight)."""
        inflight = self._requests.pop(request_id, None)
        if inflight is None:
            return
        self._finished_on_node(inflight)
        self.counters["failed"] += 1
        self.latency.setdefault(inflight.node_id, NodeLatency()).num_failed += 1
        if self.on_done is not None:
            self.on_done(inflight, "failed")
        try:
            inflight.consumer.deliver(ErrorReply(request_id=request_id, code=code, message=message))
        except MailboxFull:
            log.debug("the consumer of %s is gone", request_id)

    def time_out_silent(self, now_ns: int, timeout_s: float) -> list[str]:
        """Fail the in-process requests (a LocalConsumer's: a ZeroMQ client keeps its own timeout) that got no chunk
        for ``timeout_s`` (since their last chunk, else their routing; ``now_ns``: time.monotonic_ns()), and stop them
        on their node; their ids. One pass over the table, from the control plane's expiry loop, replaces a timeout
        scope around every chunk's wait (~10 µs of CPU a token)."""
        limit_ns = now_ns - int(timeout_s * 1e9)
        silent = [
            inflight
            for inflight in self._requests.values()
            if inflight.consumer.__class__ is LocalConsumer
            and (inflight.last_chunk_ns or inflight.arrival_ns) < limit_ns
        ]
        for inflight in silent:
            attached = inflight.attached
            self.fail(inflight.request_id, ErrorCode.INTERNAL, TIMED_OUT)
            if attached:
                try:
                    self._send_to_node(CancelRequest(request_id=inflight.request_id), inflight.node_id)
                except MailboxFull:
                    log.warning("could not send a CancelRequest for %s: agent outbox full", inflight.request_id)
        return [inflight.request_id for inflight in silent]

    def fail_all(self, code: ErrorCode, message: str) -> None:
        for request_id in list(self._requests):
            self.fail(request_id, code, message)
