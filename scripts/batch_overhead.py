"""What the Batch API's own path costs: the same chat requests sent live over HTTP by a client (httpx, 32 at a time)
and run as one OpenAI batch (upload, create, poll, read the output; the runner sends each through the route in
process, 32 at a time), against a frontend that answers at once, so only the gateway's path is timed. Same run,
alternated rounds; prints JSON.

    PYTHONPATH=. .venv/bin/python scripts/batch_overhead.py
"""

from __future__ import annotations

import json
import platform
import socket
import statistics
import threading
import time

import anyio
import httpx
import msgspec
import uvicorn

from controlplane.frontend import choice_request_ids
from controlplane.gateway import create_app
from transport.messages import TokenChunk

NUM_REQUESTS = 2000
CONCURRENCY = 32
ROUNDS = 5


class InstantFrontend:
    """Answers every request with one finished chunk (no model, no router: the gateway's path alone)."""

    def __init__(self) -> None:
        self.model_names = ["smol"]
        self.tokenizer = None

    def generate(self, request_id: str, *, num_choices: int = 1, prompts=None, **_):
        ids = choice_request_ids(request_id, num_choices * len(prompts or [None]))
        return self._stream(ids)

    async def _stream(self, ids):
        for choice_id in ids:
            yield TokenChunk(request_id=choice_id, token_ids=[7], text="ok", finished=True, finish_reason="stop",
                             num_prompt_tokens=5, num_output_tokens=1)  # fmt: skip

    def health(self) -> dict:
        return {"status": "ok"}


def _body(i: int) -> dict:
    return {"model": "smol", "messages": [{"role": "user", "content": f"question {i}"}], "max_tokens": 1}


async def _live(base: str) -> float:
    limiter = anyio.Semaphore(CONCURRENCY)
    async with httpx.AsyncClient(base_url=base, timeout=60, limits=httpx.Limits(max_connections=CONCURRENCY)) as http:
        start = time.perf_counter()

        async def one(i: int) -> None:
            async with limiter:
                reply = await http.post("/v1/chat/completions", json=_body(i))
                assert reply.status_code == 200, reply.text

        async with anyio.create_task_group() as tg:
            for i in range(NUM_REQUESTS):
                tg.start_soon(one, i)
        return time.perf_counter() - start


async def _batch(base: str) -> float:
    lines = [{"custom_id": f"q{i}", "method": "POST", "url": "/v1/chat/completions", "body": _body(i)}
             for i in range(NUM_REQUESTS)]  # fmt: skip
    content = b"".join(msgspec.json.encode(line) + b"\n" for line in lines)
    async with httpx.AsyncClient(base_url=base, timeout=60) as http:
        start = time.perf_counter()
        upload = await http.post("/v1/files", files={"file": ("in.jsonl", content)}, data={"purpose": "batch"})
        body = {"input_file_id": upload.json()["id"], "endpoint": "/v1/chat/completions", "completion_window": "24h"}
        batch = (await http.post("/v1/batches", json=body)).json()
        while batch["status"] not in ("completed", "failed", "expired", "cancelled"):
            await anyio.sleep(0.005)
            batch = (await http.get(f"/v1/batches/{batch['id']}")).json()
        output = await http.get(f"/v1/files/{batch['output_file_id']}/content")
        elapsed = time.perf_counter() - start
    assert batch["request_counts"]["completed"] == NUM_REQUESTS and output.text.count("\n") == NUM_REQUESTS
    return elapsed


def main() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(create_app(InstantFrontend()), lifespan="on", log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    anyio.run(_live, base)  # warm-up
    anyio.run(_batch, base)
    seconds: dict[str, list[float]] = {"live": [], "batch": []}
    for _ in range(ROUNDS):
        seconds["live"].append(anyio.run(_live, base))
        seconds["batch"].append(anyio.run(_batch, base))
    server.should_exit = True
    thread.join(timeout=30)
    median = {arm: statistics.median(s) for arm, s in seconds.items()}
    print(json.dumps({
        "date": time.strftime("%Y-%m-%d"),
        "host": platform.processor() or platform.machine(),
        "requests": NUM_REQUESTS, "concurrency": CONCURRENCY, "rounds": ROUNDS,
        "median_s": {arm: round(s, 3) for arm, s in median.items()},
        "requests_per_s": {arm: round(NUM_REQUESTS / s) for arm, s in median.items()},
        "x_batch_over_live_time": round(median["batch"] / median["live"], 2),
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
