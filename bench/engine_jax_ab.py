"""JAX vs torch decode, interleaved in one process: the JAX/torch ratio on a shared, busy machine.

`zoo bench engine` measures torch and JAX in separate processes one after the other, minutes apart; on a machine
whose load swings (other jobs), the ratio then mostly measures the load. Here three LLMEngines on the real model
(fp32, CPU) live in one process — torch (its defaults: the C decode kernel for <= 64 rows), JAX with the FFI
decode kernel (backends/jax/cpu_kernel.py), JAX with the pure-XLA programs only, and optionally
``jax_kernel_xla_head`` (the FFI kernel with the output head of > 4-row steps as an XLA dot: the path before the
kernel's panel-packed head, for before/after runs in one process) and ``torch_onednn_head`` (the torch runner
with the same steps' head on oneDNN's packed weight, its path before the panel head) — and each round runs the
same two workloads on each engine in a rotating order, seconds apart:

- batch 1: a 128-token prompt, ``n_out`` greedy tokens; decode tok/s = 1 / TPOT (as bench/engine.py);
- uniform 32: 32 prompts of 64 tokens at t=0, ``n_out`` tokens each; aggregate decode tok/s after the last first
  token (bench/engine_jax.py ``uniform_concurrent``), and ``uniform32_steady``: over the steps that decode all 32
  requests and nothing else (``steady_decode_tok_per_s``: the first figure also carries the mixed
  decode + prefill steps, where the JAX runner runs its decode and chunk programs one after the other).

Ratios are per round (JAX variant / torch of the same round), then their median. JAX engines are warmed first
(decode buckets compiled, both workloads run once), and every round's prompts are new (no prefix-cache hits).

    python -m bench.engine_jax_ab --rounds 3 --n-out 32 [--variants torch,jax_kernel,jax_kernel_xla_head]
"""

from __future__ import annotations

import json
import os
import statistics
import time

from bench.engine_jax import BATCH1_PROMPT, BATCH32_PROMPT, NUM_CONCURRENT, uniform_concurrent
from bench.workload import synthetic_prompt_ids

VARIANTS = ("torch", "jax_kernel", "jax_xla")
ALL_VARIANTS = (*VARIANTS, "jax_kernel_xla_head", "torch_onednn_head")
RATIOS = {  # ratio name -> the figure of a round it divides (variant / torch)
    "batch1": "batch1_decode_tok_per_s",
    "uniform32": "uniform32_decode_tok_per_s",
    "uniform32_steady": "uniform32_steady_decode_tok_per_s",
    "uniform32_prefill": "uniform32_prefill_tok_per_s",
}


def _engine(variant: str, model_path: str | None, num_blocks: int):
    from backends.builder import build_engine
    from engine.config import CacheConfig, EngineConfig, SchedulerConfig

    cfg = EngineConfig(
        model=model_path,
        backend="torch" if variant.startswith("torch") else "jax",
        dtype="float32",
        scheduler=SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=64),
        cache=CacheConfig(num_device_blocks=num_blocks, num_host_blocks=0),
        cpu_decode_kernel=variant != "jax_xla",
    )
    engine = build_engine(cfg, progress=False)
    if variant == "jax_kernel_xla_head":
        engine.runner.cpu_decode_head = "xla"
    if variant == "torch_onednn_head":  # the torch runner's > 4-row head on oneDNN (before the panel head)
        engine.runner.cpu_decode_head = "onednn"
    return engine


def _batch1(engine, n_out: int, seed: int) -> float:
    from engine.sampling_params import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=n_out, ignore_eos=True)
    (res,) = engine.generate([synthetic_prompt_ids(BATCH1_PROMPT, engine.tokenizer.vocab_size, seed=seed)], params)
    return 1.0 / res.metrics.tpot_s


def run(
    model_path: str | None, rounds: int, n_out: int, num_blocks: int = 640, variants: tuple[str, ...] = VARIANTS
) -> dict:
    import torch

    if variants[0] != "torch" or len(set(variants)) != len(variants) or not set(variants) <= set(ALL_VARIANTS):
        raise ValueError(f"variants: 'torch' first, then distinct ones of {ALL_VARIANTS[1:]}, got {variants}")
    torch.set_num_threads(2)
    engines = {v: _engine(v, model_path, num_blocks) for v in variants}
    max_context = max(BATCH1_PROMPT, BATCH32_PROMPT) + n_out
    for v, engine in engines.items():
        if not v.startswith("torch"):
            engine.runner.warmup(max_num_seqs=NUM_CONCURRENT, max_context_tokens=max_context)
        _batch1(engine, n_out, seed=7)
        uniform_concurrent(engine, n_out, seed_base=5000)
    compiles = {v: e.runner.num_compilations for v, e in engines.items() if not v.startswith("torch")}
    per_round = []
    for r in range(rounds):
        order = variants[r % len(variants) :] + variants[: r % len(variants)]
        row: dict = {"order": list(order)}
        for v in order:
            load = os.getloadavg()[0]
            b1 = _batch1(engines[v], n_out, seed=100 + r)
            u = uniform_concurrent(engines[v], n_out, seed_base=10_000 * (r + 1))
            row[v] = {
                "batch1_decode_tok_per_s": b1,
                "uniform32_decode_tok_per_s": u["decode_tok_per_s"],
                "uniform32_steady_decode_tok_per_s": u["steady_decode_tok_per_s"],
                "uniform32_prefill_tok_per_s": u["prefill_tok_per_s"],
                "load": load,
            }
        for v in variants[1:]:
            row[f"{v}_vs_torch"] = {k: row[v][key] / row["torch"][key] for k, key in RATIOS.items()}
        per_round.append(row)
    median = {
        f"{v}_vs_torch": {k: statistics.median(r[f"{v}_vs_torch"][k] for r in per_round) for k in RATIOS}
        for v in variants[1:]
    }
    return {
        "rounds": per_round,
        "median_ratios": median,
        "jax_steady_state_recompiles": {
            v: e.runner.num_compilations - compiles[v] for v, e in engines.items() if v in compiles
        },
        "decode_paths": {v: getattr(engines[v].runner, "decode_path", "torch") for v in variants[1:]},
        "n_out": n_out,
        "time_utc": time.strftime("%H:%M:%S", time.gmtime()),
    }


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--n-out", type=int, default=32)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"torch first, then some of {ALL_VARIANTS[1:]}")
    args = parser.parse_args()
    print(json.dumps(run(args.model, args.rounds, args.n_out, variants=tuple(args.variants.split(","))), indent=2))
