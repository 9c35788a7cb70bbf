"""What the control plane's own profile costs (controlplane/gateway/frontend_profile.py: cProfile on its event loop
between POST /start_profile and /stop_profile, unless ``ignore_frontend``): the same chat requests through the gateway
app in process (httpx's ASGI transport, the tests' scripted fake frontend: no model, so the gateway's own Python is
what is timed), without and with the profile on, in alternated rounds of one run; process CPU per request. Prints
JSON.

    PYTHONPATH=. .venv/bin/python scripts/frontend_profile_overhead.py
"""

from __future__ import annotations

import json
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from controlplane.gateway import create_app
from controlplane.gateway.app import GatewayConfig

NUM_REQUESTS = 400
ROUNDS = 6
CHAT = {"model": "smol", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
VARIANTS = ("off", "cprofile")


async def _round(variant: str, directory: str) -> tuple[float, float]:
    """(process CPU seconds per request for NUM_REQUESTS sequential requests, seconds the stop's write took)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "controlplane" / "gateway"))
    from conftest import FakeFrontend  # the tests' scripted frontend

    class Fleet(FakeFrontend):  # one node, whose profiler answers at once
        node_ids = ("n0",)

        async def profile(self, action: str, node_ids: list[str]) -> dict:
            return {n: {"ok": True, "detail": action, "trace_files": []} for n in node_ids}

    app = create_app(Fleet(), config=GatewayConfig(profiling=True, profile_dir=directory))
    write_s = 0.0
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        for _ in range(20):  # warm
            await c.post("/v1/chat/completions", json=CHAT)
        if variant == "cprofile":
            assert (await c.post("/start_profile")).json()["controlplane"]["ok"]
        t0 = time.process_time()
        for _ in range(NUM_REQUESTS):
            assert (await c.post("/v1/chat/completions", json=CHAT)).status_code == 200
        cpu = time.process_time() - t0
        if variant == "cprofile":
            t1 = time.perf_counter()
            assert (await c.post("/stop_profile")).json()["controlplane"]["trace_files"]
            write_s = time.perf_counter() - t1
    return cpu / NUM_REQUESTS, write_s


def main() -> None:
    rounds: dict[str, list[float]] = {v: [] for v in VARIANTS}
    writes: list[float] = []
    with tempfile.TemporaryDirectory() as directory:
        for _ in range(ROUNDS):
            for variant in VARIANTS:
                cpu, write_s = anyio.run(_round, variant, directory)
                rounds[variant].append(cpu)
                if variant == "cprofile":
                    writes.append(write_s)
    median = {v: statistics.median(xs) for v, xs in rounds.items()}
    print(json.dumps({
        "what": "chat requests through the gateway app in process (fake frontend), cProfile on its loop or not",
        "host": platform.processor() or platform.machine(),
        "requests_per_round": NUM_REQUESTS,
        "rounds": ROUNDS,
        "cpu_us_per_request": {v: round(x * 1e6, 1) for v, x in median.items()},
        "cprofile_over_off": round(median["cprofile"] / median["off"], 3),
        "stop_write_s_median": round(statistics.median(writes), 4),
        "rounds_us": {v: [round(x * 1e6, 1) for x in xs] for v, xs in rounds.items()},
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
