"""How long one long prompt's tokenization stalls the control plane's event loop (controlplane/offload_tokenize.py):
the longest gap between ticks of a 1 ms task on the loop while SmolLM2's tokenizer encodes a prompt of each size,
three ways in one run: on the loop (the old path, and today's below ``offload_tokenize_chars``), in a worker thread
through ``encode`` (which holds the GIL), and in a worker thread through ``encode_unlocked`` (today's path for long
prompts, the GIL released). Medians of 5 tries each; the sides interleave.

    .venv/bin/python scripts/tokenize_loop_lag.py > bench/results/<date>-tokenize-loop-lag.json

``--concurrent N``: N prompts of 900 kB at once instead, two ways: each in a thread of anyio's default pool (the HTTP
path before TokenizeWorkers: up to 40 at once) and through ``TokenizeWorkers`` (controlplane/offload_tokenize.py: two
at once, the others waiting their turn); the loop's longest gap and the wall time until all N are tokenized.

    .venv/bin/python scripts/tokenize_loop_lag.py --concurrent 16 > bench/results/<date>-tokenize-concurrent-lag.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import anyio

from backends.checkpoint import default_model_path, load_checkpoint
from controlplane.offload_tokenize import TokenizeWorkers
from engine.sampling_params import SamplingParams
from transport.messages import ClientGenerate

SENTENCE = "The lighthouse keeper climbs the stairs at dusk and lights the lamp. "


async def longest_gap_ms(work) -> tuple[float, float]:
    """(the loop's longest gap between ticks, the work's own wall time), in ms, while ``work`` is awaited."""
    gaps: list[float] = []
    running = True

    async def tick() -> None:
        last = time.perf_counter()
        while running:
            await anyio.sleep(0.001)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await anyio.sleep(0.02)
        gaps.clear()
        t0 = time.perf_counter()
        await work()
        took = time.perf_counter() - t0
        await anyio.sleep(0.005)
        running = False
    return 1e3 * max(gaps), 1e3 * took


async def main() -> None:
    tokenizer = load_checkpoint(default_model_path()).tokenizer
    report = {"model": "SmolLM2-135M-Instruct tokenizer (tokenizers, Rust)", "tick_ms": 1, "tries": 5, "sizes": []}
    for chars in (16_384, 90_000, 900_000):
        text = (SENTENCE * (chars // len(SENTENCE) + 1))[:chars]
        ways = {
            "on_the_loop": lambda t=text: _sync(tokenizer.encode, t),
            "thread_encode": lambda t=text: anyio.to_thread.run_sync(tokenizer.encode, t),
            "thread_encode_unlocked": lambda t=text: anyio.to_thread.run_sync(tokenizer.encode_unlocked, t),
        }
        results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
        for _ in range(5):
            for name, work in ways.items():
                results[name].append(await longest_gap_ms(work))
        row = {"chars": chars, "tokens": len(tokenizer.encode(text))}
        for name, runs in results.items():
            row[name] = {
                "loop_longest_gap_ms": round(statistics.median(g for g, _ in runs), 1),
                "tokenize_wall_ms": round(statistics.median(w for _, w in runs), 1),
            }
        report["sizes"].append(row)
    print(json.dumps(report, indent=2))


async def concurrent(n: int, tries: int = 3) -> None:
    tokenizer = load_checkpoint(default_model_path()).tokenizer
    text = (SENTENCE * (900_000 // len(SENTENCE) + 1))[:900_000]
    msgs = [ClientGenerate(request_id=f"r{i}", prompt=text, sampling=SamplingParams()) for i in range(n)]

    def all_at_once(tokenize):
        async def work() -> None:
            async with anyio.create_task_group() as tg:
                for msg in msgs:
                    tg.start_soon(tokenize, msg)

        return work

    ways = {
        "default_thread_pool": lambda: all_at_once(lambda m: anyio.to_thread.run_sync(tokenizer.encode_unlocked, text)),
        "tokenize_workers": lambda: all_at_once(TokenizeWorkers(tokenizer).tokenize),
    }
    results: dict[str, list[tuple[float, float]]] = {name: [] for name in ways}
    for _ in range(tries):
        for name, make in ways.items():
            results[name].append(await longest_gap_ms(make()))
    report = {
        "model": "SmolLM2-135M-Instruct tokenizer (tokenizers, Rust)",
        "tick_ms": 1,
        "tries": tries,
        "prompts_at_once": n,
        "chars_each": len(text),
        "tokens_each": len(tokenizer.encode(text)),
        "ways": {},
    }
    for name, runs in results.items():
        report["ways"][name] = {
            "loop_longest_gap_ms": round(statistics.median(g for g, _ in runs), 1),
            "all_tokenized_wall_ms": round(statistics.median(w for _, w in runs), 1),
        }
    print(json.dumps(report, indent=2))


async def _sync(fn, text):
    fn(text)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--concurrent", type=int, default=0, help="N prompts of 900 kB at once (0: one at a time)")
    args = parser.parse_args()
    anyio.run(concurrent, args.concurrent) if args.concurrent else anyio.run(main)
