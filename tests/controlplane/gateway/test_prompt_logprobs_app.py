"""A completion's ``echo`` (with and without logprobs: lm-evaluation-harness's loglikelihood request) and vLLM's
``prompt_logprobs`` on both endpoints, through the gateway over a scripted frontend whose first chunk carries the
prompt's scores as a node sends them (engine/prompt_logprobs.py)."""

from __future__ import annotations

import json

import msgspec
import pytest

from backends.fake import ByteTokenizer

pytestmark = pytest.mark.anyio
TOK = ByteTokenizer()
PROMPT = "Hi yo"
IDS = TOK.encode(PROMPT)  # one token per byte
# what a node sends for it with prompt_logprobs=1: position 0 unscored, then (token, logprob, top, rank)
SCORES = [(IDS[0], None, [], None)] + [
    (t, -1.5 - i, [(TOK.encode("x")[0], -0.25)], 7 + i) for i, t in enumerate(IDS[1:])
]


@pytest.fixture
def scored(frontend, script):
    chunks = script("!", "?")
    chunks[0] = msgspec.structs.replace(chunks[0], prompt_logprobs=SCORES, logprobs=[(TOK.encode("!")[0], -0.5, [])])
    chunks[1] = msgspec.structs.replace(chunks[1], logprobs=[(TOK.encode("?")[0], -0.75, [])])
    frontend.chunks = chunks
    return frontend


def _events(text: str) -> list[dict]:
    lines = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: ")]
    return [json.loads(line) for line in lines[:-1]]


async def test_echo_puts_the_prompt_before_the_text(client, frontend, script):
    frontend.chunks = script("!", "?")
    body = (await client.post("/v1/completions", json={"prompt": PROMPT, "echo": True})).json()
    assert body["choices"][0]["text"] == "Hi yo!?" and body["choices"][0]["logprobs"] is None
    assert frontend.calls[0]["sampling"].prompt_logprobs is None  # no logprobs asked: nothing to score
    body = (await client.post("/v1/completions", json={"prompt": IDS, "echo": True})).json()
    assert body["choices"][0]["text"] == "Hi yo!?"  # token ids decoded


async def test_echo_with_logprobs_is_the_prompts_scores_then_the_outputs(client, scored):
    r = await client.post("/v1/completions", json={"prompt": PROMPT, "echo": True, "logprobs": 1, "max_tokens": 2})
    assert scored.calls[0]["sampling"].prompt_logprobs == 1  # echo + logprobs asks the node for them
    (choice,) = r.json()["choices"]
    assert choice["text"] == "Hi yo!?" and "prompt_logprobs" not in choice
    lp = choice["logprobs"]
    assert lp["tokens"] == ["H", "i", " ", "y", "o", "!", "?"]
    assert lp["token_logprobs"] == [None, -1.5, -2.5, -3.5, -4.5, -0.5, -0.75]
    assert lp["top_logprobs"][0] is None and lp["top_logprobs"][1] == {"x": -0.25}
    assert lp["text_offset"] == [0, 1, 2, 3, 4, 5, 6]


async def test_streamed_echo_comes_with_the_first_chunk(client, scored):
    body = {"prompt": PROMPT, "echo": True, "logprobs": 0, "stream": True}
    events = _events((await client.post("/v1/completions", json=body)).text)
    texts = [e["choices"][0]["text"] for e in events]
    assert texts[0] == "Hi yo!" and "".join(texts) == "Hi yo!?"
    first = events[0]["choices"][0]["logprobs"]
    assert first["token_logprobs"][:2] == [None, -1.5] and first["text_offset"][-1] == 5
    assert events[1]["choices"][0]["logprobs"]["text_offset"] == [6]  # after the echoed prompt


async def test_prompt_logprobs_in_vllms_shape_on_both_endpoints(client, scored):
    r = await client.post("/v1/completions", json={"prompt": PROMPT, "prompt_logprobs": 1})
    assert scored.calls[-1]["sampling"].prompt_logprobs == 1
    pl = r.json()["choices"][0]["prompt_logprobs"]
    assert pl[0] is None and len(pl) == len(IDS)
    assert pl[1] == {
        str(TOK.encode("x")[0]): {"logprob": -0.25, "rank": 1, "decoded_token": "x"},
        str(IDS[1]): {"logprob": -1.5, "rank": 7, "decoded_token": "i"},
    }
    chat = {"messages": [{"role": "user", "content": "hi"}], "prompt_logprobs": 0}
    body = (await client.post("/v1/chat/completions", json=chat)).json()
    assert body["prompt_logprobs"][0] is None and body["prompt_logprobs"][1][str(IDS[1])]["rank"] == 7
    events = _events(
        (await client.post("/v1/completions", json={"prompt": PROMPT, "prompt_logprobs": 0, "stream": True})).text
    )
    assert events[0]["choices"][0]["prompt_logprobs"][1][str(IDS[1])]["logprob"] == -1.5
    assert all("prompt_logprobs" not in e["choices"][0] for e in events[1:])
