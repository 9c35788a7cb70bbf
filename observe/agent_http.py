"""An agent's own HTTP endpoint: its Prometheus metrics and a readiness check, on one port.

    GET /metrics   the exporter's registry (prometheus_client's exposition, gzip when asked)
    GET /health    {"status": "ok" | "starting" | "draining" | ...} from ``health_fn``: 200 when "ok", else 503
                   (a Kubernetes readinessProbe: the agent has joined a control plane and takes requests)
    HEAD           the same status and headers as GET, no body; OPTIONS: 204 with Allow; other methods: 405
    other paths    404

Served by the standard library's WSGI server in a daemon thread (one thread per request), as
prometheus_client's own ``start_http_server`` does; ``health_fn`` is called from that thread, so it
must only read plain attributes. The URL the agent reports upstream (NodeTelemetry → the control
plane's Prometheus HTTP service discovery, observe/prometheus_sd.py) uses ``advertise_host``: the
bind address is often a wildcard (0.0.0.0 in a container), which a scraper cannot dial.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import make_wsgi_app

from observe.exporter import PrometheusExporter
from observe.exposition_names import wsgi_keeping_names

log = logging.getLogger(__name__)

WILDCARD_HOSTS = ("", "0.0.0.0", "::", "[::]")
ALLOW = "GET, HEAD, OPTIONS"


def advertised_host(bind_host: str, advertise_host: str | None = None) -> str:
    """The host others should dial: ``advertise_host`` if given, else the bind host, else (a wildcard bind)
    this machine's fully qualified name. IPv6 literals come back in brackets, ready for a URL."""
    host = advertise_host or (bind_host if bind_host not in WILDCARD_HOSTS else socket.getfqdn())
    host = host.strip("[]")
    return f"[{host}]" if ":" in host else host


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds the process open


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:  # every scrape would be a log line
        pass


class AgentHttpServer:
    """``/metrics`` of ``exporter`` and ``/health`` from ``health_fn`` (a dict with at least ``status``)."""

    def __init__(self, exporter: PrometheusExporter, health_fn: Callable[[], dict]) -> None:
        self.exporter = exporter
        self.health_fn = health_fn
        self._metrics_app = wsgi_keeping_names(make_wsgi_app(exporter.registry))  # vllm:* stays vllm:* in OpenMetrics
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def serve(self, host: str = "127.0.0.1", port: int = 0, advertise_host: str | None = None) -> str:
        """Listen on ``host:port`` (0: a free port) in a daemon thread; returns the advertised /metrics URL,
        which also becomes ``exporter.url`` (what the agent reports to the control plane)."""
        family = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
        server_class = type("_AgentServer", (_Server,), {"address_family": family})
        self._server = make_server(host.strip("[]"), port, self._app, server_class, handler_class=_QuietHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-http", daemon=True)
        self._thread.start()
        bound_port = self._server.server_address[1]
        self.exporter.url = f"http://{advertised_host(host, advertise_host)}:{bound_port}/metrics"
        return self.exporter.url

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    # -- the WSGI app (server threads) -----------------------------------------------------------

    def _app(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        path = environ.get("PATH_INFO", "")
        if path not in ("/metrics", "/health"):
            return _reply(start_response, "404 Not Found", b"not found: try /metrics or /health\n", method)
        if method == "OPTIONS":
            start_response("204 No Content", [("Allow", ALLOW), ("Content-Length", "0")])
            return [b""]
        if method not in ("GET", "HEAD"):
            body = f"{method} is not allowed here; use {ALLOW}\n".encode()
            return _reply(start_response, "405 Method Not Allowed", body, method, [("Allow", ALLOW)])
        if path == "/health":
            return self._health(start_response, method)
        reply: list = []
        body = b"".join(self._metrics_app({**environ, "REQUEST_METHOD": "GET"}, lambda *a: reply.extend(a[:2])))
        status, headers = reply
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [] if method == "HEAD" else [body]

    def _health(self, start_response: Callable, method: str) -> Iterable[bytes]:
        try:
            health = dict(self.health_fn())
        except Exception:  # a broken health function reads as not ready, never as a dead server
            log.exception("agent health check failed")
            health = {"status": "error"}
        status = "200 OK" if health.get("status") == "ok" else "503 Service Unavailable"
        body = json.dumps(health).encode()
        return _reply(start_response, status, body, method, content_type="application/json")


def _reply(
    start_response: Callable,
    status: str,
    body: bytes,
    method: str,
    headers: list[tuple[str, str]] | None = None,
    content_type: str = "text/plain; charset=utf-8",
) -> Iterable[bytes]:
    start_response(status, [("Content-Type", content_type), ("Content-Length", str(len(body))), *(headers or [])])
    return [] if method == "HEAD" else [body]
