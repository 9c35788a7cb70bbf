"""What a thinking budget costs a decode step: the real model (SmolLM2, fp32, torch runner) decoding 8 requests of 32
greedy tokens each, prompts that open a ``<think>`` block, three ways in one run, rounds alternated:

    plain      no budget (the sampler's fast path)
    unspent    a budget of 1,000 tokens, never reached: the budget's bookkeeping and the logits-processing path only
    forcing    a budget of 4: after 4 thinking tokens the end delimiter is forced (a one-token allowed set per row)

Reports the median seconds per decode step (the whole engine step, 8 rows) and the ratios to plain.

    PYTHONPATH=. .venv/bin/python scripts/thinking_budget_overhead.py > bench/results/2026-12-07-thinking-budget.json
"""

from __future__ import annotations

import json
import platform
import statistics
import time

from backends.checkpoint import load_checkpoint
from backends.torch import build_model
from bench.embeddings import make_engine
from bench.workload import synthetic_prompt_ids
from engine.sampling_params import SamplingParams
from engine.thinking_budget import THINK_START

ROUNDS = 9
NUM_REQUESTS, NUM_TOKENS, PROMPT_TOKENS = 8, 32, 64
WAYS = {"plain": None, "unspent": 1000, "forcing": 4}


def run(engine, prompts: list[list[int]], budget: int | None) -> tuple[float, int]:
    """(seconds in decode steps, decode steps) for the prompts run to completion, all queued at once."""
    params = SamplingParams(max_tokens=NUM_TOKENS, temperature=0, ignore_eos=True, thinking_token_budget=budget)
    for prompt in prompts:
        engine.add_request(prompt, params)
    engine.step()  # the prefill (all 8 prompts fit one step's budget)
    seconds, steps = 0.0, 0
    while engine.has_unfinished_requests():
        t0 = time.perf_counter()
        engine.step()
        seconds += time.perf_counter() - t0
        steps += 1
    return seconds, steps


def main() -> None:
    checkpoint = load_checkpoint()
    engine = make_engine(build_model(checkpoint, "float32", progress=False), checkpoint)
    tok = engine.tokenizer
    start = tok.encode(THINK_START, add_special_tokens=False)
    seed = iter(range(1_000_000))

    def prompts() -> list[list[int]]:
        return [[*synthetic_prompt_ids(PROMPT_TOKENS, tok.vocab_size, seed=next(seed)), *start]
                for _ in range(NUM_REQUESTS)]  # fmt: skip

    run(engine, prompts(), None)  # warm up
    per_step: dict[str, list[float]] = {way: [] for way in WAYS}
    for _ in range(ROUNDS):
        for way, budget in WAYS.items():
            seconds, steps = run(engine, prompts(), budget)
            per_step[way].append(seconds / steps)
    ms = {way: statistics.median(v) * 1e3 for way, v in per_step.items()}
    print(json.dumps({
        "date": time.strftime("%Y-%m-%d"),
        "host": f"{platform.processor() or platform.machine()}, CPU, torch runner fp32",
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "ms_per_decode_step_median": {way: round(v, 3) for way, v in ms.items()},
        "ratio_to_plain": {way: round(v / ms["plain"], 3) for way, v in ms.items()},
        "rounds": ROUNDS,
        "ms_per_round": {way: [round(1e3 * s, 3) for s in v] for way, v in per_step.items()},
    }, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
