"""The base of the Prometheus exporters: a private registry, snapshot-backed collectors, and two ways
to serve ``/metrics``.

    core (plain snapshots / events) ──► exporter.observe*(…) / snapshot callables ──► CollectorRegistry
                                                                                         │
    control plane: create_app(metrics_app=exporter.asgi_app(...)) ── GET /metrics ◄──────┤
    agent:         exporter.serve(host, port)  (an HTTP server thread: observe/metrics_http.py) ◄┘

Histograms are prometheus_client objects fed with events (thread-safe). Gauges and counters whose
truth is a snapshot (the scheduler's totals, the dispatcher's rejection counts) are produced at scrape
time by a ``SnapshotCollector`` from the latest snapshot: no double bookkeeping, and a counter can
never drift from the core's own count.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, make_asgi_app
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from observe.metrics_http import serve_metrics

log = logging.getLogger(__name__)


class SnapshotCollector(Collector):
    """Calls ``collect_fn()`` at every scrape; it yields finished metric families (GaugeMetricFamily …)."""

    def __init__(self, collect_fn: Callable[[], Iterable[Metric]]) -> None:
        self._collect_fn = collect_fn

    def collect(self) -> Iterable[Metric]:
        try:
            yield from self._collect_fn()
        except Exception:  # a broken snapshot must not take the whole scrape down
            log.exception("metrics snapshot failed")

    def describe(self) -> Iterable[Metric]:
        return ()  # unchecked: families depend on the snapshot (no name-collision check at registration)


class PrometheusExporter:
    """A private registry (never the process-global one: tests run many exporters in one process)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.url = ""  # where /metrics is served, once known
        self._server: Any = None
        self._thread: threading.Thread | None = None

    def render(self) -> bytes:
        """The text exposition, as a scrape would see it."""
        return generate_latest(self.registry)

    def asgi_app(self, before_scrape: Callable[[], None] | None = None):
        """An ASGI app for ``/metrics``; ``before_scrape`` runs first (e.g. drain the core's events)."""
        app = make_asgi_app(self.registry)
        if before_scrape is None:
            return app

        async def scrape(scope, receive, send) -> None:
            if scope["type"] == "http":
                before_scrape()
            await app(scope, receive, send)

        return scrape

    def serve(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Serve /metrics on ``host:port`` (0: a free port) in a daemon thread; returns the URL."""
        self._server, self._thread = serve_metrics(self.registry, host, port)  # HEAD and OPTIONS too
        bound_port = self._server.server_address[1]
        self.url = f"http://{host}:{bound_port}/metrics"
        return self.url

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None
