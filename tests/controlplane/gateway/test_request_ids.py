"""A caller's ``X-Request-Id`` (gateway/request_ids.py, vLLM's rule): the reply's id is built on it and its header
echoes it, while the engine's id stays unique (a random suffix); a header unfit for an id is not used."""

from __future__ import annotations

import json
import re

import msgspec
import pytest

pytestmark = pytest.mark.anyio

CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
OWN_ID = re.compile(r"chatcmpl-[0-9a-f]{32}")


async def test_the_callers_id_names_the_reply_and_the_engine_request_stays_unique(client, frontend):
    replies = [await client.post("/v1/chat/completions", json=CHAT, headers={"X-Request-Id": "abc"}) for _ in "12"]
    for reply in replies:
        assert reply.status_code == 200
        assert reply.json()["id"] == "chatcmpl-abc" and reply.headers["x-request-id"] == "abc"
    engine_ids = [call["request_id"] for call in frontend.calls]
    assert all(re.fullmatch(r"chatcmpl-abc-[0-9a-f]{12}", rid) for rid in engine_ids), engine_ids
    assert len(set(engine_ids)) == 2  # the same id sent twice: two engine requests apart


async def test_a_stream_and_choices_carry_it(client, frontend):
    body = {"model": "smol", "prompt": "hi", "max_tokens": 3, "n": 2, "stream": True}
    reply = await client.post("/v1/completions", json=body, headers={"x-request-id": "trace:9/a=b"})
    events = [json.loads(line[6:]) for line in reply.text.splitlines() if line.startswith("data: {")]
    assert events and {e["id"] for e in events} == {"cmpl-trace:9/a=b"}
    assert {c["index"] for e in events for c in e["choices"]} == {0, 1}
    assert reply.headers["x-request-id"] == "trace:9/a=b"
    assert frontend.calls[0]["request_id"].startswith("cmpl-trace:9/a=b-")


@pytest.mark.parametrize("given", ["", "a" * 129, "has space", "semi;colon", "caf\u00e9"])
async def test_a_header_unfit_for_an_id_is_not_used_and_the_request_is_served(client, frontend, given):
    reply = await client.post("/v1/chat/completions", json=CHAT, headers=[(b"x-request-id", given.encode("latin-1"))])
    assert reply.status_code == 200
    rid = reply.json()["id"]
    assert OWN_ID.fullmatch(rid) and reply.headers["x-request-id"] == rid == frontend.calls[0]["request_id"]


async def test_the_longest_id_used(client):
    given = "a" * 128
    reply = await client.post("/v1/chat/completions", json=CHAT, headers={"x-request-id": given})
    assert reply.json()["id"] == f"chatcmpl-{given}"


async def test_embeddings_echo_it_and_name_their_engine_requests_after_it(client, frontend, script):
    frontend.chunks = [msgspec.structs.replace(script("x")[0], embedding=[0.6, 0.8])]
    reply = await client.post(
        "/v1/embeddings", json={"model": "smol", "input": ["a", "b"]}, headers={"x-request-id": "e-1"}
    )
    assert reply.status_code == 200 and reply.headers["x-request-id"] == "e-1"
    assert [d["embedding"] for d in reply.json()["data"]] == [[0.6, 0.8], [0.6, 0.8]]
    assert frontend.calls[0]["request_id"].startswith("embd-e-1-")
