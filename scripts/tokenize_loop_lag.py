"""How long one long prompt's tokenization stalls the control plane's event loop (controlplane/offload_tokenize.py):
the longest gap between ticks of a 1 ms task on the loop while SmolLM2's tokenizer encodes a prompt of each size,
three ways in one run: on the loop (the old path, and today's below ``offload_tokenize_chars``), in a worker thread
through ``encode`` (which holds the GIL), and in a worker thread through ``encode_unlocked`` (today's path for long
prompts, the GIL released). Medians of 5 tries each; the sides interleave.

    .venv/bin/python scripts/tokenize_loop_lag.py > bench/results/<date>-tokenize-loop-lag.json
"""

from __future__ import annotations

import json
import statistics
import time

import anyio

from backends.checkpoint import default_model_path, load_checkpoint

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


async def _sync(fn, text):
    fn(text)


if __name__ == "__main__":
    anyio.run(main)
