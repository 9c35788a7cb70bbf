"""SpanExport (observe/span_export.py): finished spans reach a collector over OTLP/HTTP with their ids, parent,
kind, status, attributes and events; unsampled ones never leave; a full queue drops and counts instead of
blocking; a collector that is down costs no caller anything."""

from __future__ import annotations

import threading

import pytest
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from prometheus_client import CollectorRegistry

from observe.exporter import SnapshotCollector
from observe.otlp_receiver import OtlpReceiver
from observe.span_export import SpanExport, TracingConfig
from observe.span_metrics import span_metrics
from transport.trace_context import SpanRecord, TraceContext, child_of


def _record(ctx: TraceContext, name: str = "llm_request", **more) -> SpanRecord:
    return SpanRecord(name, ctx, 1_000, 5_000, {"gen_ai.request.id": "r1", "skipped": None, "n": 3}, **more)


def test_spans_reach_the_collector_with_their_tree_and_attributes():
    with OtlpReceiver() as rx:
        export = SpanExport(TracingConfig(endpoint=rx.endpoint, service_name="zoo-test", schedule_delay_s=0.05))
        parent = child_of({"traceparent": f"00-{7:032x}-{9:016x}-01", "tracestate": "k=v"})
        child = child_of(parent.headers())
        export.emit(_record(parent, events=[("routed", 2_000, {"zoo.node_id": "a"})]))
        export.emit(_record(child, "node_request", kind="internal", error="failed: node lost"))
        export.close()  # flushes
        spans = rx.wait_for(lambda s: len(s) == 2)
    by_name = {s["name"]: s for s in spans}
    top, node = by_name["llm_request"], by_name["node_request"]
    assert (top["trace_id"], top["parent_span_id"], top["span_id"]) == (7, 9, parent.span_id)
    assert (node["trace_id"], node["parent_span_id"]) == (7, parent.span_id)
    assert top["service"] == "zoo-test" and top["kind"] == "server" and node["kind"] == "internal"
    assert (top["start_ns"], top["end_ns"]) == (1_000, 5_000)
    assert top["attributes"] == {"gen_ai.request.id": "r1", "n": 3}  # None left out
    assert top["events"] == [("routed", 2_000, {"zoo.node_id": "a"})]
    assert top["error"] is None and node["error"] == "failed: node lost"
    assert top["trace_state"] == "k=v"
    assert export.emitted == 2 and export.dropped == 0


def test_an_unsampled_trace_sends_nothing():
    with OtlpReceiver() as rx:
        export = SpanExport(TracingConfig(endpoint=rx.endpoint, service_name="zoo-test", schedule_delay_s=0.05))
        export.emit(_record(child_of({"traceparent": f"00-{7:032x}-{9:016x}-00"})))
        export.emit(_record(child_of(None)))  # the one sampled
        export.close()
        spans = rx.wait_for(lambda s: len(s) >= 1)
    assert len(spans) == 1 and spans[0]["trace_id"] != 7
    assert (export.unsampled, export.emitted) == (1, 1)


class _Stuck(SpanExporter):
    """A collector that takes the first batch and never answers (until released)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.got: list = []

    def export(self, spans):
        self.got += spans
        self.release.wait(30)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        self.release.set()


def test_a_stuck_collector_fills_the_queue_and_further_spans_are_dropped_and_counted():
    stuck = _Stuck()
    export = SpanExport(
        TracingConfig(endpoint="http://127.0.0.1:9/v1/traces", service_name="t", max_queue_size=2), exporter=stuck
    )
    for _ in range(20):
        export.emit(_record(child_of(None)))  # never blocks the caller
    # at most one batch (2) is with the collector and the queue holds 2: the rest were turned away
    assert export.dropped >= 16 and export.emitted + export.dropped == 20
    stuck.release.set()
    export.close()
    export.emit(_record(child_of(None)))  # after close: nothing, no error
    assert export.emitted + export.dropped == 20
    registry = CollectorRegistry()
    registry.register(SnapshotCollector(span_metrics(export)))
    sample = registry.get_sample_value
    assert sample("zoo:trace_spans_total", {"service": "t", "outcome": "dropped"}) == export.dropped
    assert sample("zoo:trace_spans_total", {"service": "t", "outcome": "queued"}) == export.emitted
    assert sample("zoo:trace_exports_total", {"service": "t", "result": "success"}) >= 1


def test_a_collector_that_is_down_never_raises_into_the_caller():
    export = SpanExport(TracingConfig(endpoint="http://127.0.0.1:9/v1/traces", service_name="t", timeout_s=0.5))
    export.emit(_record(child_of(None)))
    export.close()  # the export fails (connection refused) inside the SDK's thread; close returns
    assert export.emitted == 1 and export.export_batches == {"success": 0, "failure": 1}


def test_the_config_refuses_what_is_not_an_http_url():
    for endpoint in ("collector:4317", "grpc://c:4317", ""):
        with pytest.raises(ValueError, match="http"):
            TracingConfig(endpoint=endpoint, service_name="t")
    with pytest.raises(ValueError):
        TracingConfig(endpoint="http://c/v1/traces", service_name="t", max_queue_size=0)


def test_a_callers_long_text_is_cut_and_a_span_that_cannot_be_made_is_dropped_not_raised():
    with OtlpReceiver() as rx:
        export = SpanExport(TracingConfig(endpoint=rx.endpoint, service_name="t", schedule_delay_s=0.05))
        long = _record(child_of(None))
        long.attributes["gen_ai.request.model"] = "m" * 1_000_000  # a refused request's model name, say
        long.attributes["gen_ai.response.finish_reasons"] = ["x" * 10_000]
        export.emit(long)
        broken = _record(child_of(None), events=[("no time, no attributes",)])
        export.emit(broken)  # logged, counted, never raised into the request path
        export.close()
        (span,) = rx.wait_for(lambda s: len(s) == 1)
    assert len(span["attributes"]["gen_ai.request.model"]) < 300
    assert len(span["attributes"]["gen_ai.response.finish_reasons"][0]) < 300
    assert (export.emitted, export.dropped) == (1, 1)


def test_the_demo_collector_refuses_what_is_not_an_export():
    import urllib.error
    import urllib.request

    with OtlpReceiver() as rx:
        request = urllib.request.Request(rx.endpoint, data=b"\xff\x00 not protobuf", method="POST")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 400 and rx.refused == 1 and rx.spans == []
