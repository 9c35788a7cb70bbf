"""Runs OpenAI batches (gateway/batches.py) inside the gateway: each request of a batch goes through the very route
it names, in process, as if a client had sent it with the batch creator's API key. Anthropic's message batches
(gateway/message_batches.py) are batches of /v1/messages requests, run here the same way.

    POST /v1/batches ─► BatchRunner.submit ─► run() (serve_gateway's task group, or the app's lifespan)
        a worker thread reads and checks the input file ─► failed, or in_progress:
        line ─► (limiter: at most ``concurrency`` requests in flight over every batch) ─► the route's ASGI app
              ─► 2xx: the output file;  4xx/5xx: the error file
              ─► 429 / 502 / 503: sent again after Retry-After (else a doubling back-off, 0.5 s to 30 s by default),
                 at most ``max_retries`` times: an overloaded or restarting fleet delays a batch, it does not
                 fail it
              (while the control plane drains for its shutdown no request is sent, nor sent again: ``draining``)
        all answered ─► finalizing ─► completed;   cancel ─► cancelling ─► cancelled;   window ─► expired

Going through the route keeps one behaviour for a request whoever sends it: the same parsing, refusals, reply body
and usage, the same admission, tenant limits and metrics. A batch's requests run in ``traffic_class`` when one is
configured (a low-priority class such as cells.py's "batch": priority 0 yields to interactive traffic inside an
engine, and its cell may be the fleet's lean GPUs); otherwise as the request would run on its own. Either way a
line that names no ``priority`` (vLLM's: lower runs earlier) gets ``priority`` (1): inside its class it runs after
live requests, which swap it out when a node is full, so a batch fills the fleet's idle time without holding up
interactive traffic (a line that names a ``service_tier`` gets that tier's). A request with ``"stream": true`` is
answered 400 (a batch line has no stream to send).

Cancelling, or the window closing, cancels the requests in flight (their engine requests are cancelled upstream,
as a client's disconnect cancels them); what finished is kept: its lines are in the output and error files. A
request the window left unrun gets an error line with code ``batch_expired`` (OpenAI's rule). Without a journal
batches live in memory, and a gateway restart forgets them as it forgets files; with one (``--files-dir``:
batch_journal.py) each answered request is written down as it finishes, and a restarted gateway resumes every
batch that had not finished, running only the requests it lacks.
"""

from __future__ import annotations

import logging
import math
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import anyio
import msgspec
from starlette.types import ASGIApp, Message

from controlplane.frontend import FrontendError
from controlplane.gateway.batch_journal import BatchJournal
from controlplane.gateway.batch_span import BatchSpans
from controlplane.gateway.batches import (
    TERMINAL,
    Batch,
    BatchLine,
    add_usage,
    batch_model,
    output_line,
    read_lines,
)
from controlplane.gateway.errors import error_body
from controlplane.gateway.file_store import OUTPUT_PURPOSE, FileStore
from controlplane.gateway.request_body import replayed_body
from transport.messages import ErrorCode

log = logging.getLogger(__name__)

DRAIN_POLL_S = 0.25  # how often a held request looks whether the drain has stopped
RETRIED_STATUSES = frozenset({429, 502, 503})  # overload, a node lost mid-request, no node (yet)
CLASS_HEADER = b"x-zoo-class"


@dataclass(frozen=True, slots=True)
class BatchRunnerConfig:
    concurrency: int = 32  # requests in flight at once, over every batch
    max_retries: int = 8  # a 429/502/503 request is sent again at most this many times
    backoff_s: float = 0.5  # the first wait before sending again, when the reply names none (then doubled)
    max_backoff_s: float = 30.0  # the longest wait (a named Retry-After too)
    max_requests: int = 50_000  # in one batch (OpenAI's limit)
    max_active: int = 64  # batches not yet finished (more: 429)
    max_active_per_owner: int = 16  # of them, one owner's (an API key's tenant, or the key)
    max_batches: int = 1024  # batches kept, finished ones dropped oldest first
    window_s: float | None = None  # how long a batch may run (None: its completion_window, 24 h)
    traffic_class: str | None = None  # the traffic class its requests run in (None: their own)
    priority: int = 1  # vLLM's priority of a line that names none (lower runs earlier: 1 is after live requests' 0)

    def __post_init__(self) -> None:
        for name in ("concurrency", "max_requests", "max_active", "max_active_per_owner", "max_batches"):
            if getattr(self, name) < 1:
                raise ValueError(f"BatchRunnerConfig.{name} must be >= 1, got {getattr(self, name)}")
        if self.max_retries < 0:
            raise ValueError(f"BatchRunnerConfig.max_retries must be >= 0, got {self.max_retries}")
        if not 0 <= self.backoff_s <= self.max_backoff_s < math.inf:
            raise ValueError(f"BatchRunnerConfig needs 0 <= backoff_s <= max_backoff_s < inf, got {self}")
        if self.window_s is not None and not 0 < self.window_s < math.inf:
            raise ValueError(f"BatchRunnerConfig.window_s must be > 0 and finite, got {self.window_s}")


class _Stream(msgspec.Struct):
    stream: bool | None = None


_STREAM_DECODER = msgspec.json.Decoder(_Stream)


@dataclass(slots=True)
class _Result:
    status: int | None
    request_id: str | None
    body: object
    error: dict | None = None


class BatchRunner:
    """The batches of one gateway. ``app``: the routes a batch's requests go to (gateway/app.py's batch routes)."""

    def __init__(
        self, app: ASGIApp, files: FileStore, config: BatchRunnerConfig, journal: BatchJournal | None = None
    ) -> None:
        self.app = app
        self.files = files
        self.config = config
        self.journal = journal  # None: batches live in memory only
        self._batches: OrderedDict[tuple[str | None, str], Batch] = OrderedDict()
        self._limiter = anyio.CapacityLimiter(config.concurrency)
        self._send, self._receive = anyio.create_memory_object_stream[tuple[Batch, dict]](math.inf)
        self._scopes: dict[str, anyio.CancelScope] = {}
        self.running = False
        self.answered = {"completed": 0, "failed": 0}  # requests answered since start (2xx or not), for /metrics
        self.spans: BatchSpans | None = None  # each batch's OpenTelemetry span (gateway/batch_span.py); None: none
        # True while the control plane drains (shutdown_gate.py): no request is sent, nor sent again, until it stops
        # (at exit a journal keeps what is left for the next process: no line fails for the shutdown)
        self.draining: Callable[[], bool] = lambda: False
        for batch, done in journal.load() if journal is not None else ():  # a restart: resume what had not finished
            self._batches[(batch.owner, batch.id)] = batch
            if batch.status not in TERMINAL:
                self._send.send_nowait((batch, done))

    async def run(self) -> None:
        """Runs every submitted batch until cancelled."""
        self.running = True
        try:
            async with anyio.create_task_group() as tg:
                async for batch, done in self._receive:
                    tg.start_soon(self._run_batch, batch, done)
        finally:
            self.running = False

    def submit(self, batch: Batch) -> None:
        """Queue a new batch (status validating; its input file is read when it starts); 503 when the runner is not
        running, 429 past ``max_active`` (or the owner's ``max_active_per_owner``)."""
        if not self.running:
            raise FrontendError(ErrorCode.NO_NODE, "The batch runner is not running (the app's lifespan was not run)")
        active = [b for b in self._batches.values() if b.status not in TERMINAL]
        if len(active) >= self.config.max_active:
            message = f"{len(active)} batches are running, the most this gateway runs at once: try again later"
            raise FrontendError(ErrorCode.OVERLOADED, message, retry_after_s=60.0)
        owned = sum(b.owner == batch.owner for b in active)
        if owned >= self.config.max_active_per_owner:
            message = f"You have {owned} batches running, the most one owner may run at once: try again later"
            raise FrontendError(ErrorCode.OVERLOADED, message, retry_after_s=60.0)
        batch.traffic_class = self.config.traffic_class
        self._batches[(batch.owner, batch.id)] = batch
        self._save(batch)
        self._send.send_nowait((batch, {}))
        finished = [key for key, b in self._batches.items() if b.status in TERMINAL]
        for key in finished[: max(0, len(self._batches) - self.config.max_batches)]:
            del self._batches[key]
            if self.journal is not None:
                self.journal.drop(key[1])

    def stats(self) -> dict:
        """Batches by status, requests answered since start, and requests of unfinished batches still waiting."""
        by_status: dict[str, int] = {}
        waiting = 0
        for batch in self._batches.values():
            by_status[batch.status] = by_status.get(batch.status, 0) + 1
            if batch.status not in TERMINAL:
                waiting += max(0, batch.total - batch.completed - batch.failed)
        return {"batches": by_status, "answered": dict(self.answered), "waiting": waiting}

    def get(self, owner: str | None, batch_id: str) -> Batch | None:
        return self._batches.get((owner, batch_id))

    def owned(self, owner: str | None) -> list[Batch]:
        """The owner's batches, oldest first."""
        return [b for (o, _), b in self._batches.items() if o == owner]

    async def delete(self, batch: Batch) -> None:
        """Forget a batch that has ended, and its input, output and error files (removed in a worker thread, as the
        file routes remove them)."""
        if batch.status not in TERMINAL:
            raise FrontendError(ErrorCode.INVALID_REQUEST, f"A batch that is {batch.status} cannot be deleted")
        del self._batches[(batch.owner, batch.id)]
        if self.journal is not None:
            self.journal.drop(batch.id)
        file_ids = [f for f in (batch.input_file_id, batch.output_file_id, batch.error_file_id) if f is not None]
        await anyio.to_thread.run_sync(lambda: [self.files.delete(batch.owner, f) for f in file_ids])

    def cancel(self, batch: Batch) -> None:
        """Cancel a batch that has not finished (its requests in flight are cancelled; what finished is kept)."""
        if batch.status in TERMINAL or batch.status in ("cancelling", "finalizing"):
            raise FrontendError(ErrorCode.INVALID_REQUEST, f"A batch that is {batch.status} cannot be cancelled")
        batch.set_status("cancelling")
        self._save(batch)
        scope = self._scopes.get(batch.id)
        if scope is not None:
            scope.cancel()

    async def _run_batch(self, batch: Batch, done: dict[str, tuple[bool, bytes]]) -> None:
        """Run a batch's requests, except those ``done`` (custom_id -> (2xx, output line): answered before a
        restart), then write its files."""
        remaining_s = max(0.0, batch.expires_at - time.time())
        lines: list[BatchLine] = []
        results: list[tuple[bool, bytes] | None] = []
        with anyio.CancelScope(deadline=anyio.current_time() + remaining_s) as scope:
            self._scopes[batch.id] = scope
            if batch.status == "cancelling":  # cancelled before it started
                scope.cancel()
            lines, errors, batch.model = await anyio.to_thread.run_sync(self._read_input, batch)
            if errors:
                batch.errors = errors
                batch.set_status("failed")
                self._save(batch)
                self._end_span(batch)
                self._scopes.pop(batch.id, None)
                return
            batch.total = len(lines)
            results = [done.get(line.custom_id) for line in lines]
            if batch.status == "validating":
                batch.set_status("in_progress")
                self._save(batch)
            async with anyio.create_task_group() as tg:
                for i, line in enumerate(lines):
                    if results[i] is not None:
                        continue
                    borrower = object()
                    await self._limiter.acquire_on_behalf_of(borrower)
                    tg.start_soon(self._run_line, batch, line, results, i, borrower)
        self._scopes.pop(batch.id, None)
        await self._finish(batch, lines, results, expired=scope.cancelled_caught)

    def _read_input(self, batch: Batch) -> tuple[list[BatchLine], list[dict], str | None]:
        """The input file's requests, the errors that fail it, and the model they all name (a worker thread)."""
        content = self.files.content(batch.owner, batch.input_file_id)
        if content is None:
            message = f"The input file {batch.input_file_id} is gone (deleted before the batch started)"
            return [], [{"code": "input_file_gone", "message": message, "param": "input_file_id", "line": None}], None
        lines, errors = read_lines(content, batch.endpoint, self.config.max_requests)
        return lines, errors, batch_model(lines)

    async def _run_line(self, batch: Batch, line: BatchLine, results: list, i: int, borrower: object) -> None:
        try:
            result = await self._send_line(batch, line)
        except Exception:  # the route's own errors are replies; anything else is this request's failure alone
            log.exception("batch %s: request %r failed", batch.id, line.custom_id)
            result = _Result(None, None, None, {"code": "internal_error", "message": "The request failed"})
        finally:
            self._limiter.release_on_behalf_of(borrower)
        ok = result.status is not None and 200 <= result.status < 300
        encoded = output_line(line.custom_id, result.status, result.request_id, result.body, result.error)
        results[i] = (ok, encoded)
        if self.journal is not None:
            self.journal.record(batch.id, ok, encoded)
        self.answered["completed" if ok else "failed"] += 1
        if ok:
            batch.completed += 1
            add_usage(batch, result.body)
        else:
            batch.failed += 1

    async def _send_line(self, batch: Batch, line: BatchLine) -> _Result:
        try:
            asks_stream = bool(_STREAM_DECODER.decode(line.body).stream)
        except (msgspec.MsgspecError, RecursionError):
            asks_stream = False  # the route refuses the body itself
        if asks_stream:
            refusal = FrontendError(ErrorCode.INVALID_REQUEST, "stream: a batch request cannot stream", param="stream")
            return _Result(400, None, error_body(refusal))
        backoff_s, max_backoff_s = self.config.backoff_s, self.config.max_backoff_s
        request_body = self._prioritised(line.body)
        for attempt in range(self.config.max_retries + 1):
            while self.draining():
                await anyio.sleep(DRAIN_POLL_S)
            status, headers, body = await self._call(batch, request_body)
            if status not in RETRIED_STATUSES or attempt == self.config.max_retries:
                break
            wait_s = _retry_after_s(headers)
            await anyio.sleep(min(max_backoff_s, wait_s if wait_s is not None else backoff_s))
            backoff_s = min(max_backoff_s, backoff_s * 2)
        try:
            decoded = msgspec.json.decode(body) if body else None
        except msgspec.DecodeError:
            decoded = body.decode("utf-8", "replace")
        return _Result(status, headers.get("x-request-id"), decoded)

    def _prioritised(self, body: bytes) -> bytes:
        """A line's body with the batch priority when it names none, nor a ``service_tier`` (a body that is not a
        JSON object: as it is, for the route to refuse)."""
        if not self.config.priority:
            return body
        try:
            decoded = msgspec.json.decode(body)
        except (msgspec.MsgspecError, RecursionError):
            return body
        if not isinstance(decoded, dict) or "priority" in decoded or "service_tier" in decoded:
            return body
        decoded["priority"] = self.config.priority
        return msgspec.json.encode(decoded)

    async def _call(self, batch: Batch, request_body: bytes) -> tuple[int, dict[str, str], bytes]:
        """A line's request through the route, in process: (status, headers, body)."""
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(request_body)).encode())]
        if batch.traffic_class is not None:
            headers.append((CLASS_HEADER, batch.traffic_class.encode()))
        for name, value in (batch.trace_headers or {}).items():  # its spans join the creating request's trace
            headers.append((name.encode("latin-1"), value.encode("latin-1")))
        state: dict = {}
        if batch.owner is not None:
            state["zoo_owner"] = batch.owner
        if batch.tenant is not None:
            state["zoo_tenant"] = batch.tenant
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "POST",
            "scheme": "http",
            "path": batch.endpoint,
            "raw_path": batch.endpoint.encode(),
            "query_string": b"",
            "root_path": "",
            "headers": headers,
            "client": None,
            "server": None,
            "state": state,
        }
        receive = replayed_body(request_body, _never)  # nobody disconnects: a batch's request is cancelled

        reply: dict = {"status": 500, "headers": {}, "body": bytearray()}

        async def send(message: Message) -> None:
            if message["type"] == "http.response.start":
                reply["status"] = message["status"]
                reply["headers"] = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in message["headers"]}
            elif message["type"] == "http.response.body":
                reply["body"] += message.get("body", b"")

        await self.app(scope, receive, send)
        return reply["status"], reply["headers"], bytes(reply["body"])

    async def _finish(
        self, batch: Batch, lines: list[BatchLine], results: list[tuple[bool, bytes] | None], *, expired: bool
    ) -> None:
        """Write the output and error files, then the final status."""
        cancelled = batch.status == "cancelling"
        batch.set_status("finalizing")
        self._save(batch)
        output, failed = bytearray(), bytearray()
        for line, result in zip(lines, results):
            if result is None:
                if cancelled:
                    continue  # OpenAI's cancelled batch keeps what finished; the rest were never run
                result = (False, output_line(line.custom_id, None, None, None, _EXPIRED))
                batch.failed += 1
                batch.expired += 1
                self.answered["failed"] += 1
            (output if result[0] else failed).extend(result[1])
        for content, kind in ((output, "output"), (failed, "error")):
            if content:
                name = f"{batch.id}_{kind}.jsonl"
                put, expires = self.files.put, batch.output_expires_after
                obj = await anyio.to_thread.run_sync(put, batch.owner, name, OUTPUT_PURPOSE, bytes(content), expires)
                setattr(batch, f"{kind}_file_id", obj["id"])
        batch.set_status("cancelled" if cancelled else "expired" if expired else "completed")
        self._save(batch)
        self._end_span(batch)
        if self.journal is not None:
            self.journal.finished(batch.id)

    def _end_span(self, batch: Batch) -> None:
        if self.spans is not None:
            self.spans.end(batch)

    def _save(self, batch: Batch) -> None:
        if self.journal is not None:
            self.journal.save(batch)


_EXPIRED = {
    "code": "batch_expired",
    "message": "This request could not be executed before the completion window expired.",
}


async def _never() -> Message:
    """What a batch's request receives after its body: nothing (it is cancelled, never abandoned)."""
    await anyio.sleep_forever()
    raise AssertionError("unreachable")


def _retry_after_s(headers: dict[str, str]) -> float | None:
    """The reply's retry-after-ms, else Retry-After (seconds), if it has one."""
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        text = headers.get(name, "")
        try:
            value = float(text) * scale
        except ValueError:
            continue
        if 0 <= value < math.inf:
            return value
    return None
