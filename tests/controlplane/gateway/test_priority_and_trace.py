"""Request facts the gateway passes on to the control plane: vLLM's ``priority`` field (chat, completions,
responses; strict int) and OpenAI's ``service_tier``, vLLM's ``cache_salt``, and the caller's W3C trace headers
(traceparent, tracestate; nothing else)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
TRACEPARENT = f"00-{0xABC:032x}-{0x123:016x}-01"


@pytest.mark.parametrize(
    ("path", "body"),
    [("/v1/chat/completions", CHAT), ("/v1/completions", {"prompt": "hi"}), ("/v1/responses", {"input": "hi"})],
)
async def test_priority_reaches_the_control_plane(client, frontend, path, body):
    for priority in (-5, 0, 7):
        r = await client.post(path, json={**body, "priority": priority})
        assert r.status_code == 200, r.text
    assert [call["priority"] for call in frontend.calls] == [-5, 0, 7]


async def test_a_priority_that_is_not_an_integer_is_a_400_naming_it(client, frontend):
    for bad in ("high", 1.5, True, 2**64, -(2**31) - 1):
        r = await client.post("/v1/chat/completions", json={**CHAT, "priority": bad})
        assert r.status_code == 400, (bad, r.text)
        assert r.json()["error"]["param"] == "priority"
    assert frontend.calls == []


async def test_the_callers_trace_headers_and_only_they_reach_the_control_plane(client, frontend):
    headers = {"traceparent": TRACEPARENT, "tracestate": "a=1", "authorization": "Bearer x", "x-other": "y"}
    assert (await client.post("/v1/chat/completions", json=CHAT, headers=headers)).status_code == 200
    assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
    too_long = {"traceparent": TRACEPARENT, "tracestate": "a" * 600}  # dropped, the traceparent kept
    assert (await client.post("/v1/chat/completions", json=CHAT, headers=too_long)).status_code == 200
    assert [call["trace_headers"] for call in frontend.calls] == [
        {"traceparent": TRACEPARENT, "tracestate": "a=1"},
        None,
        {"traceparent": TRACEPARENT},
    ]


@pytest.mark.parametrize(
    ("tier", "priority", "named"), [("priority", -1, "priority"), ("flex", 1, "flex"), ("auto", 0, "default"),
                                   ("default", 0, "default"), ("scale", 0, "default")],
)  # fmt: skip
async def test_openais_service_tier_is_a_priority_and_the_reply_names_it(client, frontend, tier, priority, named):
    r = await client.post("/v1/chat/completions", json={**CHAT, "service_tier": tier})
    assert r.status_code == 200 and r.json()["service_tier"] == named
    r = await client.post("/v1/responses", json={"input": "hi", "service_tier": tier})
    assert r.status_code == 200 and r.json()["service_tier"] == named
    assert [call["priority"] for call in frontend.calls] == [priority, priority]


async def test_a_named_priority_wins_over_the_tier_and_no_tier_means_no_field(client, frontend):
    r = await client.post("/v1/chat/completions", json={**CHAT, "service_tier": "flex", "priority": -4})
    assert r.status_code == 200 and r.json()["service_tier"] == "flex"
    r = await client.post("/v1/chat/completions", json=CHAT)
    assert "service_tier" not in r.json()
    assert [call["priority"] for call in frontend.calls] == [-4, 0]
    streamed = await client.post("/v1/chat/completions", json={**CHAT, "service_tier": "priority", "stream": True})
    events = [line for line in streamed.text.splitlines() if line.startswith("data: {")]
    assert events and all('"service_tier":"priority"' in e.replace(" ", "") for e in events)


async def test_an_unknown_service_tier_is_a_400_naming_it(client, frontend):
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/responses", {"input": "hi"})):
        for tier in ("gold", "x" * 1_000_000):
            r = await client.post(path, json={**body, "service_tier": tier})
            assert r.status_code == 400 and r.json()["error"]["param"] == "service_tier", r.text[:200]
            assert len(r.text) < 1_000  # the caller's text is not echoed whole
    assert frontend.calls == []


async def test_a_cache_salt_reaches_the_request_and_a_bad_one_is_a_400_naming_it(client, frontend):
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/completions", {"prompt": "hi"}),
                       ("/v1/responses", {"input": "hi"})):  # fmt: skip
        assert (await client.post(path, json={**body, "cache_salt": "tenant-a"})).status_code == 200
        for bad in ("", "x" * 1025, 5):
            r = await client.post(path, json={**body, "cache_salt": bad})
            assert r.status_code == 400 and r.json()["error"]["param"] == "cache_salt", r.text[:200]
    assert [call["sampling"].cache_salt for call in frontend.calls] == ["tenant-a"] * 3
