"""`zoo bench engine`: HF transformers generate() against this engine, same model, same machine, same run.

Each configuration runs in its own spawned process so that its peak RSS is its own. Lengths come from the
Azure 2023 conversation trace, scaled down (the scale is part of the report). All requests of a
concurrent run arrive at t=0 (offline batch); TTFT therefore includes queueing behind earlier prefills.

Definitions:
- batch 1: prefill tok/s = prompt tokens / TTFT; decode tok/s = (output tokens - 1) / (e2e - TTFT).
- concurrent: output tok/s = all output tokens / wall time of the run (prefills included);
  decode-phase tok/s = tokens sampled in steps that held only decodes / the runner time of those steps;
  HF's static batch counts only the tokens each request asked for (padding and tokens generated after a
  request's own length are waste).
- roofline: batch-1 decode must read every weight once per token: measured read bandwidth / weight bytes.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import resource
import sys
import time

from bench.engine_jax import uniform_concurrent
from bench.stats import percentile
from bench.workload import LengthScale, sample_lengths, synthetic_prompt_ids

BATCH1_PROMPT = 128
BATCH1_OUTPUT = 64
SWAP_CONTEXT_TOKENS = 2000
NUM_THREADS = 2


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _setup_torch():
    import torch

    torch.set_num_threads(NUM_THREADS)
    return torch


# --------------------------------------------------------------------------------------- HF baseline


def _hf_part(model_path: str | None, dtype: str, lengths: list[tuple[int, int]], quick: bool) -> dict:
    torch = _setup_torch()
    from backends.checkpoint import default_model_path
    from bench.hf_reference import load_hf_reference

    path = default_model_path() if model_path is None else __import__("pathlib").Path(model_path)
    model = load_hf_reference(path, dtype)
    vocab = model.config.vocab_size
    out: dict = {}

    def gen(ids, new_tokens, attention_mask=None):
        t0 = time.perf_counter()
        with torch.inference_mode():
            model.generate(
                ids,
                attention_mask=attention_mask,
                max_new_tokens=new_tokens,
                min_new_tokens=new_tokens,
                do_sample=False,
                pad_token_id=0,
            )
        return time.perf_counter() - t0

    n_out = 16 if quick else BATCH1_OUTPUT
    prompt = torch.tensor([synthetic_prompt_ids(BATCH1_PROMPT, vocab, seed=123)])
    gen(prompt, 2)  # warm-up
    ttft = min(gen(prompt, 1) for _ in range(2))
    total = gen(prompt, n_out)
    out["batch1"] = {
        "prompt_tokens": BATCH1_PROMPT,
        "output_tokens": n_out,
        "ttft_ms": ttft * 1e3,
        "prefill_tok_per_s": BATCH1_PROMPT / ttft,
        "tpot_ms": (total - ttft) / (n_out - 1) * 1e3,
        "decode_tok_per_s": (n_out - 1) / (total - ttft),
    }

    # static padded batch of 16 (left padding), generating until the longest request's length
    batch = lengths[:16]
    max_p, max_o = max(p for p, _ in batch), max(o for _, o in batch)
    ids = torch.zeros((len(batch), max_p), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, (p, _) in enumerate(batch):
        ids[i, max_p - p :] = torch.tensor(synthetic_prompt_ids(p, vocab, seed=i))
        mask[i, max_p - p :] = 1
    wall = gen(ids, max_o, attention_mask=mask)
    useful = sum(o for _, o in batch)
    out["static16"] = {
        "requests": len(batch),
        "padded_prompt_tokens": max_p,
        "generated_per_request": max_o,
        "wall_s": wall,
        "useful_output_tokens": useful,
        "output_tok_per_s": useful / wall,
        "raw_output_tok_per_s": len(batch) * max_o / wall,
    }
    out["peak_rss_mb"] = _peak_rss_mb()
    return out


# --------------------------------------------------------------------------------------- the engine


def _build(model_path: str | None, dtype: str, num_device_blocks: int, num_host_blocks: int, max_num_seqs: int = 64):
    from backends.builder import build_engine
    from engine.config import CacheConfig, EngineConfig, SchedulerConfig
    from engine.stall_free import DEFAULT_STALL_FACTOR

    # as `zoo agent` builds its engine by default: a 512-token budget, stall-free batching at the default factor
    stall = DEFAULT_STALL_FACTOR or None
    scheduler = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=max_num_seqs, stall_factor=stall)
    cfg = EngineConfig(
        model=model_path,
        dtype=dtype,
        scheduler=scheduler,
        cache=CacheConfig(num_device_blocks=num_device_blocks, num_host_blocks=num_host_blocks),
    )
    return build_engine(cfg, progress=False)


def _concurrent(engine, lengths: list[tuple[int, int]], seed_base: int) -> dict:
    from engine.sampling_params import SamplingParams

    vocab = engine.tokenizer.vocab_size
    engine.take_step_records()
    t0 = time.perf_counter()
    ids = [
        engine.add_request(
            synthetic_prompt_ids(p, vocab, seed=seed_base + i),
            SamplingParams(temperature=0, max_tokens=o, ignore_eos=True),
        )
        for i, (p, o) in enumerate(lengths)
    ]
    final = engine.run_until_done()
    wall = time.perf_counter() - t0
    ttft = [final[r].metrics.ttft_s * 1e3 for r in ids]
    tpot = [final[r].metrics.tpot_s * 1e3 for r in ids if final[r].metrics.tpot_s is not None]
    n_out = sum(final[r].num_output_tokens for r in ids)
    n_in = sum(final[r].num_prompt_tokens for r in ids)
    records = engine.take_step_records()
    decode_only = [r for r in records if r.num_prefill_tokens == 0]
    decode_s = sum(r.step_time_s for r in decode_only)
    return {
        "decode_phase_tok_per_s": sum(r.num_decode_requests for r in decode_only) / decode_s if decode_s else 0.0,
        "decode_phase_mean_batch": (
            sum(r.num_decode_requests for r in decode_only) / len(decode_only) if decode_only else 0.0
        ),
        "requests": len(ids),
        "prompt_tokens": n_in,
        "output_tokens": n_out,
        "wall_s": wall,
        "output_tok_per_s": n_out / wall,
        "total_tok_per_s": (n_in + n_out) / wall,
        "ttft_ms_p50": percentile(ttft, 50),
        "ttft_ms_p99": percentile(ttft, 99),
        "tpot_ms_p50": percentile(tpot, 50),
        "tpot_ms_p99": percentile(tpot, 99),
    }


def _zoo_batch1(engine, n_out: int) -> dict:
    from engine.sampling_params import SamplingParams

    vocab = engine.tokenizer.vocab_size
    params = SamplingParams(temperature=0, max_tokens=n_out, ignore_eos=True)
    engine.generate([synthetic_prompt_ids(BATCH1_PROMPT, vocab, seed=7)], SamplingParams(temperature=0, max_tokens=2))
    # a prompt never seen before, so the prefix cache cannot shorten the prefill
    (res,) = engine.generate([synthetic_prompt_ids(BATCH1_PROMPT, vocab, seed=123)], params)
    m = res.metrics
    return {
        "prompt_tokens": BATCH1_PROMPT,
        "output_tokens": n_out,
        "ttft_ms": m.ttft_s * 1e3,
        "prefill_tok_per_s": BATCH1_PROMPT / m.ttft_s,
        "tpot_ms": m.tpot_s * 1e3,
        "decode_tok_per_s": 1.0 / m.tpot_s,
    }


def _swap_vs_recompute(engine) -> dict:
    """Time a 2,000-token context: prefill it (the recompute path) vs swap its blocks out and back in."""
    from engine.batch import ScheduledRequest, SchedulerOutput
    from engine.sampling_params import SamplingParams

    runner, bs = engine.runner, engine.cache_config.block_size
    n_blocks = -(-SWAP_CONTEXT_TOKENS // bs)
    # the top of the device and host pools: the engine is idle, the bench owns these blocks now
    dev = list(range(engine.cache_config.num_device_blocks - n_blocks, engine.cache_config.num_device_blocks))
    host = list(range(engine.cache_config.num_host_blocks - n_blocks, engine.cache_config.num_host_blocks))
    tokens = synthetic_prompt_ids(SWAP_CONTEXT_TOKENS, engine.tokenizer.vocab_size, seed=99)
    params = SamplingParams(temperature=0, max_tokens=1)
    chunk = engine.scheduler_config.max_num_batched_tokens
    t0 = time.perf_counter()
    for step, start in enumerate(range(0, SWAP_CONTEXT_TOKENS, chunk)):
        piece = tokens[start : start + chunk]
        last = start + len(piece) == SWAP_CONTEXT_TOKENS
        req = ScheduledRequest("swap-bench", piece, start, dev, last, params)
        runner.execute(SchedulerOutput(step_id=10_000 + step, requests=[req]))
    recompute_s = time.perf_counter() - t0
    runner.execute(SchedulerOutput(step_id=20_000, finished_req_ids=["swap-bench"]))
    t0 = time.perf_counter()
    runner.execute(SchedulerOutput(step_id=20_001, blocks_to_swap_out=list(zip(dev, host))))
    swap_out_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    runner.execute(SchedulerOutput(step_id=20_002, blocks_to_swap_in=list(zip(host, dev))))
    swap_in_s = time.perf_counter() - t0
    return {
        "context_tokens": SWAP_CONTEXT_TOKENS,
        "blocks": n_blocks,
        "recompute_ms": recompute_s * 1e3,
        "swap_out_ms": swap_out_s * 1e3,
        "swap_in_ms": swap_in_s * 1e3,
        "speedup": recompute_s / (swap_out_s + swap_in_s),
    }


def _zoo_part(model_path: str | None, dtype: str, lengths: list[tuple[int, int]], quick: bool) -> dict:
    _setup_torch()
    n_out = 16 if quick else BATCH1_OUTPUT
    engine = _build(model_path, dtype, num_device_blocks=2048, num_host_blocks=256)
    out = {"batch1": _zoo_batch1(engine, n_out)}
    out["concurrent16"] = _concurrent(engine, lengths[:16], seed_base=0)
    out["concurrent32"] = _concurrent(engine, lengths, seed_base=1000)
    out["uniform32"] = uniform_concurrent(engine, 16 if quick else BATCH1_OUTPUT, seed_base=1000)
    out["swap_vs_recompute"] = _swap_vs_recompute(engine)
    out["peak_rss_mb"] = _peak_rss_mb()
    runner = engine.runner
    out["kernels"] = getattr(runner, "kernels", "")
    # the C decode kernel's steps: moving-average wall ms per thread count, per batch size (thread_choice.py)
    choice = getattr(runner, "thread_choice", None)
    out["cpu_decode_threads_ms"] = choice.summary() if choice is not None else {}
    return out


def _zoo_bf16_part(model_path: str | None, quick: bool) -> dict:
    _setup_torch()
    engine = _build(model_path, "bfloat16", num_device_blocks=64, num_host_blocks=0)
    return {"batch1": _zoo_batch1(engine, 16 if quick else 32), "peak_rss_mb": _peak_rss_mb()}


def _jax_part(model_path: str | None, quick: bool) -> dict:
    from bench.engine_jax import run_jax_bench

    return run_jax_bench(model_path, quick)


def _jax_xla_part(model_path: str | None, quick: bool) -> dict:
    """The JAX runner with its pure-XLA decode programs only (no FFI kernel), beside the default."""
    from bench.engine_jax import run_jax_bench

    return run_jax_bench(model_path, quick, cpu_decode_kernel=False)


def _bandwidth_part() -> dict:
    """Read bandwidth: sum a 1 GiB fp32 tensor (2 threads); best of 5."""
    torch = _setup_torch()
    x = torch.ones(256 * 1024 * 1024, dtype=torch.float32)
    x.sum()
    best = min(_timed(lambda: x.sum()) for _ in range(5))
    return {"read_gbps": x.numel() * 4 / best / 1e9}


def _timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _weights_part(model_path: str | None) -> dict:
    from backends.checkpoint import load_checkpoint

    cfg = load_checkpoint(model_path).config
    return {"name": cfg.name, "num_params": cfg.num_params}


def _in_process(fn, *args):
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        return pool.apply(fn, args)


# --------------------------------------------------------------------------------------- report


def run_engine_bench(args: argparse.Namespace) -> dict:
    quick = getattr(args, "quick", False)
    n_req = 8 if quick else 32
    scale = LengthScale(prompt_div=8, output_div=8, min_prompt=8, max_prompt=256, min_output=4, max_output=64)
    lengths = sample_lengths(n_req, scale, seed=0)
    if quick:
        lengths = lengths[:8] * 4
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    load_start = os.getloadavg()[0]  # other processes on the machine (they slow every figure)
    say(f"workload: {len(lengths)} requests, lengths from azure_conv_2023.csv scaled: {scale.describe()}")
    say("measuring memory bandwidth ...")
    bw = _in_process(_bandwidth_part)
    weights = _in_process(_weights_part, args.model)
    say("HF transformers baseline (batch 1, static batch 16) ...")
    hf = _in_process(_hf_part, args.model, "float32", lengths, quick)
    say("this engine, fp32 (batch 1, 16 and 32 concurrent, swap vs recompute) ...")
    zoo = _in_process(_zoo_part, args.model, "float32", lengths, quick)
    say("this engine, bf16 batch 1 ...")
    zoo["bf16"] = _in_process(_zoo_bf16_part, args.model, quick)
    say("this engine on the JAX runner (batch 1 and 32, compile time, recompiles) ...")
    zoo["jax"] = _in_process(_jax_part, args.model, quick)
    say("this engine on the JAX runner, pure-XLA decode (no FFI kernel) ...")
    zoo["jax_xla"] = _in_process(_jax_xla_part, args.model, quick)

    weight_bytes = weights["num_params"] * 4
    roofline_tok_s = bw["read_gbps"] * 1e9 / weight_bytes
    ratios = {
        "batch1_decode_vs_hf": zoo["batch1"]["decode_tok_per_s"] / hf["batch1"]["decode_tok_per_s"],
        "batch1_prefill_vs_hf": zoo["batch1"]["prefill_tok_per_s"] / hf["batch1"]["prefill_tok_per_s"],
        "concurrent16_vs_hf_static16": zoo["concurrent16"]["output_tok_per_s"] / hf["static16"]["output_tok_per_s"],
        "concurrent32_vs_hf_static16": zoo["concurrent32"]["output_tok_per_s"] / hf["static16"]["output_tok_per_s"],
        "concurrent32_vs_own_batch1": zoo["concurrent32"]["output_tok_per_s"] / zoo["batch1"]["decode_tok_per_s"],
        "concurrent32_decode_phase_vs_own_batch1": (
            zoo["concurrent32"]["decode_phase_tok_per_s"] / zoo["batch1"]["decode_tok_per_s"]
        ),
        "swap_vs_recompute_speedup": zoo["swap_vs_recompute"]["speedup"],
        "jax_vs_torch_batch1_decode": zoo["jax"]["batch1"]["decode_tok_per_s"] / zoo["batch1"]["decode_tok_per_s"],
        "jax_vs_torch_uniform32_decode": (
            zoo["jax"]["concurrent32"]["decode_tok_per_s"] / zoo["uniform32"]["decode_tok_per_s"]
        ),
        "jax_xla_vs_torch_batch1_decode": (
            zoo["jax_xla"]["batch1"]["decode_tok_per_s"] / zoo["batch1"]["decode_tok_per_s"]
        ),
        "jax_xla_vs_torch_uniform32_decode": (
            zoo["jax_xla"]["concurrent32"]["decode_tok_per_s"] / zoo["uniform32"]["decode_tok_per_s"]
        ),
    }
    report = {
        "machine": {
            "threads": NUM_THREADS,
            "read_bandwidth_gbps": bw["read_gbps"],
            "load_average_1m_start": load_start,
            "load_average_1m_end": os.getloadavg()[0],
        },
        "model": weights,
        "workload": {
            "trace": "azure_conv_2023.csv",
            "scale": scale.describe(),
            "requests": len(lengths),
            "arrivals": "all at t=0",
        },
        "hf": hf,
        "zoo": zoo,
        "ratios": ratios,
        "roofline": {
            "weight_bytes_fp32": weight_bytes,
            "batch1_roofline_tok_per_s": roofline_tok_s,
            "zoo_batch1_fraction": zoo["batch1"]["decode_tok_per_s"] / roofline_tok_s,
            "hf_batch1_fraction": hf["batch1"]["decode_tok_per_s"] / roofline_tok_s,
        },
    }
    if not args.json:
        _print_report(report)
    return report


def _print_report(r: dict) -> None:
    from bench.stats import format_table

    hf, zoo, ra, rf = r["hf"], r["zoo"], r["ratios"], r["roofline"]
    m = r["machine"]
    print(
        f"\nmachine: {m['threads']} threads, read bandwidth {m['read_bandwidth_gbps']:.1f} GB/s; "
        f"model {r['model']['name']} ({r['model']['num_params'] / 1e6:.1f} M params)"
    )

    def b1(name: str, d: dict, rss: float) -> list:
        return [name, d["prefill_tok_per_s"], d["decode_tok_per_s"], d["ttft_ms"], d["tpot_ms"], rss]

    def conc(c: dict) -> list:
        ttft = f"{c['ttft_ms_p50']:.0f}/{c['ttft_ms_p99']:.0f}"
        tpot = f"{c['tpot_ms_p50']:.1f}/{c['tpot_ms_p99']:.1f}"
        return [f"zoo {c['requests']} concurrent", "", c["output_tok_per_s"], ttft, tpot, zoo["peak_rss_mb"]]

    rows = [
        b1("HF generate b=1", hf["batch1"], hf["peak_rss_mb"]),
        b1("zoo b=1 fp32", zoo["batch1"], zoo["peak_rss_mb"]),
        b1("zoo b=1 bf16", zoo["bf16"]["batch1"], zoo["bf16"]["peak_rss_mb"]),
        ["HF static batch 16", "", hf["static16"]["output_tok_per_s"], "", "", hf["peak_rss_mb"]],
        conc(zoo["concurrent16"]),
        conc(zoo["concurrent32"]),
        ["torch 32 x uniform", zoo["uniform32"]["prefill_tok_per_s"], zoo["uniform32"]["decode_tok_per_s"], "", "", ""],
        b1("JAX b=1 fp32", zoo["jax"]["batch1"], zoo["jax"]["peak_rss_mb"]),
        [
            "JAX 32 x uniform",
            zoo["jax"]["concurrent32"]["prefill_tok_per_s"],
            zoo["jax"]["concurrent32"]["decode_tok_per_s"],
            "",
            "",
            zoo["jax"]["peak_rss_mb"],
        ],
    ]
    headers = ["config", "prefill tok/s", "output tok/s", "TTFT ms p50/p99", "TPOT ms p50/p99", "peak RSS MB"]
    print(format_table(headers, rows))
    jw = zoo["jax"]["warmup"]
    print(
        f"JAX: warm-up {jw['wall_s']:.1f} s with {jw['compilations']} compiles ({jw['compile_s']:.1f} s compiling); "
        f"steady-state recompiles {zoo['jax']['steady_state_recompiles']}"
    )
    print("\nratios:")
    for k, v in ra.items():
        print(f"  {k}: {v:.2f}x")
    sw = zoo["swap_vs_recompute"]
    print(
        f"swap {sw['context_tokens']} tokens: out {sw['swap_out_ms']:.1f} ms + in {sw['swap_in_ms']:.1f} ms "
        f"vs recompute {sw['recompute_ms']:.0f} ms"
    )
    mb = rf["weight_bytes_fp32"] / 1e6
    print(
        f"roofline b=1: {rf['batch1_roofline_tok_per_s']:.1f} tok/s ({mb:.0f} MB of weights per token); "
        f"zoo reaches {rf['zoo_batch1_fraction']:.0%}, HF {rf['hf_batch1_fraction']:.0%}"
    )
