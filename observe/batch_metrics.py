"""The gateway's OpenAI batches and files on the control plane's /metrics (gateway/batch_runner.py, file_store.py).

    zoo:batches{status}                          gauge: batches kept, by status (validating ... cancelled)
    zoo:batch_requests_total{outcome}            counter: requests batches have answered, "completed" (2xx) or
                                                 "failed" (any other answer, or left unrun when a window closed)
    zoo:batch_requests_waiting                   gauge: requests of unfinished batches not answered yet
    zoo:files, zoo:files_bytes                   gauges: files kept (uploads and batch results) and their bytes
    zoo:files_expired_total                      counter: files deleted when their expires_after ran out
    zoo:uploads_pending, zoo:uploads_pending_bytes   gauges: OpenAI Uploads not completed yet and the bytes of their
                                                 parts, held in memory (against GatewayConfig.uploads_pending_bytes)
    zoo:uploads_expired_total                    counter: uploads that expired (an hour) before they were completed

A batch's requests are the fleet's like any other (its traffic class's series count them too); these say how far
the batches are. Registered on the control plane's exporter beside its own (zoo/serve.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from controlplane.gateway.batch_runner import BatchRunner
from controlplane.gateway.batches import STATUSES
from controlplane.gateway.uploads import Uploads
from observe import metrics_names as m


def batch_metrics(runner: BatchRunner, uploads: Uploads | None = None):
    """The collect function (observe/exporter.py SnapshotCollector) for ``runner``, its file store and the uploads
    into it."""

    def collect() -> Iterable[Metric]:
        stats = runner.stats()
        batches = GaugeMetricFamily(m.BATCHES, "OpenAI batches kept, by status.", labels=["status"])
        for status in STATUSES:
            batches.add_metric([status], stats["batches"].get(status, 0))
        yield batches
        answered = CounterMetricFamily(m.BATCH_REQUESTS, "Requests OpenAI batches answered.", labels=["outcome"])
        for outcome, n in stats["answered"].items():
            answered.add_metric([outcome], n)
        yield answered
        yield GaugeMetricFamily(m.BATCH_REQUESTS_WAITING, "Requests of unfinished batches not answered yet.",
                                value=stats["waiting"])  # fmt: skip
        yield GaugeMetricFamily(m.FILES, "Files kept (uploads and batch results).", value=len(runner.files))
        yield GaugeMetricFamily(m.FILES_BYTES, "Bytes of the files kept.", value=runner.files.num_bytes)
        yield CounterMetricFamily(m.FILES_EXPIRED, "Files deleted when their expiry came.",
                                  value=runner.files.num_expired)  # fmt: skip
        if uploads is not None:
            yield GaugeMetricFamily(m.UPLOADS_PENDING, "Uploads not completed yet.", value=uploads.num_pending)
            yield GaugeMetricFamily(m.UPLOADS_PENDING_BYTES, "Bytes of the parts of uploads not completed yet.",
                                    value=uploads.pending_bytes)  # fmt: skip
            yield CounterMetricFamily(m.UPLOADS_EXPIRED, "Uploads that expired before they were completed.",
                                      value=uploads.num_expired)  # fmt: skip

    return collect
