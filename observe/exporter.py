"""The base of the Prometheus exporters: a private registry, snapshot-backed collectors, and two ways
to serve ``/metrics``.

    core (plain snapshots / events) ──► exporter.observe*(…) / snapshot callables ──► CollectorRegistry
                                                                                         │
    control plane: create_app(metrics_app=exporter.asgi_app(...)) ── GET /metrics ◄──────┤
    agent:         AgentHttpServer(exporter, health).serve(host, port)  (observe/agent_http.py) ◄┘

Histograms are prometheus_client objects fed with events (thread-safe). Gauges and counters whose
truth is a snapshot (the scheduler's totals, the dispatcher's rejection counts) are produced at scrape
time by a ``SnapshotCollector`` from the latest snapshot: no double bookkeeping, and a counter can
never drift from the core's own count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, make_asgi_app
from prometheus_client.exposition import generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from observe.exposition_names import asgi_keeping_names

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
        self.url = ""  # where /metrics is served, once known (set by observe/agent_http.py)

    def render(self) -> bytes:
        """The text exposition, as a scrape would see it."""
        return generate_latest(self.registry)

    def asgi_app(self, before_scrape: Callable[[], None] | None = None):
        """An ASGI app for ``/metrics``; ``before_scrape`` runs first (e.g. drain the core's events)."""
        app = asgi_keeping_names(make_asgi_app(self.registry))  # vllm:* stays vllm:* in OpenMetrics
        if before_scrape is None:
            return app

        async def scrape(scope, receive, send) -> None:
            if scope["type"] == "http":
                before_scrape()
            await app(scope, receive, send)

        return scrape
