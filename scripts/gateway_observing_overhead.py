"""What the gateway's observing middlewares cost a request: the HTTP span (controlplane/gateway/http_span.py),
apart from exporting it, vLLM's HTTP metrics (observe/http_metrics.py) and the access log (gateway/access_log.py).
The same chat requests through the gateway app in process (httpx's ASGI transport, a scripted fake frontend: no
control plane, no model, so the gateway's own path is what is timed), plain and with each, in alternated rounds of
one run. "span": a sampled caller's traceparent on every request; spans go to a sink that keeps them (the export's
own cost, the SDK's encoding on its thread, is scripts/tracing_overhead.py's). "metrics": counted into a private
registry, as the control plane's. "access_log": its line formatted and written by the control plane's log handler
(transport/process.py's format) to /dev/null; the other variants run without it. Prints JSON.

    PYTHONPATH=. .venv/bin/python scripts/gateway_observing_overhead.py
"""

from __future__ import annotations

import json
import logging
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import anyio
import httpx
from prometheus_client import CollectorRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controlplane.gateway import create_app
from controlplane.gateway.app import GatewayConfig
from controlplane.request_spans import RequestSpans
from observe.http_metrics import instrument_gateway

NUM_REQUESTS = 500
ROUNDS = 6
CALLER = {"traceparent": f"00-{0xABC:032x}-{0x123:016x}-01"}
CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}


class _Keep:
    def __init__(self) -> None:
        self.records: list = []

    def emit(self, record) -> None:
        self.records.append(record)


async def _round(variant: str) -> float:
    """Process CPU seconds per request for NUM_REQUESTS sequential requests."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "controlplane" / "gateway"))
    from conftest import FakeFrontend  # the tests' scripted frontend

    frontend = FakeFrontend()
    sink = _Keep()
    if variant == "span":
        frontend.request_spans = RequestSpans(sink)
    app = create_app(frontend, config=GatewayConfig(access_log=variant == "access_log"))
    if variant == "metrics":
        instrument_gateway(app, CollectorRegistry())
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        for _ in range(20):  # warm
            await c.post("/v1/chat/completions", json=CHAT, headers=CALLER)
        t0 = time.process_time()
        for _ in range(NUM_REQUESTS):
            r = await c.post("/v1/chat/completions", json=CHAT, headers=CALLER)
            assert r.status_code == 200
        cpu = time.process_time() - t0
    assert len(sink.records) == (NUM_REQUESTS + 20 if variant == "span" else 0)
    return cpu / NUM_REQUESTS


VARIANTS = ("plain", "span", "metrics", "access_log")


def main() -> None:
    handler = logging.StreamHandler(open(os.devnull, "w"))  # noqa: SIM115 (open for the process's life)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=logging.INFO, handlers=[handler])
    rounds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(ROUNDS):
        for variant in VARIANTS:
            rounds[variant].append(anyio.run(_round, variant))
    median = {v: statistics.median(xs) for v, xs in rounds.items()}
    print(
        json.dumps(
            {
                "host": platform.processor() or platform.machine(),
                "requests_per_round": NUM_REQUESTS,
                "rounds": ROUNDS,
                "cpu_us_per_request": {v: round(x * 1e6, 1) for v, x in median.items()},
                "added_us_per_request": {v: round((median[v] - median["plain"]) * 1e6, 1) for v in VARIANTS[1:]},
                "over_plain": {v: round(median[v] / median["plain"], 4) for v in VARIANTS[1:]},
                "rounds_us": {v: [round(x * 1e6, 1) for x in xs] for v, xs in rounds.items()},
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
