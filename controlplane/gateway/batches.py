"""OpenAI's Batch API, its records and rules (sans-IO): a batch's create body, its input file's lines checked, the
Batch object a client polls, and the output lines it ends with. gateway/batch_runner.py runs them.

    POST /v1/files (purpose "batch")     a JSONL file, one request per line:
        {"custom_id": "q1", "method": "POST", "url": "/v1/chat/completions", "body": {...}}
    POST /v1/batches {"input_file_id", "endpoint", "completion_window": "24h", "metadata"?}
        validating ─► in_progress ─► finalizing ─► completed
             │              ├─ POST /v1/batches/{id}/cancel ─► cancelling ─► cancelled
             │              └─ past its window ─► expired   (cancelled and expired keep what finished)
             └─ a bad input file ─► failed (``errors`` lists each bad line, numbered from 1)
    output_file_id: the lines answered 2xx; error_file_id: the rest (as OpenAI splits them), each line
        {"id": "batch_req_...", "custom_id", "response": {"status_code", "request_id", "body"} | null,
         "error": {"code", "message"} | null}

The rules are OpenAI's (its API reference for Batch and Files, and the openai SDK's ``Batch``, ``BatchError`` and
``BatchCreateParams`` types, openai-python 2.x): ``endpoint`` one of the routes served here
(``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/v1/responses``; and vLLM's ``/v1/score`` and
``/v1/rerank``, as its ``run_batch`` takes them), ``completion_window``
"24h" only, at most 50,000 requests in a file, every ``custom_id`` distinct, every line's ``url`` the batch's
``endpoint``, ``metadata`` at most 16 string pairs (keys up to 64 characters, values up to 512). A request left
unrun when the window closes gets an error line with code ``batch_expired``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field

import msgspec

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.conversation_store import check_metadata
from controlplane.gateway.file_store import expires_after_s
from controlplane.gateway.openai_schema import decode_body
from transport.codec import clip
from transport.messages import ErrorCode

ENDPOINTS = ("/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses", "/v1/score", "/v1/rerank")
MESSAGES_ENDPOINT = "/v1/messages"  # Anthropic's Message Batches run here (gateway/message_batches.py), not OpenAI's
COMPLETION_WINDOWS = {"24h": 24 * 3600.0}
MAX_CUSTOM_ID_CHARS = 512
MAX_LISTED_ERRORS = 100  # a failed batch's ``errors`` names at most this many bad lines (and counts the rest)
STATUSES = ("validating", "failed", "in_progress", "finalizing", "completed", "expired", "cancelling", "cancelled")
TERMINAL = frozenset({"failed", "completed", "expired", "cancelled"})


class _ExpiresAfter(msgspec.Struct):
    anchor: str
    seconds: int


class _CreateBody(msgspec.Struct, forbid_unknown_fields=True):
    input_file_id: str
    endpoint: str
    completion_window: str
    metadata: dict[str, str] | None = None
    output_expires_after: _ExpiresAfter | None = None  # OpenAI's: the output and error files expire (file_store.py)


_CREATE_DECODER = msgspec.json.Decoder(_CreateBody)


class _InputLine(msgspec.Struct, forbid_unknown_fields=True):
    custom_id: str
    method: str
    url: str
    body: msgspec.Raw


_LINE_DECODER = msgspec.json.Decoder(_InputLine)


class _Model(msgspec.Struct):
    model: str | None = None


_MODEL_DECODER = msgspec.json.Decoder(_Model)


@dataclass(frozen=True, slots=True)
class BatchLine:
    custom_id: str
    body: bytes  # the request body, as the file has it


@dataclass
class Batch:
    """One batch's state; ``object()`` is what the API shows of it."""

    id: str
    owner: str | None
    endpoint: str
    input_file_id: str
    completion_window: str
    created_at: int
    expires_at: int
    metadata: dict[str, str] | None
    traffic_class: str | None = None  # the class its requests run in (BatchRunnerConfig.traffic_class)
    model: str | None = None  # the model every request names, when they all name the same one
    tenant: str | None = None
    # the creating request's W3C trace context (transport/trace_context.py): each of its requests' spans joins it;
    # with tracing on, the batch's own span's context (gateway/batch_span.py), its parent and start
    trace_headers: dict[str, str] | None = None
    trace_parent_span_id: int = 0
    trace_start_ns: int = 0
    status: str = "validating"
    times: dict[str, int] = field(default_factory=dict)  # "in_progress_at", "completed_at", ...
    errors: list[dict] | None = None
    total: int = 0
    completed: int = 0
    failed: int = 0  # expired ones too
    expired: int = 0  # left unrun when the window closed (Anthropic's Message Batches count them apart)
    usage: dict[str, int] = field(
        default_factory=lambda: {"input_tokens": 0, "cached_tokens": 0, "output_tokens": 0, "total_tokens": 0}
    )
    output_file_id: str | None = None
    error_file_id: str | None = None
    output_expires_after: int | None = None  # seconds its output and error files are kept (None: until deleted)

    def set_status(self, status: str) -> None:
        self.status = status
        self.times[f"{status}_at"] = int(time.time())

    def object(self) -> dict:
        usage = self.usage
        return {
            "id": self.id,
            "object": "batch",
            "endpoint": self.endpoint,
            "errors": None if self.errors is None else {"object": "list", "data": self.errors},
            "input_file_id": self.input_file_id,
            "completion_window": self.completion_window,
            "status": self.status,
            "output_file_id": self.output_file_id,
            "error_file_id": self.error_file_id,
            "created_at": self.created_at,
            "expires_at": self.expires_at,
            **{
                name: self.times.get(name)
                for name in (
                    "in_progress_at",
                    "finalizing_at",
                    "completed_at",
                    "failed_at",
                    "expired_at",
                    "cancelling_at",
                    "cancelled_at",
                )
            },
            "request_counts": {"total": self.total, "completed": self.completed, "failed": self.failed},
            "usage": {
                "input_tokens": usage["input_tokens"],
                "input_tokens_details": {"cached_tokens": usage["cached_tokens"]},
                "output_tokens": usage["output_tokens"],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage["total_tokens"],
            },
            "metadata": self.metadata,
            "model": self.model,
        }


def parse_create(body: bytes, owner: str | None, *, window_s: float | None = None) -> Batch:
    """A new batch (status ``validating``) from ``POST /v1/batches``'s body; a 400 naming a bad field.
    ``window_s``: how long it may run (None: its ``completion_window``'s)."""
    req = decode_body(_CREATE_DECODER, body)
    if req.endpoint not in ENDPOINTS:
        raise invalid_param("endpoint", f"must be one of {list(ENDPOINTS)}, got {clip(req.endpoint, 64)!r}")
    if req.completion_window not in COMPLETION_WINDOWS:
        window = clip(req.completion_window, 16)
        raise invalid_param("completion_window", f"must be one of {list(COMPLETION_WINDOWS)}, got {window!r}")
    if req.metadata is not None:
        check_metadata(req.metadata)  # OpenAI's rules, as every stored object's metadata here
    now = int(time.time())
    window = COMPLETION_WINDOWS[req.completion_window] if window_s is None else window_s
    return Batch(
        id=f"batch_{uuid.uuid4().hex}",
        owner=owner,
        endpoint=req.endpoint,
        input_file_id=req.input_file_id,
        completion_window=req.completion_window,
        created_at=now,
        expires_at=now + max(1, round(window)),
        metadata=req.metadata,
        output_expires_after=None
        if req.output_expires_after is None
        else expires_after_s(req.output_expires_after.anchor, req.output_expires_after.seconds, "output_expires_after"),
    )


def read_lines(content: bytes, endpoint: str, max_requests: int) -> tuple[list[BatchLine], list[dict]]:
    """The input file's requests, or the errors that fail the batch (each with its 1-based ``line``; at most
    MAX_LISTED_ERRORS listed, then one that counts the rest). Blank lines are skipped."""
    lines: list[BatchLine] = []
    errors: list[dict] = []
    seen: set[str] = set()
    num_errors = 0

    def error(code: str, message: str, line: int | None, param: str | None = None) -> None:
        nonlocal num_errors
        num_errors += 1
        if len(errors) < MAX_LISTED_ERRORS:
            errors.append({"code": code, "message": message, "param": param, "line": line})

    for number, raw in enumerate(content.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            line = decode_body(_LINE_DECODER, raw)
        except FrontendError as err:
            code = "invalid_json_line" if err.code == ErrorCode.MALFORMED else "invalid_request"
            error(code, f"Line {number}: {err.message}", number, err.param)
            continue
        if not line.custom_id or len(line.custom_id) > MAX_CUSTOM_ID_CHARS:
            error("invalid_request", f"custom_id must be 1..{MAX_CUSTOM_ID_CHARS} characters", number, "custom_id")
        elif line.custom_id in seen:
            error("duplicate_custom_id", f"custom_id {clip(line.custom_id, 64)!r} is used twice", number, "custom_id")
        elif line.method != "POST":
            error("invalid_request", f"method must be 'POST', got {clip(line.method, 16)!r}", number, "method")
        elif line.url != endpoint:
            message = f"url {clip(line.url, 64)!r} is not the batch's endpoint {endpoint!r}"
            error("mismatched_endpoint", message, number, "url")
        elif not bytes(line.body).lstrip().startswith(b"{"):
            error("invalid_request", "body must be a JSON object", number, "body")
        else:
            seen.add(line.custom_id)
            lines.append(BatchLine(line.custom_id, bytes(line.body)))
    if num_errors == 0 and not lines:
        error("empty_file", "The input file has no requests", None)
    if num_errors == 0 and len(lines) > max_requests:
        message = f"The input file has {len(lines)} requests; a batch has at most {max_requests}"
        error("too_many_requests", message, None)
    if num_errors > len(errors):
        more = f"{num_errors - len(errors)} more lines are bad"
        errors.append({"code": "more_errors", "message": more, "param": None, "line": None})
    return lines, errors


def batch_model(lines: list[BatchLine]) -> str | None:
    """The model every request names, when each names one and it is the same (OpenAI's Batch shows it)."""
    models = set()
    for line in lines:
        try:
            models.add(_MODEL_DECODER.decode(line.body).model)
        except (msgspec.MsgspecError, RecursionError):
            return None  # the route refuses that body itself
        if len(models) > 1:
            return None
    return next(iter(models), None)


def add_usage(batch: Batch, body: object) -> None:
    """Adds a 2xx reply body's usage to the batch's (chat and completions' names, or the Responses API's)."""
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return
    prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    output = usage.get("completion_tokens", usage.get("output_tokens", 0))
    details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details") or {}
    cached = details.get("cached_tokens", 0) if isinstance(details, dict) else 0
    for name, value in (("input_tokens", prompt), ("output_tokens", output), ("cached_tokens", cached)):
        if isinstance(value, int):
            batch.usage[name] += value
    batch.usage["total_tokens"] = batch.usage["input_tokens"] + batch.usage["output_tokens"]


def output_line(custom_id: str, status: int | None, request_id: str | None, body: object, error: dict | None) -> bytes:
    """One line of an output or error file (``status`` None: the request got no reply; ``error`` says why)."""
    response = None if status is None else {"status_code": status, "request_id": request_id, "body": body}
    line = {"id": f"batch_req_{uuid.uuid4().hex}", "custom_id": custom_id, "response": response, "error": error}
    return msgspec.json.encode(line) + b"\n"
