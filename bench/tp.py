"""`zoo bench tp`: tensor parallelism on CPU (gloo, local processes), against TP=1 in the same run.

Three parts:
- token_identical: greedy ids of TP=2 (flat all-reduce, and hierarchical uncompressed) vs TP=1, on the
  tiny random Llama and on the step-time model below.
- step times: decode steps of a random Llama (``STEP_MODEL``: 8 heads over 4 KV heads, so TP=2 divides
  it) at batch ``STEP_BATCH``; TP=1 runs in this process with 2 threads, TP=2 in 2 processes with 1 thread
  each (the same 2 cores). Median runner step time of the decode steps.
- all-reduce on emulated links: 4 ranks in 2 fast domains of 2, links paced by a LinkModel with a 4:1
  bandwidth split (``LINK``: a software rate limiter on every transfer, backends/torch/allreduce.py
  ``PacedP2P``; no kernel shaping). Flat = ring over the same paced links; hierarchical = leader-based, the
  slow link uncompressed / bf16 / int8; sharded = reduce-scatter in the domain, each rank's half over its
  own slow link, all-gather (uncompressed / bf16). Two message sizes: a decode step's activations (32 rows x 576
  fp32) and a prefill chunk's (512 rows x 576 fp32). Each figure is the mean of ``REPEATS`` calls on
  rank 0, next to the LinkModel's analytic prediction.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

from backends.link_model import LinkModel

# scaled-down bandwidths (the ratios are scale-free in the bandwidth-bound regime): a paced step must dwarf
# what 4 processes on 2 shared cores spend per gloo exchange on loopback (~1-5 ms under load)
LINK = LinkModel(domain_size=2, fast_gbps=0.04, slow_gbps=0.01, fast_latency_us=5.0, slow_latency_us=50.0)
SIZES = {"decode_32x576": 32 * 576, "prefill_512x576": 512 * 576}
REPEATS = 20
STEP_BATCH = 8
STEP_PROMPT = 16


def step_model_config(quick: bool) -> Any:
    from backends.runner_driver import tiny_config

    return tiny_config(
        name="bench-tp-llama",
        vocab_size=8192,
        hidden_size=512,
        intermediate_size=1536,
        num_hidden_layers=4 if quick else 8,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=64,
        max_position_embeddings=512,
    )


def _allreduce_worker(group: Any, sizes: dict[str, int], repeats: int) -> dict:
    import torch

    from backends.torch.allreduce import hierarchical_all_reduce, ring_all_reduce, sharded_all_reduce

    p2p = group.p2p
    algos = {
        "flat_ring": lambda x: ring_all_reduce(p2p, x),
        "hierarchical_none": lambda x: hierarchical_all_reduce(p2p, x, LINK.domain_size, "none"),
        "hierarchical_bf16": lambda x: hierarchical_all_reduce(p2p, x, LINK.domain_size, "bf16"),
        "hierarchical_int8": lambda x: hierarchical_all_reduce(p2p, x, LINK.domain_size, "int8"),
        "sharded_none": lambda x: sharded_all_reduce(p2p, x, LINK.domain_size, "none"),
        "sharded_bf16": lambda x: sharded_all_reduce(p2p, x, LINK.domain_size, "bf16"),
    }
    out: dict = {}
    gen = torch.Generator().manual_seed(group.rank)
    for size_name, numel in sizes.items():
        src = torch.randn(numel, generator=gen)
        row = {}
        for name, fn in algos.items():
            fn(src.clone())  # warm-up
            group.barrier()
            t0 = time.perf_counter()
            for _ in range(repeats):
                fn(src.clone())
            row[name] = (time.perf_counter() - t0) / repeats
            group.barrier()
        out[size_name] = row
    return out


def _allreduce_part(quick: bool) -> dict:
    from backends.torch.tp_group import TPConfig
    from backends.torch.tp_launch import run_ranks

    repeats = 5 if quick else REPEATS
    results = run_ranks(_allreduce_worker, TPConfig(size=4), (SIZES, repeats), link=LINK)
    measured = results[0]
    report: dict = {"world": 4, "link": _link_dict(), "repeats": repeats, "sizes": {}}
    for size_name, row in measured.items():
        nbytes = SIZES[size_name] * 4
        model = {"flat_ring": LINK.ring_all_reduce_s(4, nbytes)}
        for c in ("none", "bf16", "int8"):
            model[f"hierarchical_{c}"] = LINK.hierarchical_all_reduce_s(4, nbytes, c)
        for c in ("none", "bf16"):
            model[f"sharded_{c}"] = LINK.sharded_all_reduce_s(4, nbytes, c)
        report["sizes"][size_name] = {
            "bytes": nbytes,
            "measured_ms": {k: v * 1e3 for k, v in row.items()},
            "link_model_ms": {k: v * 1e3 for k, v in model.items()},
            "flat_over_hierarchical": {k: row["flat_ring"] / v for k, v in row.items() if k != "flat_ring"},
        }
    return report


def _link_dict() -> dict:
    return {
        "domain_size": LINK.domain_size,
        "fast_gbps": LINK.fast_gbps,
        "slow_gbps": LINK.slow_gbps,
        "bandwidth_split": LINK.fast_gbps / LINK.slow_gbps,
        "fast_latency_us": LINK.fast_latency_us,
        "slow_latency_us": LINK.slow_latency_us,
        "emulation": "software pacing of every point-to-point transfer (PacedP2P), gloo on loopback underneath",
    }


def _prompts(vocab: int, batch: int, length: int) -> list[list[int]]:
    import numpy as np

    rng = np.random.default_rng(0)
    return rng.integers(3, vocab, size=(batch, length)).tolist()


def _tp_part(quick: bool) -> dict:
    import torch

    from backends.runner_driver import drive_greedy, tiny_config
    from backends.torch import TorchModelRunner, random_state_dict
    from backends.torch.tp_group import TPConfig
    from backends.torch.tp_launch import run_ranks, tp_generate

    num_new = 8 if quick else 24
    out: dict = {"token_identical": {}}
    tiny = tiny_config()
    tiny_sd = random_state_dict(tiny, seed=1, std=0.2)
    tiny_prompts = _prompts(tiny.vocab_size, 4, 9)
    torch.set_num_threads(2)
    ref, _ = drive_greedy(TorchModelRunner(tiny, state_dict=tiny_sd, progress=False), tiny_prompts, 16)
    for mode in ("flat", "hierarchical"):
        cfg = TPConfig(size=2, allreduce=mode, domain_size=1 if mode == "hierarchical" else 0)
        got = run_ranks(tp_generate, cfg, (tiny, tiny_prompts, 16, tiny_sd))[0][0]
        out["token_identical"][f"tiny_tp2_{mode}"] = got == ref

    config = step_model_config(quick)
    sd = random_state_dict(config, seed=0, std=0.05)
    prompts = _prompts(config.vocab_size, STEP_BATCH, STEP_PROMPT)
    tp1 = {}
    for threads in (1, 2):
        torch.set_num_threads(threads)
        runner = TorchModelRunner(config, state_dict=sd, progress=False)
        ref, times = drive_greedy(runner, prompts, num_new, block_size=16)
        tp1[threads] = statistics.median(times[1:])
    got, times2 = run_ranks(tp_generate, TPConfig(size=2), (config, prompts, num_new, sd, "float32", 16))[0]
    out["token_identical"]["step_model_tp2_flat"] = got == ref
    t2 = statistics.median(times2[1:])
    out["step_model"] = {
        "config": {k: getattr(config, k) for k in ("hidden_size", "num_hidden_layers", "num_attention_heads")},
        "batch": STEP_BATCH,
        "decode_steps": num_new - 1,
        "tp1_1thread_decode_step_ms": tp1[1] * 1e3,
        "tp1_2threads_decode_step_ms": tp1[2] * 1e3,
        "tp2_decode_step_ms": t2 * 1e3,
        "tp2_speedup_vs_tp1_1thread": tp1[1] / t2,
        "tp2_speedup_vs_tp1_2threads": tp1[2] / t2,
        "threads": "TP=2: 2 processes x 1 thread on the same 2 cores",
        "load_average_1min": os.getloadavg()[0],
    }
    return out


def run_tp_bench(args: argparse.Namespace) -> dict:
    quick = getattr(args, "quick", False)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    say("TP=2 vs TP=1: token identity and decode step times (gloo, local processes) ...")
    tp = _tp_part(quick)
    say("flat vs hierarchical all-reduce on emulated links (4 ranks, 2 domains, 4:1 bandwidth) ...")
    ar = _allreduce_part(quick)
    prefill = ar["sizes"]["prefill_512x576"]["flat_over_hierarchical"]
    decode = ar["sizes"]["decode_32x576"]["flat_over_hierarchical"]
    report = {
        "token_identical": all(tp["token_identical"].values()),
        "token_identical_by_case": tp["token_identical"],
        "step_model": tp["step_model"],
        "allreduce": ar,
        "ratios": {
            "tp2_vs_tp1_1thread_decode_step": tp["step_model"]["tp2_speedup_vs_tp1_1thread"],
            "tp2_vs_tp1_2threads_decode_step": tp["step_model"]["tp2_speedup_vs_tp1_2threads"],
            "hierarchical_int8_vs_flat_prefill": prefill["hierarchical_int8"],
            "hierarchical_bf16_vs_flat_prefill": prefill["hierarchical_bf16"],
            "hierarchical_none_vs_flat_prefill": prefill["hierarchical_none"],
            "sharded_none_vs_flat_prefill": prefill["sharded_none"],
            "sharded_bf16_vs_flat_prefill": prefill["sharded_bf16"],
            "hierarchical_int8_vs_flat_decode": decode["hierarchical_int8"],
            "hierarchical_none_vs_flat_decode": decode["hierarchical_none"],
        },
    }
    if not args.json:
        for k, v in report["ratios"].items():
            say(f"  {k}: {v:.2f}x")
        say(f"  token identical: {report['token_identical']}")
    return report
