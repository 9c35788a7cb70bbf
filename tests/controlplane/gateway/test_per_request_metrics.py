"""vLLM's ``--enable-per-request-metrics`` (controlplane/gateway/request_timing.py): a reply's ``metrics`` from the
phases its node measured, by vLLM's rules; on the whole object or a stream's final usage chunk, for one choice of one
prompt only; a peer's figure that is no duration is not taken."""

from __future__ import annotations

import math

import httpx
import msgspec
import openai
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from controlplane.gateway.request_timing import FIELDS, per_request_metrics
from transport.messages import RequestTiming
from zoo.cli import build_parser
from zoo.gateway_args import gateway_config_from_args

TIMING = RequestTiming(queue_s=0.25, prefill_s=0.125, decode_s=0.5, num_output_tokens=5)
METRICS = {
    "queue_time_ms": 250.0,
    "time_to_first_token_ms": 125.0,  # vLLM's: first scheduled → first token (the queue is not in it)
    "generation_time_ms": 500.0,
    "mean_itl_ms": 125.0,  # 500 ms over the 4 gaps between 5 tokens
    "tokens_per_second": 8.0,  # 5 tokens over the 0.625 s from first scheduled to the last token
}


def test_vllms_rules_from_the_phases():
    assert per_request_metrics(TIMING) == METRICS
    assert per_request_metrics(None) == dict.fromkeys(FIELDS)  # a node that did not say: every field null
    one_token = per_request_metrics(RequestTiming(queue_s=0.0, prefill_s=0.5, decode_s=0.0, num_output_tokens=1))
    assert one_token["mean_itl_ms"] is None and one_token["tokens_per_second"] == 2.0
    never_ran = per_request_metrics(RequestTiming(queue_s=1.0))  # aborted while queued
    assert never_ran == {**dict.fromkeys(FIELDS), "queue_time_ms": 1000.0}


@pytest.mark.parametrize("bad", [math.nan, math.inf, -1.0])
def test_a_figure_that_is_no_duration_is_not_taken(bad):
    metrics = per_request_metrics(RequestTiming(queue_s=bad, prefill_s=0.5, decode_s=bad, num_output_tokens=3))
    assert metrics["queue_time_ms"] is None and metrics["generation_time_ms"] is None
    assert metrics["mean_itl_ms"] is None and metrics["tokens_per_second"] is None
    assert metrics["time_to_first_token_ms"] == 500.0


def _timed(chunks):
    return [*chunks[:-1], msgspec.structs.replace(chunks[-1], timing=TIMING)]


@pytest.mark.anyio
async def test_replies_carry_the_metrics_only_when_asked_and_only_for_one_choice(make_frontend, script):
    frontend = make_frontend(chunks=_timed(script("a", "b")))
    chat = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}
    for config, body, expected in [
        (GatewayConfig(per_request_metrics=True), chat, METRICS),
        (GatewayConfig(), chat, None),  # off by default, as vLLM's
        (GatewayConfig(per_request_metrics=True), {**chat, "n": 2}, None),  # each choice's times are its own
    ]:
        transport = httpx.ASGITransport(app=create_app(frontend, config=config))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
            reply = (await c.post("/v1/chat/completions", json=body)).json()
            assert reply.get("metrics") == expected
            completion = {"model": "smol", "prompt": ["x", "y"] if "n" in body else "x"}
            reply = (await c.post("/v1/completions", json=completion)).json()
            assert reply.get("metrics") == expected  # a batch of prompts: none, as vLLM's


def test_a_stream_carries_them_on_its_final_usage_chunk(make_frontend, script, serve):
    frontend = make_frontend(chunks=_timed(script("a", "b")))
    body = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    body["stream_options"] = {"include_usage": True}
    with serve(create_app(frontend, config=GatewayConfig(per_request_metrics=True))) as url:
        with httpx.stream("POST", url + "/v1/chat/completions", json=body) as response:
            events = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
        objects = [msgspec.json.decode(e) for e in events[:-1]]
        assert events[-1] == "[DONE]"
        assert [o.get("metrics") for o in objects] == [None] * (len(objects) - 1) + [METRICS]
        assert objects[-1]["choices"] == [] and objects[-1]["usage"]["completion_tokens"] == 2
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        reply = sdk.completions.create(model="smol", prompt="x")
        assert reply.model_extra["metrics"] == METRICS  # the SDK keeps vLLM's extra field


def test_the_flag_turns_them_on():
    parse = build_parser().parse_args
    assert gateway_config_from_args(parse(["controlplane", "--fake-tokenizer"])).per_request_metrics is False
    flags = ["controlplane", "--fake-tokenizer", "--enable-per-request-metrics"]
    assert gateway_config_from_args(parse(flags)).per_request_metrics is True
