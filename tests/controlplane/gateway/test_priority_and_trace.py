"""Two request facts the gateway passes on to the control plane: vLLM's ``priority`` field (chat, completions,
responses; strict int) and the caller's W3C trace headers (traceparent, tracestate; nothing else)."""

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
    for bad in ("high", 1.5, None, True, 2**64):
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
