"""What the gateway's HTTP span (controlplane/gateway/http_span.py) costs a request, apart from exporting it: the
same chat requests through the gateway app in process (httpx's ASGI transport, a scripted fake frontend: no control
plane, no model, so the gateway's own path is what is timed), with the middleware off and on, in alternated rounds
of one run. "on": a sampled caller's traceparent on every request; spans go to a sink that keeps them (the export's
own cost, the SDK's encoding on its thread, is scripts/tracing_overhead.py's). Prints JSON.

    PYTHONPATH=. .venv/bin/python scripts/http_span_overhead.py
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import time
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controlplane.gateway import create_app
from controlplane.request_spans import RequestSpans

NUM_REQUESTS = 500
ROUNDS = 6
CALLER = {"traceparent": f"00-{0xABC:032x}-{0x123:016x}-01"}
CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


class _Keep:
    def __init__(self) -> None:
        self.records: list = []

    def emit(self, record) -> None:
        self.records.append(record)


async def _round(traced: bool) -> float:
    """Process CPU seconds per request for NUM_REQUESTS sequential requests."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "controlplane" / "gateway"))
    from conftest import FakeFrontend  # the tests' scripted frontend

    frontend = FakeFrontend()
    sink = _Keep()
    if traced:
        frontend.request_spans = RequestSpans(sink)
    transport = httpx.ASGITransport(app=create_app(frontend))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        for _ in range(20):  # warm
            await c.post("/v1/chat/completions", json=CHAT, headers=CALLER)
        t0 = time.process_time()
        for _ in range(NUM_REQUESTS):
            r = await c.post("/v1/chat/completions", json=CHAT, headers=CALLER)
            assert r.status_code == 200
        cpu = time.process_time() - t0
    assert len(sink.records) == (NUM_REQUESTS + 20 if traced else 0)
    return cpu / NUM_REQUESTS


def main() -> None:
    off, on = [], []
    for _ in range(ROUNDS):
        off.append(anyio.run(_round, False))
        on.append(anyio.run(_round, True))
    med_off, med_on = statistics.median(off), statistics.median(on)
    print(
        json.dumps(
            {
                "host": platform.processor() or platform.machine(),
                "requests_per_round": NUM_REQUESTS,
                "rounds": ROUNDS,
                "cpu_us_per_request": {"off": round(med_off * 1e6, 1), "on": round(med_on * 1e6, 1)},
                "added_us_per_request": round((med_on - med_off) * 1e6, 1),
                "on_over_off": round(med_on / med_off, 4),
                "rounds_us": {"off": [round(x * 1e6, 1) for x in off], "on": [round(x * 1e6, 1) for x in on]},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
