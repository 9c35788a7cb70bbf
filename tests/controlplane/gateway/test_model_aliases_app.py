"""Model aliases at the gateway (controlplane/model_aliases.py): /v1/models lists an alias of a served model (its
target's card, ``parent`` naming it), replies name the model that served them (vLLM's and OpenAI's rule), the
control plane gets the alias as asked (it resolves it for every door), and /tokenize takes an alias."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio

MODEL = "smol"
ALIASES = {"gpt-4o-mini": MODEL, "old-name": "retired-model"}


@pytest.fixture
def frontend(make_frontend):
    frontend = make_frontend()
    frontend.model_aliases = ALIASES
    return frontend


async def test_models_lists_an_alias_of_a_served_model_only(client):
    reply = await client.get("/v1/models")
    assert reply.status_code == 200
    cards = {card["id"]: card for card in reply.json()["data"]}
    assert set(cards) == {MODEL, "gpt-4o-mini"}  # "old-name" stands for a model nobody serves: not listed
    alias = cards["gpt-4o-mini"]
    assert alias["parent"] == MODEL and alias["root"] == cards[MODEL]["root"]
    assert alias["max_model_len"] == cards[MODEL]["max_model_len"]
    one = await client.get("/v1/models/gpt-4o-mini")
    assert one.status_code == 200 and one.json() == alias
    gone = await client.get("/v1/models/old-name")
    assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
        ("/v1/completions", {"prompt": "hi"}),
        ("/v1/responses", {"input": "hi"}),
    ],
)
async def test_a_reply_names_the_model_not_the_alias(client, frontend, path, body):
    reply = await client.post(path, json={**body, "model": "gpt-4o-mini"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["model"] == MODEL
    assert frontend.calls[-1]["model"] == "gpt-4o-mini"  # the control plane resolves it, for ZeroMQ clients too


async def test_a_streamed_reply_names_the_model_too(client):
    body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    async with client.stream("POST", "/v1/chat/completions", json=body) as reply:
        lines = [line async for line in reply.aiter_lines() if line.startswith("data: {")]
    assert lines and all(f'"model":"{MODEL}"' in line for line in lines)


async def test_tokenize_takes_an_alias_and_refuses_one_of_an_unserved_model(client):
    ok = await client.post("/tokenize", json={"model": "gpt-4o-mini", "prompt": "hi"})
    assert ok.status_code == 200 and ok.json()["count"] > 0
    gone = await client.post("/tokenize", json={"model": "old-name", "prompt": "hi"})
    assert gone.status_code == 404 and gone.json()["error"]["param"] == "model"
