"""The gateway's access log: one line per HTTP request, when its reply has been sent (logger ``zoo.access``, INFO).

vLLM's API server logs every request through uvicorn's access log by default (``--disable-uvicorn-access-log`` turns
it off, ``--disable-access-log-for-endpoints`` leaves paths out). This line says more than uvicorn's, for the same
cost of one log record: how long the reply took, when its first byte left (a stream's time to first token, as the
client saw it), its size, and the id the reply names (``x-request-id``: the id in the client's reply, the
``llm_request`` span's, the logs' of the node that served it)::

    10.1.2.3:51234 "POST /v1/chat/completions HTTP/1.1" 200 2048B first 412.3ms total 1804.0ms id=chatcmpl-9f3c...

A request without a reply (the client went away, the server stopped) logs status ``-``. The path is cut at
``MAX_PATH_CHARS`` and its control characters escaped (a decoded ``%0a`` cannot forge a line); the query string is
not logged (a client may put a secret there). ``GatewayConfig.access_log_exclude`` (the probes' and scrapers' paths
by default, which a kubelet and Prometheus call every few seconds) are not logged.
"""

from __future__ import annotations

import logging
import time
from typing import Any

log = logging.getLogger("zoo.access")

MAX_PATH_CHARS = 256
MAX_ID_CHARS = 160  # the longest id the gateway names a reply with (gateway/request_ids.py): "chatcmpl-" + 128


class AccessLog:
    """ASGI middleware: logs each HTTP request not on ``exclude`` once its reply is sent (module docstring)."""

    def __init__(self, app: Any, exclude: tuple[str, ...] = ()) -> None:
        self.app = app
        self.exclude = frozenset(exclude)

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["path"] in self.exclude or not log.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        start_s = time.perf_counter()
        reply: dict[str, Any] = {"status": "-", "bytes": 0, "first_s": None, "id": None}

        async def send_and_count(message) -> None:
            if message["type"] == "http.response.start":
                reply["status"] = message["status"]
                reply["id"] = next((v for k, v in message.get("headers", ()) if k == b"x-request-id"), None)
            elif message["type"] == "http.response.body":
                if reply["first_s"] is None:
                    reply["first_s"] = time.perf_counter()
                reply["bytes"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, send_and_count)
        finally:
            end_s = time.perf_counter()
            client = scope.get("client")
            first_s = reply["first_s"]
            fields = {
                "client": f"{client[0]}:{client[1]}" if client else "-",
                "http_method": scope.get("method", ""),
                "http_path": _escaped(scope.get("path", ""), MAX_PATH_CHARS),
                "http_status": reply["status"],
                "bytes": reply["bytes"],
                "ttfb_ms": None if first_s is None else round((first_s - start_s) * 1e3, 1),
                "total_ms": round((end_s - start_s) * 1e3, 1),
                "request_id": None if reply["id"] is None else _escaped(reply["id"].decode("latin-1"), MAX_ID_CHARS),
            }  # the line's fields: keys of its JSON object with --log-format json (transport/process.py)
            log.info(
                '%s "%s %s HTTP/%s" %s %dB first %s total %.1fms id=%s',
                fields["client"],
                fields["http_method"],
                fields["http_path"],
                scope.get("http_version", "1.1"),
                fields["http_status"],
                fields["bytes"],
                "-" if first_s is None else f"{fields['ttfb_ms']:.1f}ms",
                fields["total_ms"],
                fields["request_id"] or "-",
                extra=fields,
            )


def _escaped(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` (an ellipsis says so), its non-printable characters written as escapes."""
    cut = text[:max_chars]
    if not cut.isprintable() or '"' in cut:
        cut = cut.encode("unicode_escape").decode("ascii").replace('"', '\\"')
    return cut + "..." if len(text) > max_chars else cut
