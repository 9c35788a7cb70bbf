"""Background responses: OpenAI's background mode of the Responses API (``POST /v1/responses`` with
``background: true``), which vLLM serves too (vllm/entrypoints/openai/serving_responses.py, v0.11:
``_run_background_request``, ``retrieve_responses``, ``cancel_responses``).

    POST /v1/responses {background: true}   answered at once: the response, ``queued``; the generation runs here,
                                            in the gateway's task group, so a client that goes away loses nothing
                                            (with ``stream: true`` the reply is its events, live, from the first)
    GET /v1/responses/{id}                  its object now: queued (waiting for its first token), in_progress,
                                            then completed, incomplete, failed (with its error) or cancelled
    GET ...?stream=true&starting_after=N    a response created with ``stream: true``: its events after sequence
                                            number N, then live until it ends (OpenAI's resumable stream)
    POST /v1/responses/{id}/cancel          a queued or running one stops (its request cancelled upstream) and is
                                            ``cancelled``; an already cancelled one is returned as it is; one that
                                            finished, or was not a background one, is a 400
    DELETE /v1/responses/{id}               a running one is cancelled, then deleted

A running response is held here, outside the ResponseStore's bounds (it cannot be evicted before it ends); once it
ends its object, whatever its status, goes to the store under its owner, and a later request's
``previous_response_id`` continues it if it finished. At most ``max_running`` run at once, and
``max_running_per_owner`` of one owner's (past either: 429 with a Retry-After). The events of the last
``max_running`` streamed ones that ended, within ``max_ended_bytes``, are kept for a resumed stream (a running one's
are kept whole: its subscribers read them). A response the gateway stops before it ends (the drain's time ran out)
is neither kept nor ended: with ``--files-dir`` its record (gateway/background_journal.py) makes a restarted gateway
run it again (gateway/responses_routes.py); without, a restart forgets it, as it forgets the store.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field

import anyio

from controlplane.frontend import FrontendError
from controlplane.gateway.reply_stream import close_stream, next_chunk
from controlplane.gateway.responses_reply import ResponsesReply
from transport.messages import ErrorCode, TokenChunk

log = logging.getLogger(__name__)

TERMINAL = ("completed", "incomplete", "failed", "cancelled")


@dataclass(eq=False)
class BackgroundJob:
    """One background response: its reply (the object and events), its generation's chunks, its events so far."""

    owner: str | None
    reply: ResponsesReply
    chunks: AsyncIterator[TokenChunk]
    streamed: bool  # created with stream: true (its events are kept for a resumed stream)
    input_items: tuple[dict, ...] = ()
    events: list[bytes] = field(default_factory=list)
    num_event_bytes: int = 0
    done: bool = False
    deleted: bool = False  # DELETE while it ran: neither kept nor found once it ends
    scope: anyio.CancelScope | None = None  # set while it runs
    _changed: anyio.Event = field(default_factory=anyio.Event)

    @property
    def status(self) -> str:
        return self.reply.current_status()

    def append(self, events: list[bytes]) -> None:
        if events:
            self.events += events
            self.num_event_bytes += sum(len(e) for e in events)
            self._wake()

    def finish(self) -> None:
        self.done = True
        self._wake()

    def _wake(self) -> None:
        changed, self._changed = self._changed, anyio.Event()
        changed.set()


class BackgroundResponses:
    """The gateway's background responses. ``keep(owner, object, conversation, input_items)``: the ResponseStore's
    put, called once each ends."""

    def __init__(
        self,
        keep: Callable[..., object],
        max_running: int,
        max_ended_bytes: int = 64 * 1024 * 1024,
        max_running_per_owner: int | None = None,
        on_end: Callable[[BackgroundJob], object] | None = None,
    ) -> None:
        per_owner = max_running if max_running_per_owner is None else max_running_per_owner
        if max_running < 1 or max_ended_bytes < 0 or per_owner < 1:
            raise ValueError(
                f"max_running and max_running_per_owner must be >= 1, max_ended_bytes >= 0, got {max_running}, "
                f"{per_owner}, {max_ended_bytes}"
            )
        self.keep = keep
        self.on_end = on_end  # called once a response has ended (not when the gateway stopped it first)
        self.started = anyio.Event()  # set once ``run`` takes responses
        self.max_running = max_running
        self.max_running_per_owner = per_owner
        self.max_ended_bytes = max_ended_bytes
        self._ended_bytes = 0
        self._running: dict[tuple[str | None, str], BackgroundJob] = {}
        self._ended: OrderedDict[tuple[str | None, str], BackgroundJob] = OrderedDict()  # streamed ones, for resuming
        self._send, self._receive = anyio.create_memory_object_stream[BackgroundJob](math.inf)
        self.running = False
        self.ended = dict.fromkeys(TERMINAL, 0)  # by status, since start (for /metrics)
        self.num_resumed = 0  # run again after a restart (``submit(admitted=True)``), since start
        self.journal = None  # the running ones' records on disk (gateway/background_journal.py), set by the routes

    @property
    def num_running(self) -> int:
        return len(self._running)

    async def run(self) -> None:
        """Runs every submitted response until cancelled (serve_gateway's task group, or the app's lifespan)."""
        self.running = True
        self.started.set()
        try:
            async with anyio.create_task_group() as tg:
                async for job in self._receive:
                    tg.start_soon(self._run_job, job)
        finally:
            self.running = False

    def submit(self, job: BackgroundJob, admitted: bool = False) -> None:
        """Start a response (its reply ``queued``, its created event sent); 503 when the runner is not running, 429
        past ``max_running`` (``admitted``: one accepted before a restart, run again whatever the bounds)."""
        if not self.running:
            message = "Background responses are not running (the app's lifespan was not run)"
            raise FrontendError(ErrorCode.NO_NODE, message)
        if not admitted and len(self._running) >= self.max_running:
            message = f"{len(self._running)} background responses are running, the most this gateway runs: try later"
            raise FrontendError(ErrorCode.OVERLOADED, message, retry_after_s=5.0)
        owned = sum(owner == job.owner for owner, _ in self._running)
        if not admitted and owned >= self.max_running_per_owner:
            message = f"You have {owned} background responses running, the most one owner may run at once: try later"
            raise FrontendError(ErrorCode.OVERLOADED, message, retry_after_s=5.0)
        self.num_resumed += admitted
        job.reply.status = "queued"
        job.append([job.reply.created_event()])
        self._running[(job.owner, job.reply.id)] = job
        self._send.send_nowait(job)

    def get(self, owner: str | None, response_id: str) -> BackgroundJob | None:
        """A running response, or an ended streamed one whose events are still kept (a deleted one: None)."""
        key = (owner, response_id)
        job = self._running.get(key) or self._ended.get(key)
        return None if job is None or job.deleted else job

    def cancel(self, owner: str | None, response_id: str) -> dict | None:
        """Cancel a running response: its object, now cancelled (None: no such running response)."""
        job = self._running.get((owner, response_id))
        if job is None:
            return None
        if job.status not in TERMINAL:
            job.reply.status = "cancelled"
            if job.scope is not None:
                job.scope.cancel()
        return job.reply.full_object()

    def delete(self, owner: str | None, response_id: str) -> bool:
        """DELETE: a running response is cancelled and, once it ends, kept nowhere; an ended one's events are
        dropped. False: no such response here."""
        key = (owner, response_id)
        job = self._running.get(key)
        if job is not None and not job.deleted:
            self.cancel(owner, response_id)
            job.deleted = True
            return True
        job = self._ended.pop(key, None)
        if job is not None:
            self._ended_bytes -= job.num_event_bytes
            return True
        return False

    async def events(self, job: BackgroundJob, starting_after: int | None = None) -> AsyncGenerator[bytes, None]:
        """The job's events after sequence number ``starting_after`` (all: None), then each as it comes, until it
        ends; the subscriber going away stops only this generator."""
        i = 0 if starting_after is None else starting_after + 1
        while True:
            changed = job._changed
            while i < len(job.events):
                yield job.events[i]
                i += 1
            if job.done:
                return
            await changed.wait()

    async def _run_job(self, job: BackgroundJob) -> None:
        reply = job.reply
        try:
            with anyio.CancelScope() as job.scope:
                if reply.status == "cancelled":  # cancelled before it started
                    return
                try:
                    first = await next_chunk(job.chunks)
                    reply.status = None  # in progress, then what its chunks make it
                    job.append([reply.in_progress_event()])
                    chunk = first
                    while True:
                        job.append(reply.chunk_events(chunk))
                        if reply.finished:
                            break
                        chunk = await next_chunk(job.chunks)
                except FrontendError as err:
                    if reply.status != "cancelled":
                        job.append(reply.failure_events(err))
                except Exception:
                    log.exception("gateway: background response %s failed", reply.id)
                    job.append(reply.failure_events(FrontendError(ErrorCode.INTERNAL, "Internal server error")))
        finally:
            await close_stream(job.chunks)
            self._end(job)

    def _end(self, job: BackgroundJob) -> None:
        reply = job.reply
        key = (job.owner, reply.id)
        self._running.pop(key, None)
        obj = reply.full_object()
        if obj["status"] not in TERMINAL and not job.deleted:  # the gateway is stopping: it has not ended
            log.info("gateway: background response %s stopped %s, before it ended", reply.id, obj["status"])
            job.finish()
            return
        if self.on_end is not None:
            self.on_end(job)
        self.ended[obj["status"]] = self.ended.get(obj["status"], 0) + 1
        conversation = reply.conversation_after() if reply.finished else reply.parsed.conversation
        if not job.deleted:
            self.keep(job.owner, obj, conversation, job.input_items)
        if job.streamed and not job.deleted:
            self._ended[key] = job
            self._ended_bytes += job.num_event_bytes
            while len(self._ended) > self.max_running or self._ended_bytes > self.max_ended_bytes:
                _, dropped = self._ended.popitem(last=False)
                self._ended_bytes -= dropped.num_event_bytes
        job.finish()
