"""vLLM's ``return_token_ids`` and ``return_tokens_as_token_ids`` on both endpoints (gateway/openai_reply.py): the
prompt's tokens (from the first chunk the control plane relays, when asked) and each choice's output tokens, whole
and streamed, with echo and n; logprobs naming tokens "token_id:<id>" while their offsets stay the text's."""

from __future__ import annotations

import json

import msgspec
import openai
import pytest

pytestmark = pytest.mark.anyio

MODEL = "smol"
PROMPT_IDS = [7, 8, 9]
CHAT = {"model": MODEL, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
COMPLETION = {"model": MODEL, "prompt": "hi", "max_tokens": 3}


@pytest.fixture
def frontend(make_frontend, script):
    chunks = script("Hello", ",", " world")  # tokens 100, 101, 102
    chunks[0] = msgspec.structs.replace(chunks[0], prompt_token_ids=PROMPT_IDS)  # as the control plane relays it
    for i, chunk in enumerate(chunks):
        chunks[i] = msgspec.structs.replace(chunk, logprobs=[(100 + i, -0.5, [(100 + i, -0.5), (65, -2.0)])])
    return make_frontend(chunks=chunks)


def _events(body: str) -> list[dict]:
    return [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]


async def test_a_chat_reply_names_its_prompts_and_its_choices_tokens(client, frontend):
    r = await client.post("/v1/chat/completions", json={**CHAT, "return_token_ids": True, "n": 2})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["prompt_token_ids"] == PROMPT_IDS
    assert [c["token_ids"] for c in body["choices"]] == [[100, 101, 102]] * 2
    assert frontend.calls[-1]["return_prompt_token_ids"] is True  # asked of the control plane
    plain = (await client.post("/v1/chat/completions", json=CHAT)).json()
    assert "prompt_token_ids" not in plain and "token_ids" not in plain["choices"][0]
    assert frontend.calls[-1]["return_prompt_token_ids"] is False


async def test_a_chat_stream_names_the_prompt_once_and_each_chunks_tokens(client):
    r = await client.post("/v1/chat/completions", json={**CHAT, "return_token_ids": True, "stream": True})
    events = _events(r.text)
    assert events[0]["prompt_token_ids"] == PROMPT_IDS and events[0]["choices"][0]["delta"]["role"] == "assistant"
    assert all("prompt_token_ids" not in e for e in events[1:])
    assert [t for e in events for t in e["choices"][0]["token_ids"]] == [100, 101, 102]


async def test_a_completion_names_both_per_choice_and_echo_puts_the_prompts_first(client):
    body = (await client.post("/v1/completions", json={**COMPLETION, "return_token_ids": True})).json()
    (choice,) = body["choices"]
    assert (choice["prompt_token_ids"], choice["token_ids"]) == (PROMPT_IDS, [100, 101, 102])
    echoed = (await client.post("/v1/completions", json={**COMPLETION, "return_token_ids": True, "echo": True})).json()
    assert echoed["choices"][0]["token_ids"] == [*PROMPT_IDS, 100, 101, 102]
    assert echoed["choices"][0]["text"] == "hiHello, world"
    stream = await client.post("/v1/completions", json={**COMPLETION, "return_token_ids": True, "stream": True})
    events = _events(stream.text)
    assert events[0]["choices"][0]["prompt_token_ids"] == PROMPT_IDS
    assert [t for e in events for t in e["choices"][0]["token_ids"]] == [100, 101, 102]


async def test_logprobs_name_tokens_by_id_and_offsets_stay_the_texts(client):
    chat = {**CHAT, "logprobs": True, "top_logprobs": 1, "return_tokens_as_token_ids": True}
    content = (await client.post("/v1/chat/completions", json=chat)).json()["choices"][0]["logprobs"]["content"]
    assert [c["token"] for c in content] == ["token_id:100", "token_id:101", "token_id:102"]
    assert content[0]["bytes"] == list(b"token_id:100") and content[0]["top_logprobs"][1]["token"] == "token_id:65"
    completion = {**COMPLETION, "logprobs": 1, "return_tokens_as_token_ids": True}
    logprobs = (await client.post("/v1/completions", json=completion)).json()["choices"][0]["logprobs"]
    assert logprobs["tokens"] == ["token_id:100", "token_id:101", "token_id:102"]
    assert logprobs["text_offset"] == [0, 5, 6]  # "Hello", ",", " world": the text's offsets, not the names'
    assert set(logprobs["top_logprobs"][0]) == {"token_id:100", "token_id:65"}


def test_the_openai_sdk_reads_them_as_extra_fields(served):
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0) as c:
        reply = c.chat.completions.create(
            model=MODEL, messages=CHAT["messages"], max_tokens=3, extra_body={"return_token_ids": True}
        )
    assert reply.model_extra["prompt_token_ids"] == PROMPT_IDS
    assert reply.choices[0].model_extra["token_ids"] == [100, 101, 102]
