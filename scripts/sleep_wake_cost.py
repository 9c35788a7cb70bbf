"""What vLLM's sleep mode costs and gives back on a node (engine/sleep_mode.py, the runners' ``sleep``/``wake_up``):
SmolLM2-135M-Instruct on this host's CPU, torch and JAX backends, fp32. Per level, alternated over rounds in one
process: the time to sleep, the resident memory it gave back, the time to wake, and whether the same greedy request
answers the same tokens after the wake; beside it, in the same run, a cold start of the same engine (what stopping and
restarting the agent costs instead: the checkpoint loaded, the weights packed, the KV allocated) as the ratio a wake
is measured against.

    python scripts/sleep_wake_cost.py [--rounds 3] [--out bench/results/DATE-sleep-wake-cost.json]

On a CPU node the weights already live in host RAM, so level 1 frees only the KV cache; on a GPU level 1 would also
copy the weights to host RAM (not measurable here: no GPU was lent).
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import platform
import statistics
import subprocess
import time

from backends.builder import build_engine
from engine.config import EngineConfig
from engine.sampling_params import SamplingParams
from engine.sleep_mode import put_to_sleep, wake

PROMPT = [(7 * j) % 40_000 + 100 for j in range(64)]
NEW_TOKENS = 16


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def answer(engine, tag: str) -> list[int]:
    engine.add_request(PROMPT, SamplingParams(max_tokens=NEW_TOKENS, temperature=0.0, ignore_eos=True), req_id=tag)
    tokens: list[int] = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens += out.new_token_ids
    return tokens


def cold_start(backend: str, threads: int) -> tuple[object, float]:
    t0 = time.perf_counter()
    engine = build_engine(EngineConfig(backend=backend, num_threads=threads), progress=False)
    return engine, time.perf_counter() - t0


def one_round(engine, level: int, reference: list[int], round_no: int) -> dict:
    gc.collect()
    before = rss_bytes()
    t0 = time.perf_counter()
    freed = put_to_sleep(engine, level)
    sleep_s = time.perf_counter() - t0
    gc.collect()
    asleep = rss_bytes()
    t1 = time.perf_counter()
    wake(engine, ())
    wake_s = time.perf_counter() - t1
    same = answer(engine, f"after-{level}-{round_no}") == reference
    return {"sleep_s": sleep_s, "wake_s": wake_s, "freed_bytes": freed, "rss_given_back_bytes": before - asleep,
            "same_tokens": same}  # fmt: skip


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--backends", default="torch,jax")
    p.add_argument("--out", default=None)
    args = p.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    report: dict = {
        "date": datetime.date.today().isoformat(),
        "commit": commit,
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "note": "freed_bytes: the device tier's KV (and at level 2 the weights) as the runner counts them; on a CPU "
        "node the host tier's KV blocks are RAM too, so the resident memory given back is larger",
        "host": {"cpu": platform.processor() or platform.machine(), "threads": args.threads},
        "rounds": args.rounds,
        "backends": {},
    }
    for backend in args.backends.split(","):
        engine, _ = cold_start(backend, args.threads)
        reference = answer(engine, "reference")
        runs: dict[str, list[dict]] = {"level1": [], "level2": [], "cold_start_s": []}
        for r in range(args.rounds):
            for level in (1, 2):
                runs[f"level{level}"].append(one_round(engine, level, reference, r))
            del engine
            gc.collect()
            engine, cold_s = cold_start(backend, args.threads)  # the alternative: the agent stopped and restarted
            runs["cold_start_s"].append(cold_s)
            assert answer(engine, f"cold-{r}") == reference
        cold = statistics.median(runs["cold_start_s"])
        summary: dict = {}
        for level in (1, 2):
            rs = runs[f"level{level}"]
            wake_s = statistics.median(x["wake_s"] for x in rs)
            summary[f"level{level}"] = {
                "median_sleep_s": statistics.median(x["sleep_s"] for x in rs),
                "median_wake_s": wake_s,
                "wake_over_cold_start": wake_s / cold,
                "freed_bytes": rs[0]["freed_bytes"],
                "median_rss_given_back_bytes": statistics.median(x["rss_given_back_bytes"] for x in rs),
                "same_tokens_every_round": all(x["same_tokens"] for x in rs),
            }
        summary["median_cold_start_s"] = cold
        report["backends"][backend] = {"summary": summary, "runs": runs}
        del engine
        gc.collect()
    text = json.dumps(report, indent=2)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
