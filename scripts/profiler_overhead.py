"""What a node's profiler costs (agent/node_profiler.py, `--profiler-config`): the same SmolLM2 work run with the
profiler off, then on (torch.profiler; with and without Python stacks), alternating rounds in one process, on
this host's CPU (torch backend, fp32). Each round: 4 requests of a 200-token prompt, 24 tokens each, stepped as the
engine thread steps them (each step in its ``zoo_step_<n>`` range); its wall time, what the stop took on the engine
thread (``stop_s``), what writing the trace took on the writer thread (``write_s``), and the trace's bytes.

    python scripts/profiler_overhead.py [--rounds 5] [--out bench/results/DATE-profiler-overhead.json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time

from agent.node_profiler import node_profiler
from backends.builder import build_engine
from backends.profiler_config import ProfilerConfig
from engine.config import EngineConfig
from engine.sampling_params import SamplingParams

PROMPT_TOKENS, NEW_TOKENS, REQUESTS = 200, 24, 4
WAYS = ("off", "torch", "torch+stack")


def one_round(engine, way: str, directory: str, round_no: int) -> dict:
    profiler = None
    if way != "off":
        config = ProfilerConfig(
            profiler="torch", torch_profiler_dir=directory, torch_profiler_with_stack=way == "torch+stack"
        )
        profiler = node_profiler(config, f"{way}-{round_no}")
        profiler.start()
    for i in range(REQUESTS):  # the same prompts every round: the prefix cache is reset between rounds
        prompt = [(7 * i + j) % 40_000 + 100 for j in range(PROMPT_TOKENS)]
        params = SamplingParams(max_tokens=NEW_TOKENS, ignore_eos=True)
        engine.add_request(prompt, params, req_id=f"{way}-{round_no}-{i}")
    steps, t0 = 0, time.perf_counter()
    while engine.has_unfinished_requests():
        if profiler is None:
            engine.step()
        else:
            with profiler.step_range():
                engine.step()
            profiler.after_step()
        steps += 1
    wall_s = time.perf_counter() - t0
    out = {"wall_s": wall_s, "steps": steps}
    if profiler is not None:
        t1 = time.perf_counter()
        write = profiler.stop()  # what the engine thread does at a stop
        t2 = time.perf_counter()
        files = write()  # what a node's trace writer thread does then
        out["stop_s"], out["write_s"] = t2 - t1, time.perf_counter() - t2
        out["trace_bytes"] = sum(os.path.getsize(f) for f in files)
    engine.reset_prefix_cache()
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    engine = build_engine(EngineConfig(num_threads=args.threads), progress=False)
    runs: dict[str, list[dict]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory() as directory:
        one_round(engine, "off", directory, -1)  # warm-up, not counted
        for r in range(args.rounds):
            for way in WAYS:
                runs[way].append(one_round(engine, way, directory, r))
    base = statistics.median(x["wall_s"] for x in runs["off"])
    summary = {
        way: {
            "median_wall_s": statistics.median(x["wall_s"] for x in rs),
            "vs_off": statistics.median(x["wall_s"] for x in rs) / base,
            "median_stop_s": statistics.median(x.get("stop_s", 0.0) for x in rs),
            "median_write_s": statistics.median(x.get("write_s", 0.0) for x in rs),
            "median_trace_bytes": statistics.median(x.get("trace_bytes", 0) for x in rs),
            "steps": rs[0]["steps"],
        }
        for way, rs in runs.items()
    }
    report = {
        "what": "SmolLM2-135M-Instruct, torch backend, fp32, CPU; 4 requests x (200 prompt + 24 new tokens) a round; "
        "profiler off / torch.profiler / torch.profiler with Python stacks, rounds alternated",
        "host": {"cpu": platform.processor() or platform.machine(), "threads": args.threads},
        "rounds": args.rounds,
        "summary": summary,
        "runs": runs,
    }
    text = json.dumps(report, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
