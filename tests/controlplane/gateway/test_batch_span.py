"""An OpenAI batch's own OpenTelemetry span (gateway/batch_span.py): a child of the creating request's HTTP span, the
parent of every one of its requests' spans, recorded once when the batch ends with its counts and usage; an
unsampled caller's batch records nothing; a batch begun without tracing has no span."""

from __future__ import annotations

import time

import msgspec
import openai

from controlplane.gateway import create_app
from controlplane.gateway.batch_span import BatchSpans, context_of
from controlplane.gateway.batches import Batch
from controlplane.request_spans import RequestSpans
from transport.trace_context import SpanRecord, incoming

MODEL = "smol"
CALLER = f"00-{0xABC:032x}-{0x123:016x}-01"


class Sink:
    def __init__(self) -> None:
        self.records: list[SpanRecord] = []

    def emit(self, record: SpanRecord) -> None:
        self.records.append(record)


def _batch(**fields) -> Batch:
    return Batch("batch_1", None, "/v1/chat/completions", "file-1", "24h", 100, 200, None, **fields)


def test_begin_makes_the_batch_a_child_of_the_caller_and_end_records_it_once():
    sink = Sink()
    spans = BatchSpans(sink)
    batch = _batch(tenant="acme")
    spans.begin(batch, {"traceparent": CALLER, "tracestate": "a=1"}, now_ns=5_000)
    own = incoming(batch.trace_headers)
    assert own.trace_id == 0xABC and own.span_id != 0x123  # its requests hang under the batch's own span
    assert (batch.trace_parent_span_id, batch.trace_headers["tracestate"]) == (0x123, "a=1")
    batch.total, batch.completed, batch.failed = 3, 2, 1
    batch.usage.update(input_tokens=30, output_tokens=12)
    batch.set_status("completed")
    spans.end(batch, now_ns=9_000)
    (record,) = sink.records
    assert (record.name, record.kind, record.error, record.start_ns, record.end_ns) == (
        "batch",
        "internal",
        None,
        5_000,
        9_000,
    )
    assert record.context == context_of(batch) and record.context.parent_span_id == 0x123
    attributes = record.attributes
    assert (attributes["zoo.batch.requests.total"], attributes["zoo.batch.requests.failed"]) == (3, 1)
    assert (attributes["gen_ai.usage.prompt_tokens"], attributes["zoo.tenant"]) == (30, "acme")


def test_a_failed_batch_is_an_error_and_an_unsampled_or_untraced_one_records_nothing():
    sink = Sink()
    spans = BatchSpans(sink, sample_ratio=1.0)
    failed = _batch()
    spans.begin(failed, None)  # no caller: a new trace
    assert incoming(failed.trace_headers).trace_id != 0xABC and failed.trace_parent_span_id == 0
    failed.errors = [{"code": "invalid_json_line", "line": 1}]
    failed.set_status("failed")
    spans.end(failed)
    assert sink.records[-1].error == "failed: invalid_json_line"
    unsampled = _batch()
    spans.begin(unsampled, {"traceparent": CALLER[:-2] + "00"})
    spans.end(unsampled)
    untraced = _batch(trace_headers={"traceparent": CALLER})  # created by a gateway that did not trace
    spans.end(untraced)
    assert len(sink.records) == 1 and context_of(untraced) is None
    journaled = msgspec.json.decode(msgspec.json.encode(failed), type=Batch)  # its ids survive a restart
    assert context_of(journaled) == context_of(failed)


def _wait(client: openai.OpenAI, batch_id: str):
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        batch = client.batches.retrieve(batch_id)
        if batch.status in ("completed", "failed"):
            return batch
        time.sleep(0.02)
    raise AssertionError(f"batch {batch_id} did not end")


def test_through_the_gateway_the_batch_span_parents_its_requests(frontend, serve):
    sink = Sink()
    frontend.request_spans = RequestSpans(sink)  # a control plane that traces (--otlp-traces-endpoint)
    lines = b"".join(
        msgspec.json.encode({"custom_id": c, "method": "POST", "url": "/v1/chat/completions",
                             "body": {"model": MODEL, "messages": [{"role": "user", "content": c}]}}) + b"\n"
        for c in ("a", "b")
    )  # fmt: skip
    with serve(create_app(frontend)) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as c:
        upload = c.files.create(file=("in.jsonl", lines), purpose="batch")
        created = c.batches.create(
            input_file_id=upload.id, endpoint="/v1/chat/completions", completion_window="24h",
            extra_headers={"traceparent": CALLER},
        )  # fmt: skip
        assert _wait(c, created.id).status == "completed"
    (record,) = [r for r in sink.records if r.name == "batch"]
    (create,) = [r for r in sink.records if r.name == "POST /v1/batches"]  # the creating request's HTTP span
    assert (create.context.trace_id, create.context.parent_span_id) == (0xABC, 0x123)
    assert record.context.trace_id == 0xABC and record.context.parent_span_id == create.context.span_id
    assert record.attributes["zoo.batch.requests.completed"] == 2
    parents = {incoming(call["trace_headers"]).span_id for call in frontend.calls}
    assert parents == {record.context.span_id}  # both requests are the batch span's children
