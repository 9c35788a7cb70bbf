"""Anthropic's Message Batches API, its records and rules (sans-IO), over the gateway's batches: a message batch is a
batch (gateway/batches.py) whose requests go through the ``/v1/messages`` route, run by gateway/batch_runner.py as
OpenAI's batches are (the same concurrency bound, retries, low priority, journal and restart).

    POST /v1/messages/batches {"requests": [{"custom_id", "params": {a /v1/messages body}}, ...]}
        ─► its requests as the batch's input file (purpose "batch", the owner's), endpoint /v1/messages
    MessageBatch: processing_status in_progress ─► (canceling) ─► ended; request_counts: every request
        "processing" until the batch ends, then succeeded, errored, canceled or expired
    results, once it ended: a JSONL line per request, in the order sent:
        {"custom_id", "result": {"type": "succeeded", "message": {...}}
                              | {"type": "errored", "error": {"type": "error", "error": {"type", "message"}}}
                              | {"type": "canceled"} | {"type": "expired"}}

The rules are Anthropic's (its API reference for Message Batches, and the anthropic SDK's MessageBatch,
MessageBatchIndividualResponse and BatchCreateParams, anthropic-python 2.17): ``custom_id`` 1..64 characters of
``[a-zA-Z0-9_-]``, each distinct; ``params`` a message request, checked when it runs (a bad one is an errored result,
as Anthropic's); a batch ends within 24 h; times are RFC 3339. A batch holds at most the runner's ``max_requests``
(50,000 by default; Anthropic takes 100,000). Its id is ``msgbatch_`` and the batch's own hex.

Archiving, as Anthropic's ("results are available for 29 days after creation"; the batch itself may still be read):
the batch's input file (its custom ids, in order) and its output and error files expire ``RESULTS_KEPT_S`` after they
were written (gateway/file_store.py), and from ``created_at`` + ``RESULTS_KEPT_S`` its ``archived_at`` says when, its
``results_url`` is null, and its results are a 404 saying they were archived. Results whose files are gone sooner (a
file deleted, or a store that lost it) are the same 404, never results made up without them.
"""

from __future__ import annotations

import re
import time
import uuid
from datetime import UTC, datetime

import msgspec

from controlplane.frontend import invalid_param
from controlplane.gateway.anthropic_messages import error_type
from controlplane.gateway.batches import COMPLETION_WINDOWS, MESSAGES_ENDPOINT, TERMINAL, Batch
from controlplane.gateway.openai_schema import decode_body
from transport.codec import clip

PREFIX = "msgbatch_"
RESULTS_KEPT_S = 29 * 24 * 3600  # Anthropic's: a message batch's results are available for 29 days after creation
_CUSTOM_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_WINDOW = "24h"


class _RequestIn(msgspec.Struct, forbid_unknown_fields=True):
    custom_id: str
    params: msgspec.Raw


class _CreateBody(msgspec.Struct, forbid_unknown_fields=True):
    requests: list[_RequestIn]


_CREATE_DECODER = msgspec.json.Decoder(_CreateBody)


class _OutputLine(msgspec.Struct):  # a line of the batch's output or error file (gateway/batches.py output_line)
    custom_id: str
    response: dict | None = None
    error: dict | None = None


_OUTPUT_DECODER = msgspec.json.Decoder(_OutputLine)


def message_batch_id(batch: Batch) -> str:
    return PREFIX + batch.id.removeprefix("batch_")


def batch_id(message_batch_id: str) -> str | None:
    """The batch's own id for a message batch's (None: not one)."""
    return "batch_" + message_batch_id.removeprefix(PREFIX) if message_batch_id.startswith(PREFIX) else None


def parse_create(
    body: bytes, owner: str | None, max_requests: int, window_s: float | None = None
) -> tuple[Batch, bytes]:
    """A new message batch (status validating, its ``input_file_id`` not yet set) and its input file's JSONL; a 400
    naming the bad field. ``window_s``: how long it may run (None: 24 h)."""
    req = decode_body(_CREATE_DECODER, body)
    if not req.requests:
        raise invalid_param("requests", "must hold at least one request")
    if len(req.requests) > max_requests:
        raise invalid_param("requests", f"a batch holds at most {max_requests} requests, got {len(req.requests)}")
    seen: set[str] = set()
    lines = bytearray()
    for i, request in enumerate(req.requests):
        if not _CUSTOM_ID.fullmatch(request.custom_id):
            shown = clip(request.custom_id, 64)
            raise invalid_param(f"requests.{i}.custom_id", f"must be 1..64 of [a-zA-Z0-9_-], got {shown!r}")
        if request.custom_id in seen:
            raise invalid_param(f"requests.{i}.custom_id", f"{request.custom_id!r} is used twice: each must be unique")
        if not bytes(request.params).lstrip().startswith(b"{"):
            raise invalid_param(f"requests.{i}.params", "must be a message request (a JSON object)")
        seen.add(request.custom_id)
        line = {"custom_id": request.custom_id, "method": "POST", "url": MESSAGES_ENDPOINT, "body": request.params}
        lines += msgspec.json.encode(line) + b"\n"
    now = int(time.time())
    window = COMPLETION_WINDOWS[_WINDOW] if window_s is None else window_s
    batch = Batch(
        id=f"batch_{uuid.uuid4().hex}",
        owner=owner,
        endpoint=MESSAGES_ENDPOINT,
        input_file_id="",
        completion_window=_WINDOW,
        created_at=now,
        expires_at=now + max(1, round(window)),
        metadata=None,
        total=len(req.requests),
        output_expires_after=RESULTS_KEPT_S,  # its results' files, as its input file (RESULTS_KEPT_S)
    )
    return batch, bytes(lines)


def archived_at(batch: Batch, now: float) -> int | None:
    """When the batch's results became unavailable (None: not yet)."""
    at = batch.created_at + RESULTS_KEPT_S
    return at if now >= at else None


def processing_status(batch: Batch) -> str:
    return "ended" if batch.status in TERMINAL else "canceling" if batch.status == "cancelling" else "in_progress"


def request_counts(batch: Batch) -> dict[str, int]:
    """Every request "processing" until the batch ends (Anthropic's rule), then by how it ended."""
    counts = dict.fromkeys(("processing", "succeeded", "errored", "canceled", "expired"), 0)
    if batch.status not in TERMINAL:
        counts["processing"] = batch.total
    elif batch.status == "failed":  # its input file was deleted before it started: nothing ran
        counts["errored"] = batch.total
    else:
        counts["succeeded"] = batch.completed
        counts["expired"] = batch.expired
        counts["errored"] = batch.failed - batch.expired
        counts["canceled"] = max(0, batch.total - batch.completed - batch.failed)
    return counts


def message_batch_object(batch: Batch, results_url: str, now: float) -> dict:
    """The MessageBatch a client polls; ``results_url`` is given once it ended, until it is archived."""
    ended = batch.status in TERMINAL
    archived = archived_at(batch, now)
    return {
        "id": message_batch_id(batch),
        "type": "message_batch",
        "processing_status": processing_status(batch),
        "request_counts": request_counts(batch),
        "ended_at": _rfc3339(batch.times.get(f"{batch.status}_at")) if ended else None,
        "created_at": _rfc3339(batch.created_at),
        "expires_at": _rfc3339(batch.expires_at),
        "archived_at": _rfc3339(archived),
        "cancel_initiated_at": _rfc3339(batch.times.get("cancelling_at")),
        "results_url": results_url if ended and archived is None else None,
    }


def results(batch: Batch, custom_ids: list[str], answered: bytes) -> bytes:
    """The results file: a line per request in ``custom_ids`` order, from ``answered`` (the batch's output and
    error files' lines); a request with none was canceled (or, in a batch that failed to start, errored)."""
    by_id: dict[str, dict] = {}
    for raw in answered.splitlines():
        if raw.strip():
            line = _OUTPUT_DECODER.decode(raw)
            by_id[line.custom_id] = _result(line)
    if batch.status == "failed":
        message = (batch.errors or [{}])[0].get("message", "The batch could not start")
        missing = {"type": "errored", "error": _error("api_error", message)}
    else:
        missing = {"type": "canceled"}
    out = bytearray()
    for custom_id in custom_ids or list(by_id):  # none: its input file was deleted (the answered ones, then)
        out += msgspec.json.encode({"custom_id": custom_id, "result": by_id.get(custom_id, missing)}) + b"\n"
    return bytes(out)


def _result(line: _OutputLine) -> dict:
    response, error = line.response, line.error or {}
    if response is None:
        if error.get("code") == "batch_expired":
            return {"type": "expired"}
        return {"type": "errored", "error": _error("api_error", str(error.get("message", "The request failed")))}
    status, body = response.get("status_code"), response.get("body")
    if isinstance(status, int) and 200 <= status < 300:
        return {"type": "succeeded", "message": body}
    if isinstance(body, dict) and body.get("type") == "error":  # the /v1/messages route's own error
        return {"type": "errored", "error": body}
    inner = body.get("error") if isinstance(body, dict) else None  # the runner's refusal, in OpenAI's shape
    message = inner.get("message") if isinstance(inner, dict) else None
    kind = error_type(status) if isinstance(status, int) else "api_error"
    return {"type": "errored", "error": _error(kind, str(message or "The request failed"))}


def _error(kind: str, message: str) -> dict:
    return {"type": "error", "error": {"type": kind, "message": message}}


def _rfc3339(seconds: int | None) -> str | None:
    if seconds is None:
        return None
    return datetime.fromtimestamp(seconds, UTC).isoformat().replace("+00:00", "Z")
