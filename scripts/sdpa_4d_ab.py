"""The CPU prefill's attention as a 3-D SDPA call (before) and as a batch of one (4-D, ``attention.sdpa_one``), same
run, rounds alternated: the kernel alone at SmolLM2's shape (9 query heads, 3 KV heads, head dim 64), then whole
prefills of the real model (fp32, torch runner), one prompt of 512 and 2,000 tokens and 16 prompts of 128 at once.

    PYTHONPATH=. .venv/bin/python scripts/sdpa_4d_ab.py > bench/results/2026-12-05-sdpa-4d.json
"""

from __future__ import annotations

import json
import statistics
import time

import torch
import torch.nn.functional as F

import backends.torch.attention as attention
from backends.checkpoint import load_checkpoint
from backends.torch import build_model
from bench.embeddings import ONE_TOKEN, _engine_run, make_engine
from bench.workload import synthetic_prompt_ids

ROUNDS = 5


def sdpa_3d(q, k, v, **kwargs):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)


def kernel(n: int) -> dict:
    q, k, v = torch.randn(9, n, 64), torch.randn(3, n, 64), torch.randn(3, n, 64)
    ms: dict[str, list[float]] = {"3d": [], "4d": []}
    for f in (sdpa_3d, attention.sdpa_one):
        f(q, k, v, is_causal=True)
    for _ in range(ROUNDS):
        for name, f in (("3d", sdpa_3d), ("4d", attention.sdpa_one)):
            t0 = time.perf_counter()
            for _ in range(5):
                f(q, k, v, is_causal=True)
            ms[name].append((time.perf_counter() - t0) / 5 * 1e3)
    diff = float((sdpa_3d(q, k, v, is_causal=True) - attention.sdpa_one(q, k, v, is_causal=True)).abs().max())
    m = {name: statistics.median(v) for name, v in ms.items()}
    return {"tokens": n, "ms_3d": round(m["3d"], 3), "ms_4d": round(m["4d"], 3), "x": round(m["3d"] / m["4d"], 2),
            "max_abs_diff": diff}  # fmt: skip


def main() -> None:
    checkpoint = load_checkpoint()
    engine = make_engine(build_model(checkpoint, "float32", progress=False), checkpoint)
    vocab = engine.tokenizer.vocab_size
    seed = iter(range(1_000_000))
    fast = attention.sdpa_one
    prefills = []
    for n, length in ((1, 512), (1, 2000), (16, 128)):
        seconds: dict[str, list[float]] = {"3d": [], "4d": []}
        _engine_run(engine, [synthetic_prompt_ids(length, vocab, seed=next(seed))], ONE_TOKEN)  # warm up
        for _ in range(ROUNDS):
            for name, f in (("3d", sdpa_3d), ("4d", fast)):
                attention.sdpa_one = f  # the chunk path calls it through the module
                prompts = [synthetic_prompt_ids(length, vocab, seed=next(seed)) for _ in range(n)]
                seconds[name].append(_engine_run(engine, prompts, ONE_TOKEN)[0])
        attention.sdpa_one = fast
        m = {name: statistics.median(v) for name, v in seconds.items()}
        prefills.append({"prompts": n, "prompt_tokens": length, "ms_3d": round(m["3d"] * 1e3, 1),
                         "ms_4d": round(m["4d"] * 1e3, 1), "x": round(m["3d"] / m["4d"], 2)})  # fmt: skip
    report = {
        "date": time.strftime("%Y-%m-%d"),
        "what": "CPU prefill attention: SDPA 3-D (math path) vs a batch of one (flash kernel), same run, medians of "
        f"{ROUNDS} alternated rounds; prefills: SmolLM2 fp32, torch runner, one output token, fresh prompts",
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "kernel": [kernel(n) for n in (64, 512, 2048)],
        "prefill": prefills,
    }
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
