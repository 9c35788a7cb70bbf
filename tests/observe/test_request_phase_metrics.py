"""vLLM's request-level histograms on an agent's /metrics: each finished request's phases by vLLM's rules, its sizes
(buckets up to the model's context), and the tokens of each engine step."""

from __future__ import annotations

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.node_core import EngineObservation, FinishedRequest, NodeCore
from backends.fake import build_trivial_engine, cpu_test_hardware
from engine.request_output import RequestMetrics
from engine.sampling_params import SamplingParams
from engine.scheduler_stats import SchedulerStats
from observe import metrics_names as m
from observe.agent_exporter import AgentExporter
from transport.messages import KVInfo, NodeHello

STATS = SchedulerStats(*([0] * 3), 0.0, *([0] * 10))


def exporter(max_model_len: int = 100) -> AgentExporter:
    e = AgentExporter()
    hello = NodeHello(request_id="", node_id="n0", model="m", backend="torch", hardware=cpu_test_hardware(),
                      kv=KVInfo(8, 0, 4, 256), max_model_len=max_model_len, power_score=1.0, cell="c")  # fmt: skip
    e.describe_node(hello)
    return e


def finished(metrics: RequestMetrics | None, prompt: int = 7, output: int = 4) -> FinishedRequest:
    return FinishedRequest(
        queue_time_s=metrics.queue_time_s if metrics else None,
        ttft_s=metrics.ttft_s if metrics else None,
        e2e_s=metrics.e2e_s if metrics else None,
        num_prompt_tokens=prompt,
        num_output_tokens=output,
        finish_reason="length",
        metrics=metrics,
    )


def histograms(e: AgentExporter) -> dict[str, dict[str, float]]:
    """family → {"count", "sum", "le=<bound>"...} of its one series."""
    out: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(generate_latest(e.registry).decode()):
        for s in family.samples:
            if s.name.endswith("_count"):
                out.setdefault(family.name, {})["count"] = s.value
            elif s.name.endswith("_sum"):
                out.setdefault(family.name, {})["sum"] = s.value
            elif s.name.endswith("_bucket"):
                out.setdefault(family.name, {})["le=" + s.labels["le"]] = s.value
    return out


def test_a_finished_request_is_split_into_vllms_phases():
    e = exporter()
    metrics = RequestMetrics(arrival_time_s=10.0, first_scheduled_time_s=10.5, first_token_time_s=11.25,
                             last_token_time_s=12.75, finished_time_s=12.75, num_output_tokens=4,
                             max_tokens=16)  # fmt: skip
    e.observe(EngineObservation(STATS, [], [finished(metrics)], []))
    h = histograms(e)
    assert h[m.REQUEST_PREFILL_TIME]["count"] == 1 and h[m.REQUEST_PREFILL_TIME]["sum"] == 0.75
    assert h[m.REQUEST_DECODE_TIME]["sum"] == 1.5
    assert h[m.REQUEST_INFERENCE_TIME]["sum"] == 2.25
    assert h[m.REQUEST_TIME_PER_OUTPUT_TOKEN]["sum"] == pytest.approx(0.5)  # 1.5 s over the 3 tokens after the first
    assert h[m.REQUEST_QUEUE_TIME]["sum"] == 0.5
    assert h[m.REQUEST_PROMPT_TOKENS]["sum"] == 7 and h[m.REQUEST_PROMPT_TOKENS]["le=10.0"] == 1
    assert h[m.REQUEST_PROMPT_TOKENS]["le=5.0"] == 0
    assert h[m.REQUEST_GENERATION_TOKENS]["sum"] == 4
    assert h[m.REQUEST_PARAMS_MAX_TOKENS]["sum"] == 16
    for name in (m.REQUEST_PROMPT_TOKENS, m.REQUEST_GENERATION_TOKENS, m.REQUEST_PARAMS_MAX_TOKENS):
        assert {k for k in h[name] if k.startswith("le=")} == {
            "le=1.0", "le=2.0", "le=5.0", "le=10.0", "le=20.0", "le=50.0", "le=100.0", "le=+Inf"
        }  # fmt: skip


def test_phases_are_observed_only_as_far_as_the_request_got():
    e = exporter()
    never_scheduled = RequestMetrics(arrival_time_s=1.0, finished_time_s=2.0)  # aborted while waiting
    no_token = RequestMetrics(arrival_time_s=1.0, first_scheduled_time_s=1.5, finished_time_s=2.0)  # aborted in prefill
    one_token = RequestMetrics(arrival_time_s=1.0, first_scheduled_time_s=1.5, first_token_time_s=2.0,
                               last_token_time_s=2.0, finished_time_s=2.0, num_output_tokens=1)  # fmt: skip
    e.observe(EngineObservation(STATS, [], [finished(never_scheduled, output=0), finished(no_token, output=0),
                                            finished(one_token, output=1), finished(None, output=0)], []))  # fmt: skip
    h = histograms(e)
    assert h[m.REQUEST_PREFILL_TIME]["count"] == 1 and h[m.REQUEST_PREFILL_TIME]["sum"] == 0.5
    assert h[m.REQUEST_DECODE_TIME]["count"] == 1 and h[m.REQUEST_DECODE_TIME]["sum"] == 0.0
    assert h[m.REQUEST_INFERENCE_TIME]["count"] == 1
    assert m.REQUEST_TIME_PER_OUTPUT_TOKEN not in h  # one token: no time per output token after the first
    assert h[m.REQUEST_QUEUE_TIME]["count"] == 2  # scheduled ones only
    assert h[m.REQUEST_PROMPT_TOKENS]["count"] == 4  # every finished request's sizes
    assert m.REQUEST_PARAMS_MAX_TOKENS not in h  # no max_tokens known (0): not observed


def test_each_engine_step_observes_its_tokens_as_vllm_counts_them():
    """A step's sampled tokens, plus each prompt whose first token it sampled; a report tick observes nothing."""
    core = NodeCore(build_trivial_engine(0.0), "n0", observe=True)
    core.add("a", list(range(1, 6)), SamplingParams(max_tokens=3))
    core.add("b", list(range(1, 4)), SamplingParams(max_tokens=3))
    per_step = []
    while core.has_work():
        outputs = core.step()
        per_step.append(core.observation(outputs, 0.0).iteration_tokens)
    assert per_step[0] == (5 + 1) + (3 + 1)  # both prompts prefilled, a first token each
    assert per_step[1:] == [2, 2]  # then one decode token each
    assert core.stats_observation().iteration_tokens is None
    e = exporter()
    e.observe(EngineObservation(STATS, [], [], [], iteration_tokens=per_step[0]))
    e.observe(core.stats_observation())
    h = histograms(e)
    assert h[m.ITERATION_TOKENS]["count"] == 1 and h[m.ITERATION_TOKENS]["sum"] == 10
    assert h[m.ITERATION_TOKENS]["le=8.0"] == 0 and h[m.ITERATION_TOKENS]["le=16.0"] == 1


def test_the_engine_records_the_max_tokens_of_a_finished_request():
    core = NodeCore(build_trivial_engine(0.0), "n0", observe=True)
    core.add("a", [1, 2, 3], SamplingParams(max_tokens=2))
    done = []
    while core.has_work():
        done += core.observation(core.step(), 0.0).finished
    (r,) = done
    assert r.metrics is not None and r.metrics.max_tokens == 2 and r.num_output_tokens == 2
    assert r.metrics.prefill_time_s is not None and r.metrics.inference_time_s >= r.metrics.decode_time_s >= 0.0


@pytest.mark.parametrize("max_model_len, last", [(1, 1), (8192, 5000), (131072, 100000)])
def test_token_count_buckets_are_vllms_1_2_5_series_up_to_the_context(max_model_len, last):
    buckets = m.token_count_buckets(max_model_len)
    assert buckets[0] == 1 and buckets[-1] == last and list(buckets) == sorted(set(buckets))
    assert all(str(b)[0] in "125" and set(str(b)[1:]) <= {"0"} for b in buckets)
