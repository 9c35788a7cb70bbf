"""`zoo bench step`: one decode step of the torch runner on CPU, its time and where it goes, plain vs packed.

Two runners over two copies of the same model in one process (the baseline with ``pack_cpu_weights=False``,
the other with oneDNN-packed matmuls, backends/torch/cpu_packed.py), stepped alternately so both see the
same machine load; batch 1 and batch 32 (64-token prompts, as `zoo bench engine`'s uniform run). Times
are medians of CPU time (``process_time``: what the step consumed, less sensitive to other processes on a
shared machine than wall time, which is reported too), and one profiled step per configuration gives the
breakdown as each operator group's share of the profiled op time (the profiler times ops on the wall
clock, so on a busy machine shares are the figure to read, not milliseconds)::

    matmul       mm / addmm / oneDNN linear (projections, MLP, output head)
    attention    SDPA
    kv_gather    index_select (the gather of each sequence's blocks; the embedding lookup)
    kv_write     index_copy_ (new K/V into the cache)
    elementwise  everything else (norms, RoPE, SiLU, residuals, sampling)
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

GROUPS = {
    "aten::mm": "matmul",
    "aten::addmm": "matmul",
    "mkldnn::_linear_pointwise": "matmul",
    "aten::_scaled_dot_product_flash_attention_for_cpu": "attention",
    "aten::index_select": "kv_gather",
    "aten::index_copy_": "kv_write",
}


def _runner(checkpoint, pack: bool, num_seqs: int, prompt_len: int, **runner_kwargs):
    import torch

    from backends.runner_driver import GREEDY, BlockAllocator, Seq, make_step
    from backends.torch import TorchModelRunner
    from backends.torch.weights import build_model
    from bench.workload import synthetic_prompt_ids
    from engine.model_runner import KVCacheSpec

    block_size = 16
    model = build_model(checkpoint, torch.float32, torch.device("cpu"), progress=False)
    runner = TorchModelRunner(model, torch.float32, pack_cpu_weights=pack, **runner_kwargs)
    runner.initialize_kv_cache(KVCacheSpec(1024, 0, block_size))
    alloc = BlockAllocator(1024)
    vocab = checkpoint.config.vocab_size
    seqs = [Seq(f"r{i}", synthetic_prompt_ids(prompt_len, vocab, seed=1000 + i), GREEDY) for i in range(num_seqs)]
    step_id = [0]

    def step(batch) -> tuple[float, float, list[int]]:
        sched = [s.schedule(alloc, block_size) for s in batch]
        cpu_s, wall_s = time.process_time(), time.perf_counter()
        out = runner.execute(make_step(step_id[0], sched))
        cpu_s, wall_s = time.process_time() - cpu_s, time.perf_counter() - wall_s
        step_id[0] += 1
        for s, r in zip(batch, sched):
            s.advance(r, out.sampled_token_ids.get(s.req_id))
        return cpu_s, wall_s, [out.sampled_token_ids[s.req_id][0] for s in batch]

    for s in seqs:  # prefills, one request at a time
        step([s])

    def decode_step():
        return step(seqs)

    decode_step.runner = runner  # type: ignore[attr-defined]  (for reports: what the runner chose)
    return decode_step


def _breakdown(step, num_steps: int = 3) -> dict[str, float]:
    """Each operator group's share (0..1) of the op time of ``num_steps`` profiled steps (after one
    profiled warm-up: the profiler's first use costs)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]):
        step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(num_steps):
            step()
    groups: dict[str, float] = {}
    for e in prof.key_averages():
        group = GROUPS.get(e.key, "elementwise")
        groups[group] = groups.get(group, 0.0) + e.self_cpu_time_total
    total = sum(groups.values()) or 1.0
    return {k: round(v / total, 3) for k, v in sorted(groups.items())}


def run_decode_step_bench(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from backends.checkpoint import load_checkpoint

    num_threads = args.num_threads or 2
    torch.set_num_threads(num_threads)
    steps = 4 if getattr(args, "quick", False) else 10
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    checkpoint = load_checkpoint(args.model)
    report: dict[str, Any] = {"model": checkpoint.config.name, "threads": num_threads, "steps": steps}
    report["load_average_1m"] = os.getloadavg()[0]  # other processes on the machine (2+ cores busy skews threads)
    for batch in (1, 32):
        say(f"decode step, batch {batch}: plain vs packed weights ...")
        plain, packed = _runner(checkpoint, False, batch, 64), _runner(checkpoint, True, batch, 64)
        for _ in range(2):
            plain(), packed()
        rows = {"plain": [], "packed": []}
        same_tokens = True
        for _ in range(steps):
            a, b = plain(), packed()
            rows["plain"].append(a[:2])
            rows["packed"].append(b[:2])
            same_tokens &= a[2] == b[2]
        fig: dict[str, Any] = {}
        for name, r in rows.items():
            fig[f"{name}_cpu_ms"] = 1e3 * sorted(x[0] for x in r)[len(r) // 2]
            fig[f"{name}_wall_ms"] = 1e3 * sorted(x[1] for x in r)[len(r) // 2]
        fig["packed_vs_plain_cpu"] = fig["plain_cpu_ms"] / fig["packed_cpu_ms"]
        fig["packed_vs_plain_wall"] = fig["plain_wall_ms"] / fig["packed_wall_ms"]
        fig["same_tokens"] = same_tokens
        fig["breakdown_share"] = {"plain": _breakdown(plain), "packed": _breakdown(packed)}
        report[f"batch{batch}"] = fig
        say(
            f"  plain {fig['plain_cpu_ms']:.1f} ms, packed {fig['packed_cpu_ms']:.1f} ms CPU a step "
            f"({fig['packed_vs_plain_cpu']:.2f}x); tokens identical: {same_tokens}"
        )
    return report
