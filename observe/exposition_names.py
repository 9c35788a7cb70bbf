"""Metric names kept as they are in an OpenMetrics scrape.

prometheus_client 0.26's OpenMetrics exposition, at the escaping it falls back to ("underscores": what a scraper that
names none gets, Prometheus 2.x among them), writes the sample lines of ``vllm:num_requests_running`` as
``vllm_num_requests_running`` under ``# TYPE vllm:num_requests_running gauge``: its metadata lines keep the colon, its
sample lines do not (prometheus/client_python issue #1177, open at 0.26.0; fixes proposed in PRs #1180 and #1204).
Prometheus, which asks for OpenMetrics first, then stores every ``vllm:*`` and ``zoo:*`` series under an underscore
name, and no dashboard, alert, recording rule or KV-aware router that queries vLLM's names finds them. The plain text
format is not affected.

A colon is valid in a metric name (``[a-zA-Z_:][a-zA-Z0-9_:]*``), and every name exported here is such a legacy name
(tests/observe/test_exposition_names.py), so no escaping scheme should change it. The fix: every OpenMetrics range of
a scrape's ``Accept`` header is given ``escaping=allow-utf-8`` before prometheus_client picks its encoder. At that
escaping it writes each name as it is, in the metadata and the samples alike, and says so in the reply's
``Content-Type``, so a scraper that asked for another scheme does not unescape it. Such a range also gets
``version=1.0.0`` where it has none (the version prometheus_client answers then), and in place of one prometheus_client
cannot read; a text range's such version is left out. A ``version=abc`` made prometheus_client raise: a 500 for a bad
header.

    control plane: asgi_keeping_names(make_asgi_app(registry))      (observe/exporter.py)
    agent:         wsgi_keeping_names(make_wsgi_app(registry))      (observe/agent_http.py)
"""

from __future__ import annotations

import re
from collections.abc import Callable

OPENMETRICS = "application/openmetrics-text"
ALLOW_UTF8 = "allow-utf-8"
VERSION = re.compile(r"[0-9]{1,4}(\.[0-9]{1,4}){0,3}")  # what prometheus_client's version parse takes


def _key(param: str) -> str:
    return param.split("=", 1)[0].strip().lower() if "=" in param else ""


def _value(param: str) -> str:
    return param.split("=", 1)[1].strip() if "=" in param else ""


def keep_names(accept: str) -> str:
    """``accept`` with each OpenMetrics media range asking for names as they are, and no version prometheus_client
    cannot read (other ranges unchanged)."""
    ranges = []
    for media_range in accept.split(","):
        parts = [part.strip() for part in media_range.split(";")]
        if parts[0].lower() == OPENMETRICS:
            params = [p for p in parts[1:] if p and _key(p) not in ("escaping", "version")]
            versions = [_value(p) for p in parts[1:] if _key(p) == "version"]
            version = versions[0] if versions and VERSION.fullmatch(versions[0]) else "1.0.0"
            parts = [parts[0], f"version={version}", *params, f"escaping={ALLOW_UTF8}"]
        elif parts[0].lower() == "text/plain":  # a version it cannot read is left out: the text format's default
            parts = [parts[0], *(p for p in parts[1:] if _key(p) != "version" or VERSION.fullmatch(_value(p)))]
        ranges.append(";".join(parts))
    return ",".join(ranges)


def asgi_keeping_names(app: Callable) -> Callable:
    """An ASGI ``/metrics`` app whose scrapes get the names as they are."""

    async def keeping_names(scope, receive, send) -> None:
        if scope["type"] == "http":
            headers = [
                (name, keep_names(value.decode("latin-1")).encode("latin-1"))
                if name.lower() == b"accept"
                else (name, value)
                for name, value in scope["headers"]
            ]
            scope = {**scope, "headers": headers}
        await app(scope, receive, send)

    return keeping_names


def wsgi_keeping_names(app: Callable) -> Callable:
    """A WSGI ``/metrics`` app whose scrapes get the names as they are."""

    def keeping_names(environ: dict, start_response: Callable):
        if "HTTP_ACCEPT" in environ:
            environ = {**environ, "HTTP_ACCEPT": keep_names(environ["HTTP_ACCEPT"])}
        return app(environ, start_response)

    return keeping_names
