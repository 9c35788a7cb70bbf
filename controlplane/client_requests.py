"""A ZeroMQ client's requests at the control plane: generate, cancel and ping, its long prompts tokenized off the loop.

The control plane tokenizes on its event loop, the loop that routes every request and relays every token; a long prompt
stalls it (452 ms for 900 kB of text with SmolLM2's tokenizer: controlplane/offload_tokenize.py). An in-process (HTTP)
request's long prompt is tokenized in a worker thread there. A ZeroMQ client's is too, here, and so is a request with
a constraint to compile (structured outputs: ~20 ms of llguidance for a 34 kB schema; the HTTP gateway compiles its
requests' in threads already)::

    ClientGenerate ─► prompt text >= min_chars ─► pending[request id] ─► TokenizeWorkers: a worker thread
                    │ or a constraint?                                     (a constraint compiled there too)
                    │                                                       ─► still pending? submit(msg, ids)
                    └─► shorter (or max_pending waiting already): submitted now, tokenized on the loop

A request that arrives while the fleet's idle sleep (controlplane/idle_sleep.py) has put every node to sleep is pending
too: the fleet is woken first, then it is tokenized and submitted, as an HTTP request waits for the wake. So is a
request refused for want of a node of a model the capacity plan holds at zero nodes (controlplane/cold_start.py): it
waits for a node of its model to join, then is submitted again, for at most ``cold_start_wait_s`` from its refusal
(past it, or when the control plane drains, the refusal goes to the client), as an HTTP request waits. Its refusals
are counted only if the last one goes to its client (one its client cancels while it waits counts as cancelled).

The client's messages are handled one by one, in order, on the loop. While a request waits for its tokens, it is
"pending", and the client sees it as in flight:

- a CancelRequest from its client drops it: it is never submitted, and nothing is sent (a cancel has no reply);
- a Ping lists it as known;
- another request with its id (from any client) is refused as in flight, as ``place_request`` refuses one;
- a control plane that shuts down refuses it as it refuses the requests in flight (NODE_FAILED), at once.

The ids, the truncation and the refusals are ``tokenize``'s (place_request takes them). At most ``max_pending``
requests wait at once (a cancelled one counts until its turn ends: cancelling does not lift the bound), tokenized by
the workers the HTTP path's long prompts share (``OFFLOAD_THREADS`` at once); one cancelled before its turn is not
tokenized. Beyond that a long prompt is tokenized on the loop as before, and the loop's stall is the sender's
backpressure. A failure while tokenizing or submitting refuses that request (INTERNAL) and leaves the worker running.
A request is submitted when its tokens are ready, so a short request sent after a long one may start first. Its
arrival time is its message's receive time, so the queue wait counts its tokenization.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import anyio

from controlplane.cold_start import HELD_RETRY_S, WaitsFull
from controlplane.offload_tokenize import TokenizeWorkers, off_the_loop
from controlplane.request_path import HeldRefusal
from controlplane.request_table import ZmqConsumer
from transport.actor import MailboxFull
from transport.dispatch import Incoming
from transport.messages import ClientGenerate, ErrorCode, ErrorReply, Ping, Pong

log = logging.getLogger(__name__)

SHUTTING_DOWN = "the control plane is shutting down"


@dataclass(slots=True)
class Pending:
    msg: ClientGenerate
    peer: bytes
    recv_ns: int
    refused: ErrorReply | None = None  # held for a node of ``model`` (controlplane/cold_start.py) after this refusal
    model: str = ""
    before: frozenset[str] = frozenset()  # the model's live nodes at its refusal: a node not among them is news
    deadline_s: float | None = None  # anyio time its wait for a node ends
    uncounted: HeldRefusal | None = None  # its last refusal for want of a node, not counted yet (RequestPath.submit)
    ids: object = None  # its prompt's tokens (or the PromptError), kept for its next try once tokenized


class ClientRequests:
    """The client socket's handlers for ClientGenerate, CancelRequest and Ping.

    ``submit(msg, consumer, arrival_ns, token_ids)``, ``cancel(request_id)``, ``count_refusal(reply)``: the control
    plane's; ``table``: its requests in flight (``get``); ``send(msg, peer)``: to a client; ``notify()``: after a
    submit from the worker (the control plane's "something changed"); ``started_ns``: told in every Pong."""

    def __init__(
        self,
        *,
        workers: TokenizeWorkers,
        min_chars: int,
        max_pending: int,
        link,
        submit: Callable,
        cancel: Callable[[str], bool],
        count_refusal: Callable[[ErrorReply], None],
        table,
        notify: Callable[[], None],
        started_ns: int,
        idle=None,
        cold_start=None,
        model_names: Callable[[], list[str]] = list,
    ) -> None:
        self.workers, self.min_chars, self.max_pending = workers, min_chars, max_pending
        self._link, self._submit, self._cancel, self._count_refusal = link, submit, cancel, count_refusal
        self._table, self._notify, self.started_ns = table, notify, started_ns
        self.idle = idle  # the fleet's idle sleep (controlplane/idle_sleep.py), or None: a request wakes it first
        self.cold_start = cold_start  # ColdStart (controlplane/cold_start.py), or None: refused at once at no node
        self.model_names = model_names  # the served models now (the first is the default)
        self.pending: dict[str, Pending] = {}  # request id -> its request, waiting for its tokens
        self.num_offloaded = 0  # requests whose prompt was tokenized off the loop
        self._num_jobs = 0  # queued or tokenizing, cancelled ones included (they hold their prompt until they end)
        self._jobs_in, self._jobs = anyio.create_memory_object_stream[Pending](math.inf)

    # -- the handlers (on the loop) ----------------------------------------------------------------

    def on_generate(self, incoming: Incoming) -> None:
        msg: ClientGenerate = incoming.msg
        if msg.tenant:  # a tenant is the gateway's to name (from an API key): a ZeroMQ client cannot claim one
            msg.tenant = ""
        rid = msg.request_id
        if rid in self.pending:
            message = f"request id {rid!r} is already in flight"  # as place_request says it
            reply = ErrorReply(request_id=rid, code=ErrorCode.INVALID_REQUEST, message=message)
            self._count_refusal(reply)
            self._link.send_nowait(reply, incoming.peer)
            return
        asleep = self.idle is not None and bool(self.idle.auto_slept)  # pending while the fleet wakes
        if rid and self._num_jobs < self.max_pending and (asleep or off_the_loop(msg, self.min_chars)):
            pending = self.pending[rid] = Pending(msg, incoming.peer, incoming.recv_ns)
            self._num_jobs += 1
            self._jobs_in.send_nowait(pending)
            return
        job = Pending(msg, incoming.peer, incoming.recv_ns)
        holdable = bool(rid) and self._num_jobs < self.max_pending and self.cold_start is not None
        error = self._submit_job(job, None, holdable)
        if error is None:
            return
        if holdable and self._hold(job, error):  # waits for a node of its model
            self.pending[rid] = job
            self._num_jobs += 1
            self._jobs_in.send_nowait(job)
            return
        self._settle(job, refused=True)
        self._link.send_nowait(error, incoming.peer)

    def on_cancel(self, incoming: Incoming) -> None:
        rid = incoming.msg.request_id
        pending = self.pending.get(rid)
        if pending is not None:
            if pending.peer == incoming.peer:
                del self.pending[rid]  # its tokens, when ready, are dropped
            return
        inflight = self._table.get(rid)
        if inflight is not None and getattr(inflight.consumer, "peer", None) == incoming.peer:
            self._cancel(inflight.request_id)

    def on_ping(self, incoming: Incoming) -> None:
        """Pong, naming the client's requests (of ``msg.request_ids``) that are not in flight here (nor pending)."""
        msg: Ping = incoming.msg
        unknown = []
        for request_id in msg.request_ids:
            pending = self.pending.get(request_id)
            if pending is not None and pending.peer == incoming.peer:
                continue
            inflight = self._table.get(request_id)
            if inflight is None or getattr(inflight.consumer, "peer", None) != incoming.peer:
                unknown.append(request_id)
        pong = Pong(
            request_id=msg.request_id,
            payload=msg.payload,
            ping_sent_ns=msg.sent_ns,
            unknown_request_ids=unknown,
            started_ns=self.started_ns,
        )
        self._link.send_nowait(pong, incoming.peer)

    def shut_down(self) -> None:
        """Refuse every pending request (the control plane stops), as the requests in flight are."""
        pending, self.pending = self.pending, {}
        for job in pending.values():
            reply = ErrorReply(request_id=job.msg.request_id, code=ErrorCode.NODE_FAILED, message=SHUTTING_DOWN)
            self._send(reply, job.peer)

    # -- the worker (a loop of the control plane) ---------------------------------------------------

    async def serve(self) -> None:
        """Tokenize each pending request in a worker thread (the workers' turn), then submit it."""
        async with anyio.create_task_group() as tg:
            async for job in self._jobs:
                tg.start_soon(self._tokenize, job)

    async def _tokenize(self, job: Pending) -> None:
        rid, error = job.msg.request_id, None
        try:
            if self.idle is not None:  # an idle sleep's fleet woken first (the request waits, as an HTTP one does)
                await self.idle.wake_for_request()
            error = await self._prepare_and_submit(job)
        except Exception:  # a tokenizer's or the path's bug: this request is refused, the worker and the loop go on
            log.exception("request %s: tokenizing or submitting it failed", rid)
            if self.pending.get(rid) is job:
                del self.pending[rid]
            error = ErrorReply(request_id=rid, code=ErrorCode.INTERNAL, message="internal error")
        finally:
            self._num_jobs -= 1
        if error is not None:
            self._send(error, job.peer)
        self._notify()

    async def _prepare_and_submit(self, job: Pending) -> ErrorReply | None:
        """Tokenize ``job`` in a worker thread, then submit it; a held one waits for a node of its model first, and
        again while it is refused for want of one (``_hold``). Its refusal, or None: submitted, or cancelled (or
        refused at shutdown) meanwhile, with nothing left to send."""
        rid = job.msg.request_id
        while True:
            if job.refused is not None:  # waits for a node of its model (controlplane/cold_start.py)
                refused, job.refused = job.refused, None
                if not await self._node_joined(job, refused):
                    if self.pending.get(rid) is not job:
                        self._settle(job, refused=False)
                        return None  # cancelled meanwhile
                    del self.pending[rid]
                    self._settle(job, refused=True)
                    return refused  # past its wait, or the control plane drains: its refusal stands
            # cancelled (or refused at shutdown) before its turn: not tokenized (None)
            ids = job.ids
            if ids is None:
                ids = job.ids = await self.workers.tokenize(job.msg, lambda: self.pending.get(rid) is job)
                self.num_offloaded += ids is not None
            if ids is None or self.pending.get(rid) is not job:
                self._settle(job, refused=False)
                return None
            del self.pending[rid]
            error = self._submit_job(job, ids, self.cold_start is not None, again=job.deadline_s is not None)
            if error is None or not self._hold(job, error):
                self._settle(job, refused=True)
                return error
            self.pending[rid] = job  # refused again (say a node of another cell joined): waits again

    def _submit_job(self, job: Pending, token_ids, holdable: bool, again: bool = False) -> ErrorReply | None:
        """Submit ``job`` (``token_ids``: its prompt's, or None: tokenized on the loop); ``holdable``: a refusal for
        want of a node is not counted yet (``job.uncounted``), for it may be held (``_hold``) and served; ``again``: a
        held one tried again (RequestPath.submit's ``again``)."""
        job.uncounted, consumer = None, ZmqConsumer(self._link, job.peer)
        if not holdable:
            return self._submit(job.msg, consumer, job.recv_ns, token_ids)
        held = lambda r: setattr(job, "uncounted", r)  # noqa: E731
        return self._submit(job.msg, consumer, job.recv_ns, token_ids, held=held, again=again)

    def _settle(self, job: Pending, refused: bool) -> None:
        """``job``'s wait ended unserved: its last refusal, if not counted yet, counted as one (``refused``: told to
        its client) or as a cancel (its client cancelled it, or the control plane shut down, while it waited)."""
        if job.uncounted is not None:
            self.cold_start.path.settle_held(job.uncounted, refused)
            job.uncounted = None

    def _hold(self, job: Pending, refused: ErrorReply) -> bool:
        """Whether ``job``, refused, waits for a node of its model: a refusal for want of a node, of a model the
        capacity plan holds at zero nodes or declares, with time left of its wait (``cold_start_wait_s`` from its first
        refusal), while the control plane does not drain."""
        cold = self.cold_start
        if cold is None or job.uncounted is None:  # not a refusal for want of a node (RequestPath.submit's held)
            return False
        if job.deadline_s is None:
            job.model, wait_s = cold.wait_s(job.msg.model, self.model_names())
            job.deadline_s = anyio.current_time() + wait_s
        if job.deadline_s <= anyio.current_time() or cold.path.draining:
            return False
        job.refused, job.before = refused, cold.live(job.model)
        return True

    async def _node_joined(self, job: Pending, refused: ErrorReply) -> bool:
        """Whether to try the held ``job`` again: a node of its model joined within its wait, or (``refused`` for its
        pool's full queues) ``HELD_RETRY_S`` passed (False: past its wait, cancelled meanwhile, the control plane
        drains, or ``cold_start_max_waiting`` wait already)."""
        rid, left_s = job.msg.request_id, job.deadline_s - anyio.current_time()
        full = refused.code is not ErrorCode.NO_NODE
        wait_s = min(left_s, HELD_RETRY_S) if full else left_s
        try:
            await self.cold_start.wait_for_join(job.model, job.before, wait_s, lambda: self.pending.get(rid) is not job)
        except WaitsFull:
            return False
        except TimeoutError:
            if not full or wait_s >= left_s:
                return False
        return self.pending.get(rid) is job and not self.cold_start.path.draining

    def _send(self, msg: ErrorReply, peer: bytes) -> None:
        try:
            self._link.send_nowait(msg, peer)
        except MailboxFull:
            log.warning("could not tell a client of %s: its outbox is full", msg.request_id)
