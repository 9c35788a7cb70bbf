"""vLLM's ``GET /load`` (gateway/server_load.py): the generation requests being answered (a stream until its end)
and the background responses running; other routes do not count."""

from __future__ import annotations

import time

import httpx

MODEL = "smol"


def test_load_counts_streams_in_flight_and_background_responses(frontend, served):
    assert httpx.get(f"{served}/load").json() == {"server_load": 0}
    frontend.hang_after = 1
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "stream": True}
    with httpx.Client(base_url=served, timeout=30) as http, http.stream("POST", "/v1/chat/completions", json=body):
        assert frontend.num_streaming.acquire(timeout=30)  # the stream is open, waiting for its next token
        assert http.get("/load").json() == {"server_load": 1}
        created = http.post("/v1/responses", json={"model": MODEL, "input": "Hi", "background": True}).json()
        assert frontend.num_streaming.acquire(timeout=30)
        assert http.get("/load").json() == {"server_load": 2}  # the POST answered, its generation runs on
        assert http.get("/v1/models").status_code == 200 and http.get("/load").json() == {"server_load": 2}
        http.post(f"/v1/responses/{created['id']}/cancel")
    frontend.hang_after = None
    with httpx.Client(base_url=served, timeout=30) as http:
        for _ in range(1000):  # the stream's end and the cancel reach the counts as their tasks end
            if http.get("/load").json() == {"server_load": 0}:
                break
            time.sleep(0.01)
        assert http.get("/load").json() == {"server_load": 0}
        assert http.post("/v1/completions", json={"model": MODEL, "prompt": "x"}).status_code == 200
        assert http.get("/load").json() == {"server_load": 0}
