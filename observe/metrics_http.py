"""An agent's /metrics over HTTP: prometheus_client's exposition with HEAD and OPTIONS answered as HTTP says.

prometheus_client's WSGI app answers HEAD with ``405`` *and a body*, which a HEAD response must not have
(aiohttp, used by some scrapers and load generators, rejects the connection), and OPTIONS with ``200``.
``metrics_wsgi_app`` wraps it:

    GET      the exposition (any path, as prometheus_client serves it; /favicon.ico: empty)
    HEAD     the GET's status and headers (Content-Length included), no body
    OPTIONS  204, Allow: GET, HEAD, OPTIONS
    other    405, Allow: GET, HEAD, OPTIONS (a one-line text body)

``serve_metrics`` serves it in a daemon thread (prometheus_client's threading WSGI server, quiet handler).
"""

from __future__ import annotations

import socket
import threading
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

ALLOW = "GET, HEAD, OPTIONS"


def metrics_wsgi_app(registry: CollectorRegistry):
    inner = make_wsgi_app(registry)

    def app(environ, start_response):
        method = environ.get("REQUEST_METHOD", "GET")
        if method == "OPTIONS":
            start_response("204 No Content", [("Allow", ALLOW)])
            return [b""]
        if method not in ("GET", "HEAD"):
            body = f"{method} is not allowed here; use {ALLOW}\n".encode()
            headers = [("Allow", ALLOW), ("Content-Type", "text/plain; charset=utf-8")]
            start_response("405 Method Not Allowed", [*headers, ("Content-Length", str(len(body)))])
            return [body]
        captured: list = []
        output = b"".join(inner({**environ, "REQUEST_METHOD": "GET"}, lambda s, h, *e: captured.extend((s, h))))
        status, headers = captured
        headers = [(k, v) for k, v in headers if k.lower() != "content-length"]
        start_response(status, [*headers, ("Content-Length", str(len(output)))])
        return [b""] if method == "HEAD" else [output]

    return app


class _ThreadingWSGIServer6(ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args) -> None:
        pass


def serve_metrics(registry: CollectorRegistry, host: str, port: int) -> tuple[ThreadingWSGIServer, threading.Thread]:
    """Serve ``registry`` on host:port (0: a free port) in a daemon thread; (server, thread)."""
    server_class = _ThreadingWSGIServer6 if ":" in host else ThreadingWSGIServer  # an IPv6 address
    server = make_server(host, port, metrics_wsgi_app(registry), server_class, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, name="zoo-metrics-http", daemon=True)
    thread.start()
    return server, thread
