"""A simulated run's requests as spans (sim/sim_spans.py): each request's ``llm_request`` span with the control
plane's attributes at virtual times, refusals as errors, the sample ratio by trace id (the same requests for the
same seed), flushes between batches; and `zoo sim --otlp-traces-endpoint` end to end into an OTLP collector."""

from __future__ import annotations

import argparse

import pytest

from observe.otlp_receiver import OtlpReceiver
from sim.cli import add_sim_args, run_sim
from sim.des import FleetSimulator
from sim.sim_spans import emit_sim_spans
from zoo.cli import main

EPOCH_NS = 1_700_000_000_000_000_000


class _Sink:
    def __init__(self) -> None:
        self.spans, self.flushes = [], 0

    def emit(self, record) -> None:
        self.spans.append(record)

    def flush(self) -> None:
        self.flushes += 1


def test_each_request_is_a_span_at_its_virtual_times(small_fleet, tiny_workload):
    result = FleetSimulator(small_fleet(), tiny_workload(num=30), "round_robin", seed=3).run()
    sink = _Sink()
    assert emit_sim_spans(result, sink, epoch_ns=EPOCH_NS, seed=3, model="sim:llama-3-8b", batch=8) == 30
    assert sink.flushes == 3 + 1  # after each 8, then at the end
    by_id = {span.attributes["gen_ai.request.id"]: span for span in sink.spans}
    for record in result.records:
        span = by_id[record.req_id]
        assert span.name == "llm_request" and span.kind == "server" and span.error is None
        assert span.context.parent_span_id == 0 and span.context.sampled  # a root, as a request without traceparent
        assert span.start_ns == EPOCH_NS + round(record.arrival_s * 1e9)
        assert span.end_ns == EPOCH_NS + round(record.finish_s * 1e9)
        a = span.attributes
        assert a["gen_ai.latency.time_to_first_token"] == pytest.approx(record.ttft_s)
        assert a["gen_ai.latency.e2e"] == pytest.approx(record.e2e_s)
        assert (a["gen_ai.usage.completion_tokens"], a["zoo.node_id"], a["zoo.outcome"]) == (
            20,
            record.node_id,
            "completed",
        )
        assert (a["zoo.sim.policy"], a["zoo.sim.seed"], a["zoo.sim.trace"]) == ("round_robin", 3, "tiny")
        assert [name for name, _, _ in span.events] == ["routed", "first_token"]
        assert span.events[1][1] == EPOCH_NS + round(record.first_token_s * 1e9)
    assert len({span.context.trace_id for span in sink.spans}) == 30  # a trace each


def test_the_sample_ratio_keeps_the_same_requests_for_the_same_seed(small_fleet, tiny_workload):
    result = FleetSimulator(small_fleet(), tiny_workload(num=200, gap_s=0.01), "round_robin", seed=1).run()
    kept = []
    for _ in range(2):
        sink = _Sink()
        emit_sim_spans(result, sink, epoch_ns=EPOCH_NS, seed=1, model="m", sample_ratio=0.25)
        kept.append([span.attributes["gen_ai.request.id"] for span in sink.spans])
    assert kept[0] == kept[1] and 20 < len(kept[0]) < 80  # about a quarter, the same ones
    sink = _Sink()
    assert emit_sim_spans(result, sink, epoch_ns=EPOCH_NS, seed=1, model="m", sample_ratio=0.0) == 0


def test_a_refused_request_is_an_error_span(small_fleet, tiny_workload):
    fleet = small_fleet([{"name": "c", "pools": [{"gpu": "l4"}]}])
    result = FleetSimulator(fleet, tiny_workload(num=2, prompt=100_000), "round_robin").run()  # longer than any node
    sink = _Sink()
    emit_sim_spans(result, sink, epoch_ns=EPOCH_NS, seed=0, model="m")
    span = sink.spans[0]
    assert span.attributes["zoo.outcome"] == "refused" and span.error.startswith(span.attributes["zoo.error_code"])
    assert span.start_ns == span.end_ns and "gen_ai.usage.prompt_tokens" not in span.attributes


def test_zoo_sim_sends_its_spans_to_a_collector(capsys):
    with OtlpReceiver() as rx:
        argv = ["sim", "--fleet", "small", "--trace", "poisson", "--load", "0.5", "--duration", "8", "--policy",
                "round_robin", "--json", "--otlp-traces-endpoint", rx.endpoint]  # fmt: skip
        assert main(argv) == 0
        out = capsys.readouterr()
        sent = int(out.err.split("spans: ")[1].split(" ")[0])
        spans = rx.wait_for(lambda s: len(s) >= sent)
    assert sent > 10 and len(spans) == sent
    assert {s["service"] for s in spans} == {"zoo-sim"} and {s["name"] for s in spans} == {"llm_request"}
    assert {s["attributes"]["zoo.sim.policy"] for s in spans} == {"round_robin"}


def test_spans_need_the_runs_in_this_process(capsys):
    parser = argparse.ArgumentParser()
    add_sim_args(parser)
    argv = ["--fleet", "small", "--trace", "poisson", "--duration", "2", "--seeds", "2", "--jobs", "2", "--json"]
    args = parser.parse_args(argv)
    args.otlp_traces_endpoint = "http://127.0.0.1:9/v1/traces"  # the flag: refused
    assert run_sim(args, spans=_Sink()) == 2
    assert "needs --jobs 1" in capsys.readouterr().err
    sink = _Sink()
    assert run_sim(parser.parse_args(argv), spans=sink) == 0  # OpenTelemetry's environment: runs, without spans
    assert "no spans with --jobs other than 1" in capsys.readouterr().err and not sink.spans
