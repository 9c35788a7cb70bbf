"""One long prompt's prefill (one output token) on the torch runner and on the JAX runner with and without its
one-chunk path (backends/jax/solo_attention.py; ``solo_chunks=False``: the tiled form for every step), same run:
SmolLM2 fp32, a 2,048-token step budget (so a 4,000-token prompt is two chunks, the second with 2,048 tokens of
context), fresh prompts, three rounds each after a warm-up (so JAX's compiles are out of the times).

    PYTHONPATH=. .venv/bin/python scripts/jax_torch_prefill.py
"""

from __future__ import annotations

import json
import platform
import statistics
import subprocess
import time

from backends.checkpoint import load_checkpoint
from backends.jax import JaxModelRunner
from backends.torch import TorchModelRunner, build_model
from bench.embeddings import ONE_TOKEN, _engine_run
from bench.workload import synthetic_prompt_ids
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine

LENGTHS = (512, 2000, 4000)
ROUNDS = 3


def main() -> None:
    checkpoint = load_checkpoint()
    config = SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=64, max_model_len=8192)
    runners = {
        "torch": TorchModelRunner(build_model(checkpoint, "float32", progress=False), progress=False),
        "jax": JaxModelRunner(checkpoint),
        "jax_tiled": JaxModelRunner(checkpoint, solo_chunks=False),
    }
    engines = {k: LLMEngine(r, checkpoint.tokenizer, config, CacheConfig(block_size=16, num_device_blocks=1024))
               for k, r in runners.items()}  # fmt: skip
    vocab = checkpoint.tokenizer.vocab_size
    seed = iter(range(1_000_000))
    for engine in engines.values():
        for length in LENGTHS:
            _engine_run(engine, [synthetic_prompt_ids(length, vocab, seed=next(seed))], ONE_TOKEN)
    rows = []
    for length in LENGTHS:
        ms = {name: [] for name in engines}
        for _ in range(ROUNDS):
            for name, engine in engines.items():
                prompt = [synthetic_prompt_ids(length, vocab, seed=next(seed))]
                ms[name].append(1e3 * _engine_run(engine, prompt, ONE_TOKEN)[0])
        median = {name: statistics.median(v) for name, v in ms.items()}
        rows.append({
            "prompt_tokens": length,
            **{f"ms_{name}": round(value) for name, value in median.items()},
            "x_jax_over_torch": round(median["jax"] / median["torch"], 2),
            "x_jax_tiled_over_torch": round(median["jax_tiled"] / median["torch"], 2),
            "x_tiled_over_solo": round(median["jax_tiled"] / median["jax"], 2),
        })  # fmt: skip
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    print(json.dumps({"date": time.strftime("%Y-%m-%d"), "commit": commit, "host": platform.processor() or
                      platform.machine(), "rounds": ROUNDS, "median_ms": rows}, indent=1))  # fmt: skip


if __name__ == "__main__":
    main()
