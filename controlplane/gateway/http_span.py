"""The gateway's span of each HTTP request (OpenTelemetry), the root of what the control plane records for it.

    request in ─► child_of(the caller's traceparent) ─► the request's trace headers become this span's, so the
         │        ``llm_request`` span (controlplane/request_spans.py) and a batch's span (gateway/batch_span.py)
         │        hang under it, and its sampling decision is theirs
         └─ the reply's last byte sent (or the app failed) ─► SpanRecord "{method} {route}", kind SERVER

Names and attributes are OpenTelemetry's HTTP server semantic conventions (semantic-conventions
docs/http/http-spans.md, stable since v1.23.0), as opentelemetry-instrumentation-asgi records them:
``http.request.method``, ``url.scheme``, ``url.path``, ``http.route`` (the matched route's template),
``http.response.status_code``, ``network.protocol.version``, ``server.address`` / ``server.port`` (the Host
header), ``client.address``, ``user_agent.original``, and the ``x-request-id`` header each way
(``http.request.header.x-request-id``: a proxy's or client's id, if sent; ``http.response.header.x-request-id``: the
gateway's, which its logs and the ``llm_request`` span carry); ``zoo.tenant`` is the API key's tenant. Per the
conventions a 5xx (or no reply at all) sets the status to ERROR with ``error.type``; a 4xx is the client's error and
leaves it unset. ``url.query`` is not recorded: a client may put a key or a secret there. Bodies never are.

Paths an operator's probes and scrapers hit every few seconds (/metrics, /health, /ping by default,
``GatewayConfig.untraced_paths``) get no span, as instrumentations' ``OTEL_PYTHON_EXCLUDED_URLS`` leave them out.
Sans-IO: spans go to a SpanSink (observe/span_export.py).
"""

from __future__ import annotations

import time
from typing import Any

from transport.trace_context import TRACE_HEADERS, SpanRecord, SpanSink, child_of, trace_headers

_TRACE_HEADER_BYTES = {name.encode() for name in TRACE_HEADERS}
MAX_ATTRIBUTE_CHARS = 256  # a header's value kept in an attribute (a user agent, a host) is cut to this


class HttpSpans:
    """ASGI middleware: one span per HTTP request. ``export``: where spans go; ``sample_ratio``: the share of
    requests without a caller's trace context recorded (the control plane's ``--otlp-traces-sample-ratio``);
    ``untraced_paths``: exact paths that get no span."""

    def __init__(
        self, app: Any, export: SpanSink, sample_ratio: float = 1.0, untraced_paths: tuple[str, ...] = ()
    ) -> None:
        self.app = app
        self.export = export
        self.sample_ratio = sample_ratio
        self.untraced_paths = frozenset(untraced_paths)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in self.untraced_paths:
            await self.app(scope, receive, send)
            return
        headers = scope["headers"]
        caller = trace_headers(
            {k.decode("latin-1"): v.decode("latin-1") for k, v in headers if k in _TRACE_HEADER_BYTES}
        )
        context = child_of(caller, self.sample_ratio)
        ours = [(k.encode(), v.encode()) for k, v in context.headers().items()]
        scope["headers"] = [*(h for h in headers if h[0] not in _TRACE_HEADER_BYTES), *ours]  # the next spans' parent
        if not context.sampled:
            await self.app(scope, receive, send)
            return
        start_ns = time.time_ns()
        reply: dict[str, Any] = {"status": None, "end_ns": 0, "request_id": None}

        async def send_and_watch(message) -> None:
            if message["type"] == "http.response.start":
                reply["status"] = message["status"]
                reply["request_id"] = next((v for k, v in message.get("headers", ()) if k == b"x-request-id"), None)
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                reply["end_ns"] = time.time_ns()

        failure: BaseException | None = None
        try:
            await self.app(scope, receive, send_and_watch)
        except BaseException as e:  # recorded, then raised on: the server answers it (a 500, a dropped connection)
            failure = e
            raise
        finally:
            end_ns = reply["end_ns"] or time.time_ns()
            record = _record(scope, context, start_ns, end_ns, reply["status"], failure)
            if reply["request_id"] is not None:  # the id the reply names (our request's): logs and traces meet on it
                record.attributes["http.response.header.x-request-id"] = [_text(reply["request_id"])]
            self.export.emit(record)


def _record(
    scope, context, start_ns: int, end_ns: int, status: int | None, failure: BaseException | None
) -> SpanRecord:
    method = scope.get("method", "")
    route = getattr(scope.get("route"), "path", None)  # Starlette's matched Route (its template), if one matched
    headers = {k: v for k, v in scope["headers"]}
    host, _, port = _header(headers, b"host").rpartition(":") if b"host" in headers else ("", "", "")
    if not host or not (port.isdigit() and len(port) <= 5 and int(port) <= 65535):  # no port (or not one) in it
        host, port = _header(headers, b"host"), ""
    client = scope.get("client") or (None, None)
    attributes: dict[str, Any] = {
        "http.request.method": method,
        "url.scheme": scope.get("scheme", "http"),
        "url.path": scope.get("path", "")[:MAX_ATTRIBUTE_CHARS],
        "http.route": route,
        "http.response.status_code": status,
        "network.protocol.version": scope.get("http_version"),
        "server.address": host or None,
        "server.port": int(port) if port else None,
        "client.address": client[0],
        "user_agent.original": _header(headers, b"user-agent") or None,
        "zoo.tenant": scope.get("state", {}).get("zoo_tenant"),
        # a proxy's or a client's own id for the request, if it sent one (the conventions' header form: a list)
        "http.request.header.x-request-id": [_header(headers, b"x-request-id")] if b"x-request-id" in headers else None,
    }
    error = None
    if failure is not None and status is None:
        attributes["error.type"] = type(failure).__qualname__
        error = f"{type(failure).__qualname__} before any reply"
    elif status is None or status >= 500:
        attributes["error.type"] = str(status) if status is not None else "no reply"
        error = f"HTTP {status}" if status is not None else "no reply"
    attributes = {k: v for k, v in attributes.items() if v is not None}
    name = f"{method} {route}" if route else method
    return SpanRecord(name, context, start_ns, max(end_ns, start_ns), attributes, kind="server", error=error)


def _header(headers: dict[bytes, bytes], name: bytes) -> str:
    return _text(headers.get(name, b""))


def _text(value: bytes) -> str:
    return value.decode("latin-1")[:MAX_ATTRIBUTE_CHARS]
