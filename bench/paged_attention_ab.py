"""The paged decode kernel, flash-decoding (split keys, multi-page tiles) against the one-split, one-page
layout it replaced, in one process on one GPU: the kernel alone, then whole decode steps (eager and CUDA
graphs) of random-weight models. Prints one JSON object.

    python -m bench.paged_attention_ab --device cuda [--out FILE]
    python -m bench.paged_attention_ab --device cpu --quick      (interpreter; correctness only, no timing)

Like bench/gpu_check.py it imports only torch, numpy, triton and the engine's pure modules, so it runs on a
GPU host that has none of this project's other dependencies. The "before" is the same kernel forced to one
split and one page a tile (``triton_kernels.FORCED_TILING``), which is the launch the kernel made before.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import time
from typing import Any

import torch

BLOCK_SIZE = 16
VARIANTS = (("before", (1, BLOCK_SIZE)), ("after", None))  # (name, (num_splits, tile) forced, or the kernel's own)


@contextlib.contextmanager
def _tiling(tk, forced):
    """Every paged_attention launch in the block, a model's included, with ``forced`` tiling (None: its own)."""
    tk.FORCED_TILING = forced
    try:
        yield
    finally:
        tk.FORCED_TILING = None


def _kernel_case(shape, batch: int, ctx: int, width: int, device: torch.device, tk) -> dict[str, Any]:
    """One [batch] decode step's attention of one layer; bf16 on CUDA (fp32 on a CPU)."""
    h, hkv, d = shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    blocks = -(-ctx // BLOCK_SIZE)
    g = torch.Generator().manual_seed(batch * 7 + ctx)
    num_blocks = batch * blocks + 1
    cache = torch.randn(2, num_blocks, BLOCK_SIZE, hkv, d, generator=g).to(device, dtype)
    perm = torch.randperm(num_blocks, generator=g)[: batch * blocks].reshape(batch, blocks)
    tables = torch.zeros(batch, width, dtype=torch.int32)
    tables[:, :blocks] = perm.to(torch.int32)
    tables = tables.to(device)
    ctx_lens = torch.full((batch,), ctx, dtype=torch.int32, device=device)
    q = torch.randn(batch, h, d, generator=g).to(device, dtype)
    scale = d**-0.5

    def run(forced):
        num_splits, tile = forced or (None, None)
        return tk.paged_attention(q, cache, tables, ctx_lens, scale, num_splits=num_splits, tile=tile)

    before, after = (run(forced) for _, forced in VARIANTS)
    tile, splits = tk.attention_tiling(batch, hkv, h // hkv, d, width, BLOCK_SIZE, tk._num_sms(device))
    row: dict[str, Any] = {
        "shape": shape.name,
        "batch": batch,
        "ctx": ctx,
        "table_width": width,
        "tile": tile,
        "splits": splits,
        "max_abs_diff": float((before.float() - after.float()).abs().max()),
    }
    if device.type == "cuda":
        from triton.testing import do_bench

        kv_bytes = batch * ctx * 2 * hkv * d * cache.element_size()
        for name, forced in VARIANTS:
            ms = do_bench(lambda forced=forced: run(forced), warmup=10, rep=40)
            row[f"{name}_us"] = 1e3 * ms
            row[f"{name}_kv_gbps"] = kv_bytes / (ms * 1e-3) / 1e9
            row[f"{name}_launch_us"] = _launch_us(lambda forced=forced: run(forced), device)
        row["speedup"] = row["before_us"] / row["after_us"]
    return row


def _launch_us(fn, device: torch.device, calls: int = 200) -> float:
    """Host time per call, no sync between calls: what an eager step pays to launch the kernel(s)."""
    torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    host = time.perf_counter() - t0
    torch.cuda.synchronize(device)
    return 1e6 * host / calls


def _eager_profile(shape, model, plan, device, tk, forced) -> list[str]:
    """cProfile of eager decode steps (batch 1, context 512): the host functions that cost the most."""
    import cProfile
    import io
    import pstats

    from bench.gpu_check import decode_figures

    prof = cProfile.Profile()
    with _tiling(tk, forced):
        prof.enable()
        decode_figures(shape, model, plan, device, 1, 512, 16, None)
        prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(14)
    return buf.getvalue().splitlines()[-24:]


def run_ab(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cpu" and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")
    from backends.torch import triton_kernels as tk
    from backends.torch.attention_dispatch import kernel_plan
    from bench.gpu_check import SHAPES, build, decode_figures, device_bandwidth_gbps

    quick = args.quick or device.type == "cpu"
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "torch": torch.__version__,
        "kernel": [],
        "decode": [],
    }
    shapes = [SHAPES["tiny"]] if quick else [SHAPES["smollm2-135m"], SHAPES["llama-3-8b"]]
    batches, ctxs = ((1, 3), (20, 70)) if quick else ((1, 8, 32, 128), (512, 4096))
    for shape in shapes:
        graph_width = shape.max_position_embeddings // BLOCK_SIZE  # a CUDA graph bucket's table width
        for batch in batches:
            for ctx in ctxs:
                for width in sorted({-(-ctx // BLOCK_SIZE), graph_width}):
                    report["kernel"].append(_kernel_case(shape, batch, ctx, width, device, tk))
    report["kernel_max_abs_diff"] = max(r["max_abs_diff"] for r in report["kernel"])
    if device.type == "cuda" and not quick:
        plan = kernel_plan(device)
        bandwidth = device_bandwidth_gbps(device)
        for shape in shapes:
            model = build(shape, torch.bfloat16, device)
            for batch in (1, 32):
                for name, forced in VARIANTS:
                    with _tiling(tk, forced):
                        fig = decode_figures(shape, model, plan, device, batch, 512, args.steps, bandwidth)
                    report["decode"].append({"kernel": name, **fig})
            if shape.name == "llama-3-8b":
                for name, forced in VARIANTS:
                    eager_plan = kernel_plan(device, cuda_graphs=False)
                    report[f"eager_profile_{name}"] = _eager_profile(shape, model, eager_plan, device, tk, forced)
            del model
            torch.cuda.empty_cache()
    report["elapsed_s"] = time.perf_counter() - t0
    return report


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.paged_attention_ab", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="the tiny shape only (what the CPU runs)")
    p.add_argument("--steps", type=int, default=64, help="measured decode steps per figure")
    p.add_argument("--out", default=None, help="also write the JSON object to this file")
    args = p.parse_args(argv)
    report = run_ab(args)
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    tol = 2e-2 if args.device.startswith("cuda") else 1e-4
    return 0 if report["kernel_max_abs_diff"] <= tol else 1


if __name__ == "__main__":
    sys.exit(main())
