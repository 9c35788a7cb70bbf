"""OpenAI's stream obfuscation (gateway/stream_obfuscation.py): asked per request, or the server's default, every
event of a chat or completion stream and each Responses delta event has a size that is a multiple of the bucket
whatever its tokens, so token lengths do not show in the encrypted stream's sizes."""

from __future__ import annotations

import string

import httpx
import msgspec
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from controlplane.gateway.stream_obfuscation import BUCKET_BYTES, obfuscated_json
from zoo.cli import build_parser
from zoo.gateway_args import gateway_config_from_args

URL_SAFE = set(string.ascii_letters + string.digits + "-_")


@given(st.dictionaries(st.text(max_size=20), st.one_of(st.text(max_size=200), st.integers(), st.none()), min_size=1))
def test_any_object_is_padded_to_the_bucket_and_keeps_its_members(payload):
    data = obfuscated_json(payload)
    assert len(data) % BUCKET_BYTES == 0
    decoded = msgspec.json.decode(data)
    pad = decoded.pop("obfuscation")
    assert decoded == {k: v for k, v in payload.items() if k != "obfuscation"} and set(pad) <= URL_SAFE


def test_the_padding_is_drawn_afresh():
    payload = {"delta": {"content": "a"}}
    assert len({obfuscated_json(payload) for _ in range(20)}) > 1


def _text(choice: dict) -> str:
    return choice.get("text") or (choice.get("delta") or {}).get("content") or ""


def _sizes(text: str) -> list[tuple[int, dict]]:
    """Each data event's JSON size and object, [DONE] left out."""
    events = [line.removeprefix("data: ") for line in text.splitlines() if line.startswith("data: {")]
    return [(len(e.encode()), msgspec.json.decode(e)) for e in events]


@pytest.mark.anyio
async def test_a_streams_events_look_alike_when_asked_and_by_the_servers_default(make_frontend, script):
    frontend = make_frontend(chunks=script("a", "bb", "ccc", "dddd", "eeeee"))
    chat = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    for config, options, padded in [
        (GatewayConfig(), {"include_obfuscation": True, "include_usage": True}, True),
        (GatewayConfig(), {}, False),  # not asked, off by default (vLLM has none)
        (GatewayConfig(stream_obfuscation=True), {}, True),
        (GatewayConfig(stream_obfuscation=True), {"include_obfuscation": False}, False),  # a request may decline
    ]:
        transport = httpx.ASGITransport(app=create_app(frontend, config=config))
        async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
            for path, body in (("/v1/chat/completions", chat), ("/v1/completions", {"model": "smol", "prompt": "x"})):
                reply = await c.post(path, json={**chat, **body, "stream_options": options})
                sizes = _sizes(reply.text)
                tokens = {size for size, obj in sizes if obj["choices"] and _text(obj["choices"][0])}
                if padded:
                    assert all(size % BUCKET_BYTES == 0 and "obfuscation" in obj for size, obj in sizes)
                    assert len(tokens) <= 2  # 1 to 5 bytes of text: one size, or two where a bucket ends
                else:
                    assert not any("obfuscation" in obj for _, obj in sizes)
                    assert len(tokens) == 5  # each token's length shows
            whole = await c.post("/v1/completions", json={"model": "smol", "prompt": "x"})
            assert "obfuscation" not in whole.json()  # a whole reply: nothing to pad


def test_the_sdk_streams_with_it(make_frontend, script, serve):
    frontend = make_frontend(chunks=script("Hi", " there"))
    with serve(create_app(frontend)) as url:
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        stream = sdk.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "hi"}], stream=True,
            stream_options={"include_obfuscation": True},
        )  # fmt: skip
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hi there"
        assert all(isinstance(c.obfuscation, str) for c in chunks)  # the SDK's own field
        events = list(sdk.responses.create(model="smol", input="hi", stream=True,
                                           stream_options={"include_obfuscation": True}))  # fmt: skip
        deltas = [e for e in events if e.type.endswith(".delta")]
        assert deltas and all(isinstance(getattr(e, "obfuscation", None), str) for e in deltas)
        assert not any(getattr(e, "obfuscation", None) for e in events if not e.type.endswith(".delta"))


def test_the_flag():
    parse = build_parser().parse_args
    assert gateway_config_from_args(parse(["controlplane", "--fake-tokenizer"])).stream_obfuscation is False
    flags = ["controlplane", "--fake-tokenizer", "--stream-obfuscation"]
    assert gateway_config_from_args(parse(flags)).stream_obfuscation is True
