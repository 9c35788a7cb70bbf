"""`zoo bench fastpath`: the torch runner's decode step with and without the fast path, and where its CPU time goes.

Two runners over one SmolLM2 model (fp32, CPU), stepped alternately on the same requests so both see the
same machine load:

    baseline   the reference op sequence (``model.fast_path = False``) and fresh metadata memory every step
    fast       the fast path (model.py: signed-sine RoPE, in-place norm / MLP temporaries) and the step
               buffers reused every step (backends/torch/step_buffers.py)

Times are medians of CPU time (``process_time``: what the step consumed; this machine is shared with other
processes, so wall time mostly measures them and is not reported). Per configuration::

    step_cpu_ms        runner.execute: metadata, forward, sampling
    forward_cpu_ms     the model's forward alone; host_cpu_ms = step - forward (metadata, sampling, Python)
    matmul_cpu_ms      the step's matmuls alone, replayed on the same weights and row counts: the floor the
                       forward cannot go below without faster matmuls; non_matmul_cpu_ms = forward - matmul
    weights_read_ms    one pass reading every weight the step reads (a sum per matrix): the bandwidth
                       roofline of a decode step at this thread count; roofline_fraction = it / step
    ops_per_step       aten ops the profiler records per step (a count, independent of machine load)

Greedy tokens of both runners are compared at every step (``same_tokens``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any


def _median(xs: list[float]) -> float:
    return sorted(xs)[len(xs) // 2]


def _setup(checkpoint, model, batch: int, prompt_len: int):
    """Two runners on ``model`` with ``batch`` prefilled requests each; returns a step function per runner."""
    from backends.runner_driver import GREEDY, BlockAllocator, Seq, make_step
    from backends.torch import TorchModelRunner
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

    def make(fast: bool):
        runner = TorchModelRunner(model, model.dtype)
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
    return make(False), make(True)


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

    base, fast = _setup(checkpoint, model, batch, 64)
    replay = _matmul_replay(model, batch)
    read, weight_bytes = _weights_read(model)
    for _ in range(2):
        base(), fast(), replay(), read()
    rows: dict[str, list[tuple[float, float]]] = {"baseline": [], "fast": []}
    floor, reads, same = [], [], True
    with torch.inference_mode():
        for i in range(steps):
            if i % 2 == 0:  # alternating order: neither is always the one after the other
                a, b = base(), fast()
            else:
                b, a = fast(), base()
            rows["baseline"].append(a[:2])
            rows["fast"].append(b[:2])
            same &= a[2] == b[2]
            floor.append(replay())
            reads.append(read())
    fig: dict[str, Any] = {"matmul_cpu_ms": 1e3 * _median(floor), "weights_read_ms": 1e3 * _median(reads)}
    fig["weights_read_gbps"] = weight_bytes / 1e9 / (fig["weights_read_ms"] / 1e3)
    for name, r in rows.items():
        step_ms, fwd_ms = 1e3 * _median([x[0] for x in r]), 1e3 * _median([x[1] for x in r])
        fig[name] = {
            "step_cpu_ms": step_ms,
            "forward_cpu_ms": fwd_ms,
            "host_cpu_ms": step_ms - fwd_ms,
            "non_matmul_cpu_ms": fwd_ms - fig["matmul_cpu_ms"],
            "roofline_fraction": fig["weights_read_ms"] / step_ms,
            "tok_s_cpu": batch * 1e3 / step_ms,
        }
    fig["baseline"]["ops_per_step"] = _ops_per_step(base)
    fig["fast"]["ops_per_step"] = _ops_per_step(fast)
    fig["fast_vs_baseline_cpu"] = fig["baseline"]["step_cpu_ms"] / fig["fast"]["step_cpu_ms"]
    fig["same_tokens"] = same
    model.fast_path = True
    say(
        f"  batch {batch}: baseline {fig['baseline']['step_cpu_ms']:.1f} ms, fast {fig['fast']['step_cpu_ms']:.1f} ms "
        f"CPU a step ({fig['fast_vs_baseline_cpu']:.3f}x); matmuls alone {fig['matmul_cpu_ms']:.1f} ms, weights read "
        f"{fig['weights_read_ms']:.1f} ms; ops {fig['baseline']['ops_per_step']} -> {fig['fast']['ops_per_step']}; "
        f"tokens identical: {same}"
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
        say(f"decode step, batch {batch}: baseline vs fast path ...")
        report[f"batch{batch}"] = _measure(model, checkpoint, batch, steps, say)
    model.fast_path = True
    return report
