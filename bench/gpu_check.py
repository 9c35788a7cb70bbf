"""The GPU check: one prepared run that proves the fast path on a lent GPU and prints one JSON object.

    python -m bench.gpu_check --device cuda          (or: zoo bench gpu --device cuda --json)
    python -m bench.gpu_check --device cpu --quick   (the CPU half; tests/bench/test_gpu_check.py runs it)

Made for a machine that has torch (and triton) but none of this project's other dependencies and none
of its files beyond the working tree, so it imports only torch, numpy, the engine's pure modules and
backends/torch's model, attention and CUDA-graph modules (never msgspec, pyzmq, gguf or anyio: the test
checks the import closure), and builds **random-weight models on the device**::

    shape          layers  hidden  heads/kv  head_dim  ffn     vocab    tied
    smollm2-135m   30      576     9/3       64        1536    49152    yes     (SmolLM2-135M)
    llama-3-8b     32      4096    32/8      128       14336   128256   no      (Llama-3-8B)
    tiny           2       48      6/2       8         80      97       yes     (--quick, CPU)

What it measures (all in one run, ratios against the baseline of the same run):

    logits_vs_cpu    the device path (the dispatch table's kernels) vs the CPU fp32 gather path on the same
                     weights: prefill, a chunk after a cached prefix, decodes; max |diff|, argmax agreement
    triton_vs_sdpa   the Triton paged kernel vs gather + SDPA on one mixed step (fp32, and bf16 on CUDA)
    triton_lora      the Triton LoRA shrink/expand (triton_lora.py) vs torch matmuls (fp32, and bf16 on CUDA)
    decode           tok/s at batch 1 and 32 (context 512), eager vs CUDA graphs, graph capture time, and
                     the fraction of the HBM roofline each reaches (weights + KV bytes per step / bandwidth)

Budget: well under 8 minutes on one H200 (the 8B shape is 16 GB of bf16 weights, made with normal_ on
the device in seconds; each decode figure is ``--steps`` steps after warm-up).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True, slots=True)
class Shape:
    """The config fields LlamaModel reads."""

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    tie_word_embeddings: bool
    rope_theta: float
    rms_norm_eps: float = 1e-5
    rope_scaling: dict | None = None
    max_position_embeddings: int = 4096


SHAPES = {
    s.name: s
    for s in (
        Shape("smollm2-135m", 49152, 576, 1536, 30, 9, 3, 64, True, 100000.0),
        Shape("llama-3-8b", 128256, 4096, 14336, 32, 32, 8, 128, False, 500000.0),
        Shape("tiny", 97, 48, 80, 2, 6, 2, 8, True, 10000.0, max_position_embeddings=1024),
    )
}
BLOCK_SIZE = 16


def _fill_random(model, seed: int) -> None:
    """Norm weights 1, every matrix N(0, 0.02): logits stay in a sane range at any depth."""
    gen = torch.Generator(device=model.embed_t.device).manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, 0.02, generator=gen)


def build(shape: Shape, dtype: torch.dtype, device: torch.device, seed: int = 0):
    from backends.torch.model import LlamaModel

    model = LlamaModel(shape, dtype, device)
    _fill_random(model, seed)
    return model


def kv_layers(shape: Shape, num_blocks: int, dtype: torch.dtype, device: torch.device) -> list[torch.Tensor]:
    """Per layer [2, num_blocks, bs, Hkv, D] views of one zeroed tensor (backends/torch/kv_cache.py's layout)."""
    kv = torch.zeros(
        (shape.num_hidden_layers, 2, num_blocks, BLOCK_SIZE, shape.num_key_value_heads, shape.head_dim),
        dtype=dtype,
        device=device,
    )
    return [kv[i] for i in range(shape.num_hidden_layers)]


def make_attention(name: str, shape: Shape, device: torch.device):
    from backends.torch.attention_dispatch import attention_backend_class

    cls = attention_backend_class(name)
    return cls(shape.num_attention_heads, shape.num_key_value_heads, shape.head_dim, BLOCK_SIZE, device)


def weight_bytes(model) -> int:
    total = sum(p.numel() * p.element_size() for p in model.parameters())
    if model.lm_head_t is not model.embed_t:  # an untied table is looked up, not streamed
        total -= model.embed_t.numel() * model.embed_t.element_size()
    return total


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# ---- one step over the paged cache ----------------------------------------------------------------------


def run_step(model, attn, layers, tokens: list[int], table: list[int], start_pos: int) -> torch.Tensor:
    """One request's ``tokens`` at ``start_pos`` (a chunk, or a decode when one token after a prefix);
    fp32 logits [len(tokens), V]."""
    dev = layers[0].device
    n = len(tokens)
    pos = np.arange(start_pos, start_pos + n, dtype=np.int64)
    slots = np.asarray(table, dtype=np.int64)[pos // BLOCK_SIZE] * BLOCK_SIZE + pos % BLOCK_SIZE
    if n == 1 and start_pos > 0:
        meta = attn.build_metadata([start_pos + 1], [table], [], slots)
    else:
        meta = attn.build_metadata([], [], [(start_pos, n, table)], slots)
    ids = torch.tensor(tokens, dtype=torch.int64, device=dev)
    return model(ids, torch.from_numpy(pos).to(dev), layers, attn, meta, None)


def check_logits_vs_cpu(shape: Shape, device: torch.device, plan, seed: int = 0) -> dict[str, Any]:
    """The same fp32 weights on the device (its plan's kernel) and on the CPU (gather): same logits?"""
    cpu = torch.device("cpu")
    ref_model = build(shape, torch.float32, cpu, seed)
    dev_model = build(shape, torch.float32, cpu, seed).to(device)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(3, shape.vocab_size, size=36).tolist()
    num_blocks = 8
    table = rng.permutation(num_blocks).tolist()
    steps = [(0, 24), (24, 8), (32, 1), (33, 1), (34, 1), (35, 1)]  # prefill, chunk after a prefix, decodes
    results = []
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False  # an fp32 comparison, not TF32's
    try:
        for model, dev, name in ((ref_model, cpu, "gather_sdpa"), (dev_model, device, plan.attention)):
            attn = make_attention(name, shape, dev)
            layers = kv_layers(shape, num_blocks, torch.float32, dev)
            with torch.inference_mode():
                results.append([run_step(model, attn, layers, tokens[s : s + n], table, s).cpu() for s, n in steps])
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    max_abs = max(float((a - b).abs().max()) for a, b in zip(*results))
    scale = max(float(a.abs().max()) for a in results[0])
    agree = [bool(torch.equal(a.argmax(-1), b.argmax(-1))) for a, b in zip(*results)]
    return {
        "shape": shape.name,
        "kernel": plan.attention,
        "max_abs_diff": max_abs,
        "max_abs_logit": scale,
        "argmax_agree_steps": f"{sum(agree)}/{len(agree)}",
        "ok": max_abs <= 1e-3 * max(scale, 1.0) and all(agree),
    }


def check_triton_vs_sdpa(device: torch.device, dtypes: list[torch.dtype], seed: int = 0) -> dict[str, Any]:
    """The Triton paged kernel vs gather + SDPA on one mixed step (decodes of odd lengths, GQA, a chunk
    after a cached prefix, speculative-style rows, a fresh prompt)."""
    from backends.torch.attention import GatherSDPABackend
    from backends.torch.triton_attention import TritonPagedBackend

    h, hkv, d, num_blocks = 32, 8, 128, 96
    if device.type == "cpu":  # the interpreter is slow: a small geometry
        h, hkv, d, num_blocks = 6, 2, 16, 48
    out: dict[str, Any] = {}
    for dtype in dtypes:
        g = torch.Generator().manual_seed(seed)
        free = torch.randperm(num_blocks, generator=g).tolist()
        decode_lens = [1, 17, 40, 63]
        chunks = [(20, 9), (33, 3), (0, 12)]

        def table(n: int, free=free) -> list[int]:
            return [free.pop() for _ in range(-(-n // BLOCK_SIZE))]

        decode_tables = [table(n) for n in decode_lens]
        specs = [(s, n, table(s + n)) for s, n in chunks]
        slots = [
            t[(n - 1) // BLOCK_SIZE] * BLOCK_SIZE + (n - 1) % BLOCK_SIZE for n, t in zip(decode_lens, decode_tables)
        ]
        for s, n, t in specs:
            slots += [t[p // BLOCK_SIZE] * BLOCK_SIZE + p % BLOCK_SIZE for p in range(s, s + n)]
        rows = len(slots)
        cache = torch.randn(2, num_blocks, BLOCK_SIZE, hkv, d, generator=g).to(device, dtype)
        q, k, v = (torch.randn(rows, n, d, generator=g).to(device, dtype) for n in (h, hkv, hkv))
        outs = []
        for cls in (GatherSDPABackend, TritonPagedBackend):
            backend = cls(h, hkv, d, BLOCK_SIZE, device)
            c = cache.clone()
            meta = backend.build_metadata(decode_lens, decode_tables, specs, np.asarray(slots, dtype=np.int64))
            outs.append(backend.forward(q, k, v, c, meta).float().cpu())
        err = float((outs[0] - outs[1]).abs().max())
        tol = 1e-4 if dtype == torch.float32 else 2e-2
        out[str(dtype).removeprefix("torch.")] = {"max_abs_err": err, "tolerance": tol, "ok": err <= tol}
    return out


def check_triton_lora(device: torch.device, dtypes: list[torch.dtype], seed: int = 0) -> dict[str, Any]:
    """The Triton LoRA shrink + expand (backends/torch/triton_lora.py) vs torch matmuls: 24 rows over 4 slots
    and rows without an adapter (untouched), SmolLM2's qkv shapes on CUDA (rank 16, 3 projections)."""
    from backends.torch.triton_lora import lora_expand, lora_shrink

    num_in, rank, num_out, rows = (576, 16, 576, 24) if device.type == "cuda" else (40, 4, 24, 6)
    out: dict[str, Any] = {}
    for dtype in dtypes:
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(rows, num_in, generator=g)
        a = torch.randn(5, num_in, 3 * rank, generator=g) / num_in**0.5
        b = torch.randn(5, rank, num_out, generator=g) / rank**0.5
        slots = [(i % 5) - 1 for i in range(rows)]  # -1: no adapter
        base = torch.randn(rows, 2 * num_out, generator=g)
        y = lora_shrink(x.to(device, dtype), a.to(device, dtype), torch.tensor(slots, dtype=torch.int32, device=device))
        got = base.to(device, dtype)
        lora_expand(y, b.to(device, dtype), torch.tensor(slots, dtype=torch.int32, device=device), got, rank, num_out)
        ref = base.to(dtype).float()
        xs, as_, bs = (t.to(dtype).float() for t in (x, a, b))
        for t, s in enumerate(slots):
            if s >= 0:
                ref[t, num_out:] += (xs[t] @ as_[s])[rank : 2 * rank] @ bs[s]
        err = float((got.float().cpu() - ref).abs().max())
        tol = 1e-4 if dtype == torch.float32 else 5e-2
        out[str(dtype).removeprefix("torch.")] = {"max_abs_err": err, "tolerance": tol, "ok": err <= tol}
    return out


# ---- decode throughput ---------------------------------------------------------------------------------


def decode_figures(
    shape: Shape,
    model,
    plan,
    device: torch.device,
    batch: int,
    context: int,
    num_steps: int,
    bandwidth_gbps: float | None,
) -> dict[str, Any]:
    """Decode tok/s at ``batch`` rows of ``context`` cached tokens, eager and (CUDA) graphed, and roofline."""
    from backends.torch.cuda_graphs import DecodeGraphs

    dtype = model.dtype
    blocks_per_seq = -(-(context + num_steps + 8) // BLOCK_SIZE)
    num_blocks = batch * blocks_per_seq
    layers = kv_layers(shape, num_blocks, dtype, device)
    perm = np.random.default_rng(1).permutation(num_blocks)
    tables = [perm[i * blocks_per_seq : (i + 1) * blocks_per_seq].tolist() for i in range(batch)]
    attn = make_attention(plan.attention, shape, device)
    kv_per_token = shape.num_hidden_layers * 2 * shape.num_key_value_heads * shape.head_dim * layers[0].element_size()
    w_bytes = weight_bytes(model)

    def step_inputs(step: int, ids: np.ndarray):
        pos = np.full(batch, context + step, dtype=np.int64)
        blk = np.asarray([t[(context + step) // BLOCK_SIZE] for t in tables], dtype=np.int64)
        return ids, pos, blk * BLOCK_SIZE + pos % BLOCK_SIZE, (pos + 1).tolist()

    def eager(step: int, ids: np.ndarray) -> np.ndarray:
        ids, pos, slots, lens = step_inputs(step, ids)
        meta = attn.build_metadata(lens, tables, [], slots)
        logits = model(torch.from_numpy(ids).to(device), torch.from_numpy(pos).to(device), layers, attn, meta, None)
        return logits.argmax(-1).cpu().numpy()  # the engine's one host sync per step: sampling

    def timed(fn) -> float:
        ids = np.full(batch, 5, dtype=np.int64)
        for s in range(3):  # warm-up: Triton compiles, cuBLAS heuristics, allocator
            ids = fn(s, ids)
        _sync(device)
        t0 = time.perf_counter()
        for s in range(3, 3 + num_steps):
            ids = fn(s, ids)
        _sync(device)
        return (time.perf_counter() - t0) / num_steps

    def roofline(step_s: float) -> float | None:
        if not bandwidth_gbps:
            return None
        step_bytes = w_bytes + kv_per_token * batch * (context + 3 + num_steps // 2)
        return step_bytes / (bandwidth_gbps * 1e9) / step_s

    with torch.inference_mode():
        eager_s = timed(eager)
    result: dict[str, Any] = {
        "shape": shape.name,
        "dtype": str(dtype).removeprefix("torch."),
        "batch": batch,
        "context": context,
        "eager_step_ms": 1e3 * eager_s,
        "eager_tok_per_s": batch / eager_s,
        "eager_roofline_fraction": roofline(eager_s),
    }
    if plan.cuda_graphs and device.type == "cuda":
        graphs = DecodeGraphs(model, layers, attn, (batch,), shape.max_position_embeddings, BLOCK_SIZE)
        capture_s = graphs.capture()

        def graphed(step: int, ids: np.ndarray) -> np.ndarray:
            ids, pos, slots, lens = step_inputs(step, ids)
            return graphs.run(ids, pos, slots, lens, tables).argmax(-1).cpu().numpy()

        with torch.inference_mode():
            graph_s = timed(graphed)
        result.update(
            graph_capture_s=capture_s,
            graph_step_ms=1e3 * graph_s,
            graph_tok_per_s=batch / graph_s,
            graph_roofline_fraction=roofline(graph_s),
            graph_vs_eager=eager_s / graph_s,
        )
    return result


def device_bandwidth_gbps(device: torch.device) -> float | None:
    """The datasheet HBM bandwidth of a known GPU (backends/gpu_table.py); None on a CPU or unknown GPU."""
    if device.type != "cuda":
        return None
    from backends.gpu_table import match_gpu_name

    props = torch.cuda.get_device_properties(device)
    spec = match_gpu_name(props.name, props.total_memory / 2**30)
    return spec.memory_bandwidth_gbps if spec is not None else None


def check_kv_sizing(shape: Shape, model, device: torch.device, utilization: float = 0.9) -> dict[str, Any]:
    """``--gpu-memory-utilization``'s rule (backends/kv_sizing.py) on this device with ``model``'s weights loaded:
    the KV blocks it gives, allocated, then a prefill chunk of ``max_num_batched_tokens`` run over them (its whole
    logits in fp32: more than the runner's sampled rows) — the activation reserve is enough if that fits."""
    from backends.kv_sizing import DeviceMemory, activation_reserve_bytes, kv_budget_bytes

    max_batched, max_seqs = 2048, 256
    free, total = torch.cuda.mem_get_info(device)
    activations = activation_reserve_bytes(shape, max_batched, max_seqs, 2)
    budget = kv_budget_bytes(DeviceMemory(int(total), int(free)), utilization, activations)
    per_block = shape.num_hidden_layers * 2 * BLOCK_SIZE * shape.num_key_value_heads * shape.head_dim * 2
    num_blocks = budget // per_block
    out: dict[str, Any] = {"shape": shape.name, "utilization": utilization, "total_gib": total / 2**30,
                           "in_use_gib": (total - free) / 2**30, "activation_reserve_gib": activations / 2**30,
                           "kv_blocks": int(num_blocks), "kv_tokens": int(num_blocks) * BLOCK_SIZE}  # fmt: skip
    if num_blocks < 1:
        return {**out, "ok": False, "error": "no room for one block"}
    torch.cuda.reset_peak_memory_stats(device)
    layers = kv_layers(shape, int(num_blocks), torch.bfloat16, device)
    attn = make_attention("flash_sdpa", shape, device)
    blocks = -(-max_batched // BLOCK_SIZE)
    with torch.no_grad():
        run_step(model, attn, layers, [1] * max_batched, list(range(blocks)), 0)
    _sync(device)
    peak = torch.cuda.max_memory_allocated(device)
    del layers
    torch.cuda.empty_cache()
    return {**out, "peak_gib": peak / 2**30, "ok": peak <= total * utilization}  # weights, KV and the step within U


def check_profiler(shape: Shape, device: torch.device, steps: int = 3) -> dict[str, Any]:
    """The node profiler's torch session (backends/torch/profiler_session.py, as `zoo agent --profiler-config`
    runs it) around ``steps`` decode steps: each a ``zoo_step_<n>`` range in the written trace, the device's kernels
    in it (on CUDA), and the op table beside it."""
    import gzip
    import tempfile
    import types

    from backends.torch.profiler_session import TorchProfilerSession

    model = build(shape, torch.bfloat16 if device.type == "cuda" else torch.float32, device)
    attn = make_attention("flash_sdpa" if device.type == "cuda" else "gather_sdpa", shape, device)
    layers = kv_layers(shape, 8, next(model.parameters()).dtype, device)
    with tempfile.TemporaryDirectory() as directory:
        config = types.SimpleNamespace(
            torch_profiler_dir=directory, torch_profiler_use_gzip=True, torch_profiler_dump_cuda_time_total=True,
            torch_profiler_record_shapes=False, torch_profiler_with_memory=False, torch_profiler_with_stack=False,
            torch_profiler_with_flops=False, warmup_iterations=0, wait_iterations=0, active_iterations=5,
        )  # fmt: skip
        session = TorchProfilerSession(config, "gpu-check")
        session.start()
        with torch.no_grad():
            run_step(model, attn, layers, [1] * 16, [0], 0)
            for n in range(steps):
                with session.annotate(f"zoo_step_{n + 1}"):
                    run_step(model, attn, layers, [2], [0, 1], 16 + n)
                _sync(device)
        files = session.stop()()  # the recording ended, then its writing (a node runs it off its engine thread)
        trace = next((f for f in files if f.endswith(".pt.trace.json.gz")), None)
        events = json.loads(gzip.decompress(Path(trace).read_bytes()))["traceEvents"] if trace else []
        steps_seen = sorted({e["name"] for e in events if str(e.get("name", "")).startswith("zoo_step_")})
        kernels = sum(1 for e in events if e.get("cat") == "kernel")
        table = any(Path(f).name.startswith("profiler_out_gpu-check.") for f in files)
    ok = steps_seen == [f"zoo_step_{n + 1}" for n in range(steps)] and table and (kernels > 0 or device.type != "cuda")
    return {"ok": ok, "files": len(files), "steps_in_trace": steps_seen, "kernel_events": kernels, "op_table": table}


def check_sleep_mode(shape: Shape, device: torch.device, num_blocks: int = 256) -> dict[str, Any]:
    """vLLM's sleep mode's torch hooks (backends/torch/runner_sleep.py, as `POST /sleep` runs them on a node), on a
    stand-in of the runner that holds what the real one holds (a model, its KV tensors): level 1 frees the KV cache
    and moves the weights to host RAM, level 2 drops them, and each wake brings back the same weights (level 2 builds
    them again from the same seed) and the KV cache. On CUDA the device memory allocated is read at each stage, and
    at least 90% of what the hooks count as freed must leave the device. (The runner itself imports msgspec, which
    the lent GPU machine lacks; its own sleep is tested on CPU in tests/backends/torch/test_runner_sleep.py.)"""
    import types

    from backends.torch.runner_sleep import TorchSleepVerbs

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32

    class StandIn(TorchSleepVerbs):
        def __init__(self) -> None:
            self.device, self._source, self._tp = device, shape, None
            self.attn = self.buffers = self.cpu_decoder = self.graphs = None
            self.packed_weights, self.huge_pages = False, None
            self._load_model()
            self.initialize_kv_cache(num_blocks)

        def _load_model(self) -> None:
            self.model = build(shape, dtype, device, seed=3)

        def initialize_kv_cache(self, spec) -> None:
            self._kv_spec = spec
            self.kv_cache = types.SimpleNamespace(device_kv=kv_layers(shape, spec, dtype, device)[0]._base)

    def allocated() -> int:
        _sync(device)
        return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0

    def checksum(model) -> float:
        return float(sum(p.double().sum() for p in model.parameters()))

    runner = StandIn()
    before, weights = allocated(), checksum(runner.model)
    out: dict[str, Any] = {"dtype": str(dtype)}
    for level in (1, 2):
        freed = runner.sleep(level)
        asleep = allocated()
        t0 = time.perf_counter()
        runner.wake_up()
        out[f"level{level}"] = {
            "freed_bytes": freed,
            "allocated_freed_bytes": before - asleep,
            "wake_s": time.perf_counter() - t0,
            "same_weights": checksum(runner.model) == weights,
            "weights_on_device": runner.model.embed_t.device.type == device.type,
            "allocated_back_bytes": allocated() - asleep,
        }
    levels = (out["level1"], out["level2"])
    ok = all(r["same_weights"] and r["weights_on_device"] and r["freed_bytes"] > 0 for r in levels)
    if device.type == "cuda":
        ok = ok and all(r["allocated_freed_bytes"] >= 0.9 * r["freed_bytes"] for r in levels)
    del runner
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return {**out, "ok": ok}


def run_gpu_check(args: argparse.Namespace) -> dict[str, Any]:
    t0 = time.perf_counter()
    device = torch.device(args.device)
    if device.type == "cpu" and "triton" not in sys.modules:
        os.environ.setdefault("TRITON_INTERPRET", "1")  # the Triton kernel on CPU tensors (slow, tiny shapes)
    from backends.torch.attention_dispatch import kernel_plan

    plan = kernel_plan(device, getattr(args, "attention_backend", None), cuda_graphs=getattr(args, "cuda_graphs", True))
    quick = getattr(args, "quick", False) or device.type == "cpu"
    say = (lambda *a: print(*a, file=sys.stderr)) if getattr(args, "json", True) else print
    report: dict[str, Any] = {
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "kernels": plan.summary(),
        "kernel_reason": plan.reason,
        "torch": torch.__version__,
    }
    try:
        import triton

        report["triton"] = triton.__version__
    except ImportError:
        report["triton"] = None
    bandwidth = getattr(args, "bandwidth_gbps", None) or device_bandwidth_gbps(device)
    report["bandwidth_gbps"] = bandwidth

    small = SHAPES["tiny" if quick else "smollm2-135m"]
    say(f"logits on {device} vs CPU fp32 ({small.name}) ...")
    report["logits_vs_cpu"] = check_logits_vs_cpu(small, device, plan)
    if report["triton"] is not None:
        say("Triton paged kernel vs gather + SDPA ...")
        dtypes = [torch.float32] + ([torch.bfloat16] if device.type == "cuda" else [])
        report["triton_vs_sdpa"] = check_triton_vs_sdpa(device, dtypes)
        say("Triton LoRA shrink/expand vs torch ...")
        report["triton_lora"] = check_triton_lora(device, dtypes)
    shapes = [SHAPES["tiny"]] if quick else [SHAPES["smollm2-135m"], SHAPES["llama-3-8b"]]
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    context = 64 if quick else 512
    report["decode"] = []
    # on a CPU a forced Triton kernel runs interpreted, which is no speed: decode is timed with the CPU's own
    decode_plan = plan if device.type == "cuda" else kernel_plan(device)
    for shape in shapes:
        say(f"decode {shape.name} {dtype} ...")
        model = build(shape, dtype, device)
        for batch in (1, 32):
            if time.perf_counter() - t0 > getattr(args, "budget_s", 420.0):  # finish in time, say what was cut
                report["decode"].append({"shape": shape.name, "batch": batch, "skipped": "over --budget-s"})
                continue
            report["decode"].append(
                decode_figures(shape, model, decode_plan, device, batch, context, args.steps, bandwidth)
            )
        if device.type == "cuda" and not quick and shape.name == "llama-3-8b":
            say(f"KV sized by --gpu-memory-utilization ({shape.name}) ...")
            report["kv_sizing"] = check_kv_sizing(shape, model, device)
        del model
        if device.type == "cuda":
            torch.cuda.empty_cache()
    say("the node profiler's torch session ...")
    report["profiler"] = check_profiler(SHAPES["tiny"], device)
    say("sleep mode: levels 1 and 2, and the wakes ...")
    report["sleep_mode"] = check_sleep_mode(SHAPES["tiny"] if quick else SHAPES["smollm2-135m"], device)
    checks = [report["logits_vs_cpu"]["ok"], *(c["ok"] for c in report.get("triton_vs_sdpa", {}).values())]
    checks += [report["profiler"]["ok"], report["sleep_mode"]["ok"]]
    checks += [c["ok"] for c in report.get("triton_lora", {}).values()]
    checks += [report["kv_sizing"]["ok"]] if "kv_sizing" in report else []
    report["ok"] = all(checks)
    report["elapsed_s"] = time.perf_counter() - t0
    return report


def add_gpu_check_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--quick", action="store_true", help="tiny shapes only (what the CPU half runs)")
    p.add_argument("--steps", type=int, default=64, help="measured decode steps per figure")
    p.add_argument("--bandwidth-gbps", type=float, default=None, help="memory bandwidth (default: GPU datasheet)")
    p.add_argument("--attention-backend", default=None, help="force a kernel instead of the dispatch table's")
    p.add_argument("--no-cuda-graphs", dest="cuda_graphs", action="store_false")
    p.add_argument("--out", default=None, help="also write the JSON object to this file")
    p.add_argument("--budget-s", type=float, default=420.0, help="start no decode figure after this many seconds")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.gpu_check", description=__doc__.splitlines()[0])
    add_gpu_check_args(p)
    args = p.parse_args(argv)
    args.json = True
    report = run_gpu_check(args)
    text = json.dumps(report, indent=2, default=_json_default)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0 if report["ok"] else 1


def _json_default(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    raise TypeError(type(x))


if __name__ == "__main__":
    sys.exit(main())
