"""`zoo bench gc-pauses`: what freezing the control plane's start-up heap (observe/gc_pauses.py ``settle_heap``) does
to its garbage collector's pauses and to request latency, side by side with ``--no-gc-freeze`` in the same run.

Per round, each side in turn (the order alternates between rounds): a control plane (``python -m zoo.serve
controlplane --fake-tokenizer``, HTTP on loopback; its heap is the real one's: ~150,000 tracked objects, the
tokenizer's vocabulary lives in Rust) and one agent (``--fake-runner``: no compute, one step per ``--fake-step-ms``)
as child processes; ``--requests`` completions (``max_tokens`` 16, a ~300-character prompt each) through the HTTP
gateway, ``--concurrency`` at once; then the control plane's own collector figures from its /metrics
(zoo:process_gc_pause_seconds and _max_seconds by generation, zoo:process_gc_frozen_objects) and the requests'
latencies as the client saw them. Medians over rounds; the ratios are frozen / not frozen.

    zoo bench gc-pauses [--quick] [--json]             (2 rounds of 3,000 requests, 16 at once; --quick: 1 of 800)
    python -m bench.gc_pauses [--rounds R] [--requests N] [--concurrency C] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from transport.local_ports import free_port
from transport.process import stop_processes

REPO_ROOT = Path(__file__).resolve().parents[1]
PROMPT = "Describe the lighthouse keeper's day, " * 8


def _start(frozen: bool, log_dir: Path) -> tuple[list[subprocess.Popen], str]:
    agents, clients, http = (f"tcp://127.0.0.1:{free_port()}", f"tcp://127.0.0.1:{free_port()}",
                             f"127.0.0.1:{free_port()}")  # fmt: skip
    cp = [sys.executable, "-m", "zoo.serve", "controlplane", "--fake-tokenizer", "--stats-listen", "none"]
    cp += ["--listen", agents, "--client-listen", clients, "--http", http] + ([] if frozen else ["--no-gc-freeze"])
    agent = [sys.executable, "-m", "zoo.serve", "agent", "--fake-runner", "--fake-step-ms", "1", "--control", agents]
    procs = []
    for name, argv in (("controlplane", cp), ("agent", agent)):
        with open(log_dir / f"{name}-{'frozen' if frozen else 'not-frozen'}.log", "ab") as out:
            procs.append(subprocess.Popen(argv, cwd=REPO_ROOT, stdout=out, stderr=subprocess.STDOUT))
    return procs, f"http://{http}"


def _wait_serving(base: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/v1/models", timeout=2).json().get("data"):
                metrics = httpx.get(f"{base}/metrics", timeout=2).text
                if "zoo:process_gc_frozen_objects" in metrics:
                    return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.2)
    raise TimeoutError(f"{base} never served")


async def _load(base: str, num_requests: int, concurrency: int) -> list[float]:
    latencies: list[float] = []
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(num_requests):
        queue.put_nowait(i)
    body = {"prompt": PROMPT, "max_tokens": 16, "temperature": 0}

    async def worker(client: httpx.AsyncClient) -> None:
        while not queue.empty():
            queue.get_nowait()
            t0 = time.perf_counter()
            reply = await client.post("/v1/completions", json=body)
            reply.raise_for_status()
            latencies.append(time.perf_counter() - t0)

    async with httpx.AsyncClient(base_url=base, timeout=60) as client:
        await asyncio.gather(*(worker(client) for _ in range(concurrency)))
    return latencies


def _gc_figures(metrics: str) -> dict:
    """The control plane's collector figures from its /metrics text."""

    def value(name: str, generation: str | None = None) -> float:
        label = "" if generation is None else f'{{generation="{generation}"}}'
        found = re.search(rf"^{re.escape(name + label)} ([0-9.e+-]+)$", metrics, re.M)
        return float(found.group(1)) if found else float("nan")

    out = {"frozen_objects": int(value("zoo:process_gc_frozen_objects"))}
    for generation in ("0", "1", "2"):
        bucket = rf'^zoo:process_gc_pause_seconds_bucket{{generation="{generation}",le="([^"]+)"}} ([0-9.e+-]+)$'
        buckets = re.findall(bucket, metrics, re.M)
        out[f"gen{generation}"] = {
            "collections": int(value("zoo:process_gc_pause_seconds_count", generation)),
            "total_ms": round(1e3 * value("zoo:process_gc_pause_seconds_sum", generation), 2),
            "max_ms": round(1e3 * value("zoo:process_gc_pause_max_seconds", generation), 2),
            "buckets": {le: float(n) for le, n in buckets},  # cumulative counts by upper bound
        }
    return out


def _longest_at_most_ms(before: dict, after: dict) -> float | None:
    """The upper bound of the highest histogram bucket that gained a collection between two scrapes (None: none)."""
    bound, below = None, 0.0
    for le, n in after["buckets"].items():
        gained = n - before["buckets"].get(le, 0.0)
        if gained > below:
            bound, below = le, gained
    return None if bound is None else (float("inf") if bound == "+Inf" else round(1e3 * float(bound), 2))


def _percentiles_ms(latencies: list[float]) -> dict:
    ordered = sorted(latencies)

    def pick(q: float) -> float:
        return round(1e3 * ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 2)

    return {"p50_ms": pick(0.5), "p99_ms": pick(0.99), "p999_ms": pick(0.999), "max_ms": pick(1.0)}


def _one(frozen: bool, args: argparse.Namespace, log_dir: Path) -> dict:
    procs, base = _start(frozen, log_dir)
    try:
        _wait_serving(base)
        asyncio.run(_load(base, 50, args.concurrency))  # warm-up, not counted (the gauges count it)
        before = _gc_figures(httpx.get(f"{base}/metrics", timeout=10).text)
        t0 = time.monotonic()
        latencies = asyncio.run(_load(base, args.requests, args.concurrency))
        wall_s = time.monotonic() - t0
        after = _gc_figures(httpx.get(f"{base}/metrics", timeout=10).text)
    finally:
        stop_processes(procs)
    during = {g: {k: round(after[g][k] - before[g][k], 2) for k in ("collections", "total_ms")} for g in ("gen0",
              "gen1", "gen2")}  # fmt: skip
    for g in during:
        during[g]["longest_ms_at_most"] = _longest_at_most_ms(before[g], after[g])  # a bucket's bound
        during[g]["longest_ms_since_start"] = after[g]["max_ms"]  # the frozen side's includes settle_heap's own
    return {"frozen_objects": after["frozen_objects"], "gc_during_load": during, "latency": _percentiles_ms(latencies),
            "requests_per_s": round(len(latencies) / wall_s, 1)}  # fmt: skip


def run_gc_pauses_bench(args: argparse.Namespace) -> dict:
    quick = getattr(args, "quick", False)
    args = argparse.Namespace(
        rounds=getattr(args, "rounds", 1 if quick else 2),
        requests=getattr(args, "requests", 800 if quick else 3000),
        concurrency=getattr(args, "concurrency", 16),
        json=getattr(args, "json", False),
    )
    log_dir = Path(tempfile.mkdtemp(prefix="zoo-gc-bench-"))
    runs: dict[str, list[dict]] = {"frozen": [], "not_frozen": []}
    for r in range(args.rounds):
        for frozen in (True, False) if r % 2 == 0 else (False, True):
            result = _one(frozen, args, log_dir)
            runs["frozen" if frozen else "not_frozen"].append(result)
            if not args.json:
                side = "frozen    " if frozen else "not frozen"
                g2 = result["gc_during_load"]["gen2"]
                lat = result["latency"]
                print(f"round {r + 1} {side}: p50 {lat['p50_ms']} ms, p99 {lat['p99_ms']} ms, max {lat['max_ms']} ms;"
                      f" gen2 collections {g2['collections']}, {g2['total_ms']} ms in all, the longest <= "
                      f"{g2['longest_ms_at_most']} ms", flush=True)  # fmt: skip

    def median(side: str, *path: str) -> float:
        values = []
        for run in runs[side]:
            v = run
            for key in path:
                v = v[key]
            values.append(v)
        return round(statistics.median(values), 2)

    summary = {}
    for side in runs:
        summary[side] = {
            "latency_p50_ms": median(side, "latency", "p50_ms"),
            "latency_p99_ms": median(side, "latency", "p99_ms"),
            "latency_p999_ms": median(side, "latency", "p999_ms"),
            "latency_max_ms": median(side, "latency", "max_ms"),
            "gen2_collections": median(side, "gc_during_load", "gen2", "collections"),
            "gen2_total_ms": median(side, "gc_during_load", "gen2", "total_ms"),
            "gen2_longest_ms_at_most": median(side, "gc_during_load", "gen2", "longest_ms_at_most"),
            "frozen_objects": median(side, "frozen_objects"),
        }
    ratios = {
        key: round(summary["frozen"][key] / summary["not_frozen"][key], 3)
        for key in ("latency_p50_ms", "latency_p99_ms", "latency_p999_ms", "latency_max_ms", "gen2_total_ms")
        if summary["not_frozen"][key]
    }
    return {
        "what": "the control plane with its start-up heap frozen (default) vs --no-gc-freeze, same run",
        "config": {"rounds": args.rounds, "requests": args.requests, "concurrency": args.concurrency,
                   "prompt_chars": len(PROMPT), "max_tokens": 16, "agent": "--fake-runner --fake-step-ms 1"},
        "summary": summary,
        "ratios_frozen_over_not_frozen": ratios,
        "runs": runs,
        "log_dir": str(log_dir),
    }  # fmt: skip


def add_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--requests", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=16)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_args(parser)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    report = run_gc_pauses_bench(args)
    if args.json:
        import json

        print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
