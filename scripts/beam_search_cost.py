"""What vLLM's beam search (controlplane/gateway/beam_search.py) costs here, beside the plain answer in the same run,
on real processes (`zoo controlplane` + one `zoo agent`, SmolLM2-135M on CPU): a completion of MAX_TOKENS tokens,
greedy, then as a beam search of n = 1, 2, 4; alternated, ROUNDS rounds. Per way: the median wall time (and its
ratio to greedy), the engine requests its steps made and the share of their prompt tokens the prefix cache served
(the agent's vllm:request_success_total and vllm:prompt_tokens_cached_total / vllm:prompt_tokens_total deltas).

    python scripts/beam_search_cost.py > bench/results/<date>-beam-search-cost.json

It starts and stops its own processes on loopback (ports 18010, 15565/15566, 19110).
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

HTTP, CONTROL, CLIENTS, METRICS = "127.0.0.1:18010", "tcp://127.0.0.1:15565", "tcp://127.0.0.1:15566", 19110
BASE = f"http://{HTTP}"
ZOO = [sys.executable, "-m", "zoo"]
PROMPT = (  # ~90 tokens: several full KV blocks (16 tokens) for the prefix cache to serve each step
    "France is a country in Western Europe. Its capital is known for its museums, its river and its cafes; its "
    "second city is a port on the Mediterranean; its third lies where two rivers meet and is known for its food. "
    "The three largest cities of France are"
)
MAX_TOKENS, ROUNDS = 8, 5
WAYS = {"greedy": None, "beam n=1": 1, "beam n=2": 2, "beam n=4": 4}
COUNTERS = ("vllm:request_success", "vllm:prompt_tokens_cached", "vllm:prompt_tokens")


def _counters() -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{METRICS}/metrics", timeout=5).text
    out = dict.fromkeys(COUNTERS, 0.0)
    for family in text_string_to_metric_families(text):
        if family.name in out:
            out[family.name] += sum(s.value for s in family.samples if s.name.endswith("_total"))
    return out


def _until_serving(timeout_s: float = 240) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout_s:
        try:
            if httpx.get(f"{BASE}/v1/models", timeout=2).json().get("data"):
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError("the gateway never served a model")


def _measure(http: httpx.Client) -> dict:
    body = {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0.0}
    times: dict[str, list[float]] = {way: [] for way in WAYS}
    totals = {way: dict.fromkeys(COUNTERS, 0.0) for way in WAYS}
    texts: dict[str, list[str]] = {}
    http.post("/v1/completions", json=body)  # warm: the first request's one-time costs are nobody's
    for _ in range(ROUNDS):
        for way, width in WAYS.items():
            extra = {} if width is None else {"use_beam_search": True, "n": width}
            before = _counters()
            t0 = time.perf_counter()
            reply = http.post("/v1/completions", json={**body, **extra}).json()
            times[way].append(time.perf_counter() - t0)
            after = _counters()
            texts[way] = [c["text"] for c in reply["choices"]]
            for name in COUNTERS:
                totals[way][name] += after[name] - before[name]
    greedy = statistics.median(times["greedy"])
    return {
        way: {
            "median_s": round(statistics.median(times[way]), 3),
            "vs_greedy": round(statistics.median(times[way]) / greedy, 2),
            "engine_requests_per_request": totals[way]["vllm:request_success"] / ROUNDS,
            "prompt_tokens_cached_share": round(
                totals[way]["vllm:prompt_tokens_cached"] / max(totals[way]["vllm:prompt_tokens"], 1), 3
            ),
            "texts": texts[way],
        }
        for way in WAYS
    }


def main() -> int:
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
    cp = subprocess.Popen([*ZOO, "controlplane", "--listen", CONTROL, "--client-listen", CLIENTS, "--http", HTTP],
                          stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    agent = subprocess.Popen([*ZOO, "agent", "--control", CONTROL, "--node-id", "torch-0", "--num-threads", "1",
                              "--metrics-port", str(METRICS)], stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        _until_serving()
        with httpx.Client(base_url=BASE, timeout=300) as http:
            ways = _measure(http)
        report = {
            "date": time.strftime("%Y-%m-%d"),
            "what": f"a completion of {MAX_TOKENS} tokens on SmolLM2-135M (CPU, 1 thread), greedy vs vLLM's beam "
            f"search, alternated, {ROUNDS} rounds; real processes",
            "command": "python scripts/beam_search_cost.py",
            "ways": ways,
        }
        json.dump(report, sys.stdout, indent=1)
        print()
    finally:
        for proc in (agent, cp):
            proc.terminate()
        for proc in (agent, cp):
            proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
