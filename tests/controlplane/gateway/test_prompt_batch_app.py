"""A completion's batch of prompts (OpenAI's list of strings or of token-id lists): ``n`` engine requests per prompt,
choices in OpenAI's order (prompt by prompt), usage counting each prompt once, echo per prompt; bad batches refused
naming the prompt at fault."""

from __future__ import annotations

import json

import pytest

from controlplane.frontend import client_generates
from controlplane.gateway.openai_schema import MAX_BATCH
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.anyio


async def test_a_batch_of_prompts_gets_n_choices_each_in_openais_order(client, frontend):
    body = {"prompt": ["a", "bb"], "n": 2, "echo": True, "max_tokens": 3}
    r = await client.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    (call,) = frontend.calls
    assert call["prompts"] == ["a", "bb"] and call["num_choices"] == 2 and call["prompt"] is None
    reply = r.json()
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2, 3]
    assert [c["text"] for c in reply["choices"]] == ["aHello, world"] * 2 + ["bbHello, world"] * 2
    assert reply["usage"]["prompt_tokens"] == 2 * 5  # each prompt once (the fake reports 5 tokens a prompt)
    assert reply["usage"]["completion_tokens"] == 4 * 3


async def test_a_batch_of_token_id_lists_streams_every_choice(client, frontend):
    r = await client.post("/v1/completions", json={"prompt": [[104, 105], [106]], "stream": True})
    assert frontend.calls[0]["prompts"] == [[104, 105], [106]]
    events = [json.loads(e[6:]) for e in r.text.splitlines() if e.startswith("data: {")]
    finished = {e["choices"][0]["index"] for e in events if e["choices"][0]["finish_reason"]}
    assert finished == {0, 1}


@pytest.mark.parametrize(
    ("prompt", "param"),
    [
        (["a", [104]], "prompt"),
        (["a", ""], "prompt[1]"),
        ([[104], []], "prompt[1]"),
        ([[104], [2**40]], "prompt[1]"),
        (["x"] * (MAX_BATCH + 1), "prompt"),
    ],
)
async def test_bad_batches_are_refused_naming_the_prompt(client, frontend, prompt, param):
    r = await client.post("/v1/completions", json={"prompt": prompt})
    assert r.status_code == 400 and r.json()["error"]["param"] == param
    assert frontend.calls == []


async def test_a_batch_times_n_is_bounded(client, frontend):
    r = await client.post("/v1/completions", json={"prompt": ["a"] * 20, "n": 16})
    assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"
    assert (await client.post("/v1/completions", json={"prompt": ["a"] * 16, "n": 16})).status_code == 200


def test_client_generates_orders_a_batch_prompt_by_prompt():
    msgs = client_generates(
        "r", sampling=SamplingParams(seed=7), num_choices=2, prompts=["x", [5, 6]], model="m", prompt=None
    )  # (as ControlPlane.generate passes it: every field, the single prompt unset)
    assert [m.request_id for m in msgs] == ["r-0", "r-1", "r-2", "r-3"]
    assert [(m.prompt, m.prompt_token_ids) for m in msgs] == [("x", None)] * 2 + [(None, [5, 6])] * 2
    assert [m.sampling.seed for m in msgs] == [7, 8, 7, 8] and {m.model for m in msgs} == {"m"}
    (one,) = client_generates("q", sampling=SamplingParams(), prompt="hi", model=None)
    assert (one.request_id, one.prompt) == ("q", "hi")
