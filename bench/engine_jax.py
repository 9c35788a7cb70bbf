"""The JAX runner inside an LLMEngine on the real model (fp32), for `zoo bench engine` to put beside torch.

Run it in its own (spawned) process: JAX sizes its thread pools and the XLA compile cache per process.

Phases:
1. warm-up: compile the decode programs for every batch bucket up to 32 and the context buckets the
   workload reaches (``JaxModelRunner.warmup``), then run the measured workloads once on other
   prompts of the same lengths, which compiles the chunk (prefill) programs and samplers they use.
2. measured: the same workloads on fresh prompts (the prefix cache cannot shorten them). Every
   XLA compile in this phase is a steady-state recompile; the report's count must be 0.

Definitions (as bench/engine.py):
- batch 1: prefill tok/s = prompt tokens / TTFT; decode tok/s = 1 / TPOT.
- batch 32 (all arrive at t=0): prefill tok/s = all prompt tokens / time until the last request's first
  token; decode tok/s = output tokens generated after that point / the time they took (aggregate);
  output tok/s = all output tokens / wall time of the run.
- both: ``cpu_s`` = this process's CPU seconds (all threads) over the run, ``loadavg_1m`` = the machine's
  1-minute load average when it started: on a shared 2-core machine wall-clock rates depend on the
  other processes, CPU seconds much less.
"""

from __future__ import annotations

import itertools
import json
import os
import resource
import time

from bench.workload import synthetic_prompt_ids

BATCH1_PROMPT = 128
BATCH32_PROMPT = 64
NUM_CONCURRENT = 32


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _build_engine(model_path: str | None, cpu_decode_kernel: bool = True):
    from backends.checkpoint import load_checkpoint
    from backends.jax import JaxModelRunner
    from engine.config import CacheConfig, SchedulerConfig
    from engine.llm_engine import LLMEngine

    checkpoint = load_checkpoint(model_path)
    t0 = time.perf_counter()
    runner = JaxModelRunner(checkpoint, "float32", "cpu", progress=False, cpu_decode_kernel=cpu_decode_kernel)
    load_s = time.perf_counter() - t0
    scheduler = SchedulerConfig(
        max_num_batched_tokens=512, max_num_seqs=64, max_model_len=min(8192, runner.max_model_len)
    )
    engine = LLMEngine(runner, checkpoint.tokenizer, scheduler, CacheConfig(num_device_blocks=2048, num_host_blocks=0))
    return engine, runner, load_s


def _batch1(engine, n_out: int, seed: int) -> dict:
    from engine.sampling_params import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=n_out, ignore_eos=True)
    prompt = synthetic_prompt_ids(BATCH1_PROMPT, engine.tokenizer.vocab_size, seed=seed)
    load, cpu0 = os.getloadavg()[0], _cpu_s()
    (res,) = engine.generate([prompt], params)
    cpu_s = _cpu_s() - cpu0
    m = res.metrics
    return {
        "prompt_tokens": BATCH1_PROMPT,
        "output_tokens": res.num_output_tokens,
        "ttft_ms": m.ttft_s * 1e3,
        "prefill_tok_per_s": BATCH1_PROMPT / m.ttft_s,
        "tpot_ms": m.tpot_s * 1e3,
        "decode_tok_per_s": 1.0 / m.tpot_s,
        "cpu_s": cpu_s,
        "loadavg_1m": load,
    }


def steady_decode_tok_per_s(records, num_rows: int) -> float:
    """Tokens a second over the steps that decode all ``num_rows`` requests and nothing else, each timed from the
    previous step's end to its own (the whole engine iteration: schedule, execute, update). ``decode_tok_per_s``
    spreads each request's tokens evenly between its first and last, so it also carries the speed of the steps
    that mixed decodes with the last prompts' prefill; this one is the pure batch-``num_rows`` decode rate."""
    spans = [
        b.end_time_s - a.end_time_s
        for a, b in itertools.pairwise(records)
        if b.num_prefill_tokens == 0 and b.num_decode_requests == num_rows
    ]
    return len(spans) * num_rows / sum(spans) if spans else float("nan")


def uniform_concurrent(engine, n_out: int, seed_base: int) -> dict:
    from engine.sampling_params import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=n_out, ignore_eos=True)
    vocab = engine.tokenizer.vocab_size
    load, cpu0 = os.getloadavg()[0], _cpu_s()
    engine.take_step_records()  # this run's steps only (steady_decode_tok_per_s)
    t0 = engine.clock.now()
    ids = [
        engine.add_request(synthetic_prompt_ids(BATCH32_PROMPT, vocab, seed=seed_base + i), params, arrival_time_s=t0)
        for i in range(NUM_CONCURRENT)
    ]
    final = engine.run_until_done()
    cpu_s = _cpu_s() - cpu0
    metrics = [final[r].metrics for r in ids]
    all_started = max(m.first_token_time_s for m in metrics)
    end = max(m.finished_time_s for m in metrics)
    n_out_total = sum(final[r].num_output_tokens for r in ids)
    # tokens after ``all_started``: each request's tokens at evenly spaced times between its first and last
    after = 0.0
    for m in metrics:
        if m.num_output_tokens > 1 and m.last_token_time_s > all_started:
            span = m.last_token_time_s - m.first_token_time_s
            frac = (m.last_token_time_s - all_started) / span if span > 0 else 0.0
            after += (m.num_output_tokens - 1) * min(1.0, frac)
    return {
        "requests": NUM_CONCURRENT,
        "prompt_tokens_each": BATCH32_PROMPT,
        "output_tokens": n_out_total,
        "wall_s": end - t0,
        "prefill_tok_per_s": NUM_CONCURRENT * BATCH32_PROMPT / (all_started - t0),
        "decode_tok_per_s": after / (end - all_started) if end > all_started else float("nan"),
        "steady_decode_tok_per_s": steady_decode_tok_per_s(engine.take_step_records(), NUM_CONCURRENT),
        "output_tok_per_s": n_out_total / (end - t0),
        "cpu_s": cpu_s,
        "loadavg_1m": load,
    }


def run_jax_bench(model_path: str | None, quick: bool, cpu_decode_kernel: bool = True) -> dict:
    """Build the JAX runner on the real model (fp32, CPU) in an LLMEngine and measure it; see the module doc.
    ``cpu_decode_kernel=False``: the pure-XLA decode programs only (no FFI kernel)."""
    import jax

    n_out = 16 if quick else 64
    engine, runner, load_s = _build_engine(model_path, cpu_decode_kernel)

    t0 = time.perf_counter()
    max_context = max(BATCH1_PROMPT, BATCH32_PROMPT) + n_out
    warmup_decode_compiles = runner.warmup(max_num_seqs=NUM_CONCURRENT, max_context_tokens=max_context)
    _batch1(engine, n_out, seed=7)
    uniform_concurrent(engine, n_out, seed_base=5000)
    warmup_s = time.perf_counter() - t0
    compiles_before = runner.num_compilations

    batch1 = _batch1(engine, n_out, seed=123)
    batch32 = uniform_concurrent(engine, n_out, seed_base=1000)

    return {
        "backend": "jax",
        "jax_version": jax.__version__,
        "device": str(runner.device),
        "dtype": "float32",
        "decode_path": runner.decode_path,
        "weights_load_s": load_s,
        "warmup": {
            "wall_s": warmup_s,
            "compilations": compiles_before,
            "decode_compilations": warmup_decode_compiles,
            "compile_s": runner.compile_time_s,
            "buckets": {
                "batch": list(runner.buckets.batch_buckets),
                "tokens": list(runner.buckets.token_buckets),
                "min_context_blocks": runner.buckets.min_context_blocks,
            },
        },
        "batch1": batch1,
        "concurrent32": batch32,
        "steady_state_recompiles": runner.num_compilations - compiles_before,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-cpu-decode-kernel", action="store_true", help="pure-XLA decode programs only")
    args = parser.parse_args()
    print(json.dumps(run_jax_bench(args.model, args.quick, not args.no_cpu_decode_kernel), indent=2))
