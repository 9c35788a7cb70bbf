"""`zoo bench fastpath`: the torch runner's decode step on its three paths, and where its CPU time goes.

Runners over one SmolLM2 model (fp32, CPU), stepped alternately on the same requests so all see the same
machine load:

    baseline   torch ops, the reference op sequence (``model.fast_path = False``), fresh metadata memory a step
    fast       torch ops, the fast path (model.py: signed-sine RoPE, in-place norm / MLP temporaries) and the
               step buffers reused every step (backends/torch/step_buffers.py)
    kernel     the C decode kernel (backends/torch/cpu_decode.py: the whole step in one call), at batch sizes it
               serves (batch 1 here; it has no model forward, so forward/host/non-matmul are not split for it)

Times are medians of CPU time (``process_time``: what the step consumed; this machine is shared with other
processes, so wall time mostly measures them and is not reported). Per configuration::

    step_cpu_ms        runner.execute: metadata, forward, sampling
    forward_cpu_ms     the model's forward alone; host_cpu_ms = step - forward (metadata, sampling, Python)
    matmul_cpu_ms      the step's matmuls alone, replayed on the same weights and row counts: the floor the
                       forward cannot go below without faster matmuls; non_matmul_cpu_ms = forward - matmul
    weights_read_ms    one pass reading every weight the step reads (a sum per matrix): the bandwidth
                       roofline of a decode step at this thread count; roofline_fraction = it / step
    ops_per_step       aten ops the profiler records per step (a count, independent of machine load)
    kernel_matmul_cpu_ms  the kernel's own matrix-vector products alone over the same weights (its floor)

Greedy tokens of all runners are compared at every step (``same_tokens``; the kernel sums in another order
than MKL, so its logits differ by rounding, its greedy tokens must not).

``gemv`` (batch 1 only): every matrix shape of the step timed alone over the model's own weights (all 30
layers' copies, so they stream from memory as in a step) at 1 and 2 threads, best wall time of a few passes:
MKL's ``torch.mm`` over the stored ``[in, out]`` layout, ``F.linear`` over ``[out, in]``, oneDNN's packed
linear, the kernel's product, and a plain read of the same bytes (``sum``), with the GB/s each reaches.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _setup(checkpoint, model, batch: int, prompt_len: int) -> dict[str, Any]:
    """Runners on ``model`` with ``batch`` prefilled requests each; a step function per configuration."""
    from backends.runner_driver import GREEDY, BlockAllocator, Seq, make_step
    from backends.torch import TorchModelRunner
    from backends.torch.cpu_decode import MAX_ROWS, load_library
    from backends.torch.step_buffers import StepBuffers
    from bench.workload import synthetic_prompt_ids
    from engine.model_runner import KVCacheSpec

    block_size, vocab = 16, checkpoint.config.vocab_size
    timing = {"forward": 0.0}
    forward = model.forward

    def timed_forward(*a, **k):
        t = time.process_time()
        try:
            return forward(*a, **k)
        finally:
            timing["forward"] += time.process_time() - t

    def make(fast: bool, kernel: bool = False):
        # the bench's thread count, not the adaptive choice (thread_choice.py)
        runner = TorchModelRunner(model, model.dtype, cpu_decode_kernel=kernel, adaptive_threads=False)
        runner.initialize_kv_cache(KVCacheSpec(1024, 0, block_size))
        alloc = BlockAllocator(1024)
        seqs = [Seq(f"r{i}", synthetic_prompt_ids(prompt_len, vocab, seed=1000 + i), GREEDY) for i in range(batch)]
        step_id = [0]

        def step(group) -> tuple[float, float, list[int]]:
            model.fast_path = fast
            if not fast:
                runner.buffers = StepBuffers(runner.device)  # fresh metadata memory, as before the buffers
            sched = [s.schedule(alloc, block_size) for s in group]
            timing["forward"] = 0.0
            cpu = time.process_time()
            out = runner.execute(make_step(step_id[0], sched))
            cpu = time.process_time() - cpu
            step_id[0] += 1
            for s, r in zip(group, sched):
                s.advance(r, out.sampled_token_ids.get(s.req_id))
            return cpu, timing["forward"], [out.sampled_token_ids[s.req_id][0] for s in group]

        for s in seqs:  # prefills, one request at a time
            step([s])
        return lambda: step(seqs)

    model.forward = timed_forward
    steps = {"baseline": make(False), "fast": make(True)}
    if batch <= MAX_ROWS and load_library() is not None:
        steps["kernel"] = make(True, kernel=True)
    return steps


def _matmul_replay(model, rows: int):
    """The decode step's matmuls (every layer's four and the head) on ``rows`` rows, as the model calls them."""
    import torch

    e = model.config.hidden_size
    x = torch.randn(rows, e)
    h = torch.randn(rows, e)
    layer = model.layers[0]
    o_in = torch.randn(rows, layer.o_proj_t.shape[0])
    act = torch.randn(rows, layer.down_proj_t.shape[0])

    def run() -> float:
        t = time.process_time()
        for layer in model.layers:
            torch.mm(x, layer.qkv_proj_t)
            torch.addmm(h, o_in, layer.o_proj_t)
            torch.mm(x, layer.gate_up_proj_t)
            torch.addmm(h, act, layer.down_proj_t)
        torch.mm(x, model.lm_head_t)
        return time.process_time() - t

    return run


def _kernel_matmul_replay(model, rows: int):
    """The kernel's matrix-vector products of a step (every layer's four and the head), alone."""
    import torch

    from backends.torch.cpu_decode import gemv, load_library

    lib, threads = load_library(), torch.get_num_threads()
    plain = lambda t: t.as_subclass(torch.Tensor)  # noqa: E731
    e = model.config.hidden_size
    x, h = torch.randn(rows, e), torch.randn(rows, e)
    layer = model.layers[0]
    o_in = torch.randn(rows, layer.o_proj_t.shape[0])
    act = torch.randn(rows, layer.down_proj_t.shape[0])
    mats = [tuple(plain(getattr(m, name)) for name in _MATRICES) for m in model.layers]
    head = plain(model.lm_head_t)

    def run() -> float:
        t = time.process_time()
        for qkv, o, gate_up, down in mats:
            gemv(lib, x, qkv, threads)
            gemv(lib, o_in, o, threads, out=h)
            gemv(lib, x, gate_up, threads)
            gemv(lib, act, down, threads, out=h)
        gemv(lib, x, head, threads)
        return time.process_time() - t

    return run


def _gemv_shapes(model, repeats: int) -> dict[str, Any]:
    """Each matrix shape alone over the model's own copies, at 1 and 2 threads: best wall ms and GB/s per route."""
    import torch
    import torch.nn.functional as F

    from backends.torch.cpu_decode import gemv, load_library

    lib = load_library()
    plain = lambda t: t.as_subclass(torch.Tensor)  # noqa: E731
    shapes = {name: [plain(getattr(m, name)) for m in model.layers] for name in _MATRICES}
    shapes["lm_head_t"] = [plain(model.lm_head_t)]
    old = torch.get_num_threads()
    out: dict[str, Any] = {}
    try:
        for threads in sorted({1, min(2, os.cpu_count() or 1)}):
            torch.set_num_threads(threads)
            for name, mats in shapes.items():
                k, n = mats[0].shape
                x = torch.randn(1, k)
                routes = {
                    "mm": lambda x=x, mats=mats: [torch.mm(x, w) for w in mats],
                    "sum": lambda mats=mats: [w.sum() for w in mats],
                }
                hf = [w.t().contiguous() for w in mats]  # [out, in] copies: F.linear's layout
                routes["linear"] = lambda x=x, hf=hf: [F.linear(x, w) for w in hf]
                packed = [getattr(m, name, None) for m in model.layers] if name != "lm_head_t" else [model.lm_head_t]
                if all(hasattr(w, "packed") for w in packed):
                    routes["onednn_packed"] = lambda x=x, p=packed: [
                        torch.ops.mkldnn._linear_pointwise(x, w.packed, None, "none", [], "") for w in p
                    ]
                if lib is not None:
                    routes["kernel"] = lambda x=x, mats=mats, t=threads: [gemv(lib, x, w, t) for w in mats]
                best = {r: float("inf") for r in routes}
                for _ in range(repeats):
                    for r, fn in routes.items():
                        t0 = time.perf_counter()
                        fn()
                        best[r] = min(best[r], time.perf_counter() - t0)
                del hf
                nbytes = sum(w.numel() * w.element_size() for w in mats)
                out.setdefault(f"threads{threads}", {})[f"{name}[{k}x{n}]x{len(mats)}"] = {
                    r: {"ms": 1e3 * v, "gbps": nbytes / v / 1e9} for r, v in best.items()
                }
    finally:
        torch.set_num_threads(old)
    return out


_MATRICES = ("qkv_proj_t", "o_proj_t", "gate_up_proj_t", "down_proj_t")


def _weights_read(model):
    import torch

    mats = [m for layer in model.layers for m in (layer.qkv_proj_t, layer.o_proj_t, layer.gate_up_proj_t)]
    mats += [layer.down_proj_t for layer in model.layers] + [model.lm_head_t]
    plain = [m.as_subclass(torch.Tensor) for m in mats]

    def run() -> float:
        t = time.process_time()
        for m in plain:
            m.sum()
        return time.process_time() - t

    return run, sum(m.numel() * m.element_size() for m in plain)


def _ops_per_step(step, num_steps: int = 2) -> int:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(num_steps):
            step()
    return sum(e.count for e in prof.key_averages()) // num_steps


def _measure(model, checkpoint, batch: int, steps: int, say) -> dict[str, Any]:
    import torch

    configs = _setup(checkpoint, model, batch, 64)
    replay = _matmul_replay(model, batch)
    kernel_replay = _kernel_matmul_replay(model, batch) if "kernel" in configs else None
    read, weight_bytes = _weights_read(model)
    for _ in range(2):
        for fn in (*configs.values(), replay, read, *([kernel_replay] if kernel_replay else [])):
            fn()
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in configs}
    floor, kfloor, reads, same = [], [], [], True
    with torch.inference_mode():
        for i in range(steps):
            order = list(configs) if i % 2 == 0 else list(reversed(configs))  # none always after another
            tokens = {}
            for name in order:
                cpu, fwd, toks = configs[name]()
                rows[name].append((cpu, fwd))
                tokens[name] = toks
            same &= all(t == tokens["baseline"] for t in tokens.values())
            floor.append(replay())
            if kernel_replay:
                kfloor.append(kernel_replay())
            reads.append(read())
    fig: dict[str, Any] = {"matmul_cpu_ms": 1e3 * _median(floor), "weights_read_ms": 1e3 * _median(reads)}
    fig["weights_read_gbps"] = weight_bytes / 1e9 / (fig["weights_read_ms"] / 1e3)
    if kfloor:
        fig["kernel_matmul_cpu_ms"] = 1e3 * _median(kfloor)
    for name, r in rows.items():
        step_ms, fwd_ms = 1e3 * _median([x[0] for x in r]), 1e3 * _median([x[1] for x in r])
        fig[name] = {"step_cpu_ms": step_ms}
        if name == "kernel":
            fig[name]["non_matmul_cpu_ms"] = step_ms - fig["kernel_matmul_cpu_ms"]
        else:
            fig[name].update(
                forward_cpu_ms=fwd_ms, host_cpu_ms=step_ms - fwd_ms, non_matmul_cpu_ms=fwd_ms - fig["matmul_cpu_ms"]
            )
        fig[name]["roofline_fraction"] = fig["weights_read_ms"] / step_ms
        fig[name]["tok_s_cpu"] = batch * 1e3 / step_ms
    for name, step in configs.items():
        fig[name]["ops_per_step"] = _ops_per_step(step)
    fig["fast_vs_baseline_cpu"] = fig["baseline"]["step_cpu_ms"] / fig["fast"]["step_cpu_ms"]
    if "kernel" in fig:
        fig["kernel_vs_fast_cpu"] = fig["fast"]["step_cpu_ms"] / fig["kernel"]["step_cpu_ms"]
    fig["same_tokens"] = same
    model.fast_path = True
    kernel = (
        f", kernel {fig['kernel']['step_cpu_ms']:.1f} ms ({fig['kernel_vs_fast_cpu']:.2f}x fast, "
        f"{fig['kernel']['roofline_fraction']:.0%} of the read floor)"
        if "kernel" in fig
        else ""
    )
    say(
        f"  batch {batch}: baseline {fig['baseline']['step_cpu_ms']:.1f} ms, fast {fig['fast']['step_cpu_ms']:.1f} ms "
        f"CPU a step ({fig['fast_vs_baseline_cpu']:.3f}x){kernel}; torch matmuls alone {fig['matmul_cpu_ms']:.1f} ms, "
        f"weights read {fig['weights_read_ms']:.1f} ms; ops {fig['baseline']['ops_per_step']} -> "
        f"{fig['fast']['ops_per_step']}; tokens identical: {same}"
    )
    return fig


def run_fastpath_bench(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from backends.checkpoint import load_checkpoint
    from backends.torch.weights import build_model

    num_threads = args.num_threads or 1
    torch.set_num_threads(num_threads)
    quick = getattr(args, "quick", False)
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    checkpoint = load_checkpoint(args.model)
    model = build_model(checkpoint, torch.float32, torch.device("cpu"), progress=False)
    report: dict[str, Any] = {"model": checkpoint.config.name, "threads": num_threads, "clock": "process_time"}
    report["load_average_1m"] = os.getloadavg()[0]  # other processes on the machine (they inflate CPU time too)
    for batch, steps in ((1, 8 if quick else 30), (32, 4 if quick else 10)):
        say(f"decode step, batch {batch}: baseline vs fast path vs kernel ...")
        report[f"batch{batch}"] = _measure(model, checkpoint, batch, steps, say)
    say("each matrix shape alone (batch 1, 1 and 2 threads) ...")
    report["gemv"] = _gemv_shapes(model, 3 if quick else 7)
    for threads, shapes in report["gemv"].items():
        for shape, routes in shapes.items():
            line = ", ".join(f"{r} {v['ms']:.2f} ms {v['gbps']:.0f} GB/s" for r, v in routes.items())
            say(f"  {threads} {shape}: {line}")
    model.fast_path = True
    return report
