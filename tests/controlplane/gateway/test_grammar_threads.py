"""The gateway compiles requests' constraints in worker threads, at most GRAMMAR_THREADS at once, whichever route
asked (controlplane/gateway/structured_fields.py check_structured): a burst of structured-output requests cannot take
every core from the event loop (scripts/grammar_loop_lag.py measures it)."""

from __future__ import annotations

import threading

import anyio
import httpx
import pytest

from controlplane.gateway import create_app, structured_fields

pytestmark = pytest.mark.anyio
SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}}


async def test_a_burst_of_structured_requests_compiles_at_most_grammar_threads_at_once(make_frontend, monkeypatch):
    gate, lock = threading.Event(), threading.Lock()
    state = {"running": 0, "most": 0, "calls": 0}
    real_check = structured_fields.check_grammar

    def gated_check(spec) -> None:
        with lock:
            state["calls"] += 1
            state["running"] += 1
            state["most"] = max(state["most"], state["running"])
        try:
            assert gate.wait(10)
            real_check(spec)
        finally:
            with lock:
                state["running"] -= 1

    monkeypatch.setattr(structured_fields, "check_grammar", gated_check)
    transport = httpx.ASGITransport(app=create_app(make_frontend()))
    chat = {"model": "smol", "messages": [{"role": "user", "content": "x"}],
            "response_format": {"type": "json_schema", "json_schema": {"name": "a", "schema": SCHEMA}}}  # fmt: skip
    responses = {"model": "smol", "input": "x",
                 "text": {"format": {"type": "json_schema", "name": "a", "schema": SCHEMA}}}  # fmt: skip
    statuses: list[int] = []
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway", timeout=30) as client:

        async def send(path: str, body: dict) -> None:
            statuses.append((await client.post(path, json=body)).status_code)

        async with anyio.create_task_group() as tg:
            for i in range(6):
                tg.start_soon(send, "/v1/chat/completions" if i % 2 else "/v1/responses", chat if i % 2 else responses)
            with anyio.fail_after(10):
                while state["calls"] < structured_fields.GRAMMAR_THREADS:
                    await anyio.sleep(0.005)
            await anyio.sleep(0.05)
            assert state["calls"] == structured_fields.GRAMMAR_THREADS  # the others wait their turn
            gate.set()
    assert statuses == [200] * 6
    assert state["most"] == structured_fields.GRAMMAR_THREADS and state["calls"] == 6
