"""A process's OpenTelemetry spans on its /metrics (observe/span_export.py's counts):

    zoo:trace_spans_total{service, outcome}    counter: spans queued for export, dropped (the queue was full: the
                                               collector is down or slow), not recorded (the caller did not sample)
    zoo:trace_exports_total{service, result}   counter: export batches the collector took ("success") or not
                                               ("failure": refused, unreachable, timed out)

Registered beside the process's own metrics: the control plane's exporter (zoo/serve.py) and an agent's
(zoo/agent_cmd.py), when it runs with ``--otlp-traces-endpoint``.
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily
from prometheus_client.metrics_core import Metric

from observe import metrics_names as m
from observe.span_export import SpanExport


def span_metrics(export: SpanExport):
    """The collect function (observe/exporter.py SnapshotCollector) for ``export``."""
    service = export.config.service_name

    def collect() -> Iterable[Metric]:
        spans = CounterMetricFamily(
            m.TRACE_SPANS, "Request spans, by what became of them.", labels=["service", "outcome"]
        )
        for outcome, n in (("queued", export.emitted), ("dropped", export.dropped), ("unsampled", export.unsampled)):
            spans.add_metric([service, outcome], n)
        yield spans
        batches = CounterMetricFamily(
            m.TRACE_EXPORTS, "Span batches sent to the collector.", labels=["service", "result"]
        )
        for result, n in export.export_batches.items():
            batches.add_metric([service, result], n)
        yield batches

    return collect
