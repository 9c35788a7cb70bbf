"""`zoo bench spec`: speculative decoding against plain decoding, same engine, same prompts, same run.

For each proposer (``--proposers``: ngram, model, model-bf16) and batch size (``--batch-sizes``), plain and
speculative runs alternate (``repeats`` pairs) on one target engine, so both see the same machine load;
each reports its median. Greedy: plain and speculative runs generate the same tokens (``identical``).

    decode tok/s     = sum over requests of (output tokens - 1) / (last finish - first token)  [prefill excluded]
    speedup          = spec decode tok/s / plain decode tok/s  (medians)
    acceptance_rate  = accepted drafts / proposed drafts  (vllm:spec_decode_num_accepted_tokens_total /
                       vllm:spec_decode_num_draft_tokens_total)
    mean_accepted_tokens = tokens per verification step (1 + accepted drafts per step)
    identical        = every speculative run's token ids == the plain run's

Prompts: n-gram on an editing task (the model re-prints a file it was given: prompt lookup's use case);
the draft model on an open-ended story. ``verify_cost`` / ``draft_cost`` are the speculator's measured
costs per drafted position in target decode steps (engine/spec/speculator.py).
"""

from __future__ import annotations

import argparse
import statistics
import time

_CODE = """def fibonacci(n):
    if n <= 1:
        return n
    return fibonacci(n - 1) + fibonacci(n - 2)

def factorial(n):
    if n == 0:
        return 1
    return n * factorial(n - 1)

def is_prime(n):
    if n < 2:
        return False
    for i in range(2, n):
        if n % i == 0:
            return False
    return True
"""
REPETITIVE_PROMPT = "Add a docstring to each function and print the whole file:\n\n" + _CODE
OPEN_PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def _decode_tok_per_s(outputs) -> float:
    first = min(o.metrics.first_token_time_s for o in outputs)
    last = max(o.metrics.finished_time_s for o in outputs)
    return sum(o.num_output_tokens - 1 for o in outputs) / max(last - first, 1e-9)


def _run(engine, prompt_ids: list[int], batch_size: int, params) -> tuple[float, list[list[int]]]:
    ids = [engine.add_request(prompt_ids, params) for _ in range(batch_size)]
    got: dict[str, list[int]] = {i: [] for i in ids}
    final = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            got[out.req_id].extend(out.new_token_ids)
            if out.finished:
                final[out.req_id] = out
    return _decode_tok_per_s([final[i] for i in ids]), [got[i] for i in ids]


def _start_draft_server(args: argparse.Namespace):
    """A ``zoo draft-server`` child process on a free loopback port: (process, endpoint)."""
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    endpoint = f"tcp://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "zoo", "draft-server", "--bind", endpoint, "--dtype", args.draft_dtype]
    if args.draft_model:
        cmd += ["--model", args.draft_model]
    if args.draft_num_threads or args.num_threads:
        cmd += ["--num-threads", str(args.draft_num_threads or args.num_threads)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    for line in proc.stdout:
        if line.startswith("draft server:"):
            return proc, endpoint
    raise RuntimeError(f"zoo draft-server exited ({proc.wait()}) before serving")


def _proposer(engine, name: str, args: argparse.Namespace):
    """(proposer, SpecDecodeConfig) for a proposer name."""
    from backends.spec_builder import build_draft_proposer
    from engine.spec import SpecDecodeConfig
    from engine.spec.ngram_proposer import NgramProposer

    if name not in ("ngram", "model", "model-bf16", "remote"):
        raise ValueError(f"unknown proposer {name!r} (ngram, model, model-bf16, remote)")
    method = name if name in ("ngram", "remote") else "model"
    config = SpecDecodeConfig(
        method=method,
        num_spec_tokens=args.num_spec_tokens,
        adaptive=not args.no_adaptive_k,
        max_batch_size=0,  # the bench measures the crossover: speculation stays on at every batch size
        draft_model=args.draft_model,
        draft_dtype="bfloat16" if name == "model-bf16" else args.draft_dtype,
        draft_num_threads=args.draft_num_threads,
        draft_endpoint=args.draft_endpoint,
        draft_timeout_s=args.draft_timeout_s,
    )
    if method == "ngram":
        return NgramProposer(config.ngram_min, config.ngram_max), config
    if method == "remote":
        from transport.remote_drafter import RemoteProposer

        proposer = RemoteProposer(args.draft_endpoint, timeout_s=args.draft_timeout_s)
        proposer.pair(engine.tokenizer.vocab_size)
        return proposer, config
    return build_draft_proposer(engine, config, args.model), config


def run_spec_bench(args: argparse.Namespace) -> dict:
    import torch

    from backends.builder import build_engine
    from engine.config import CacheConfig, EngineConfig, SchedulerConfig
    from engine.sampling_params import SamplingParams

    config = EngineConfig(
        model=args.model,
        dtype=args.dtype,
        device=args.device,
        num_threads=args.num_threads,
        scheduler=SchedulerConfig(max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs),
        cache=CacheConfig(block_size=args.block_size, num_device_blocks=args.num_device_blocks, num_host_blocks=0),
    )
    engine = build_engine(config, progress=False)
    max_tokens = 32 if args.quick else 96
    repeats = 1 if args.quick else 3
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens)
    batch_sizes = [int(b) for b in str(args.batch_sizes).split(",") if b]
    report: dict = {
        "model": engine.runner.config.name if hasattr(engine.runner, "config") else None,
        "dtype": args.dtype,
        "num_threads": torch.get_num_threads(),
        "max_tokens": max_tokens,
        "repeats": repeats,
        "num_spec_tokens": args.num_spec_tokens,
        "adaptive_k": not args.no_adaptive_k,
        "proposers": {},
    }
    for name in [p for p in str(args.proposers).split(",") if p]:
        server = None
        if name == "remote" and not args.draft_endpoint:  # a draft agent process of our own, over loopback
            server, args.draft_endpoint = _start_draft_server(args)
        try:
            entry = _measure(engine, name, args, params, batch_sizes, repeats)
        finally:
            if server is not None:
                from transport.process import stop_processes

                stop_processes([server])
                args.draft_endpoint = None
        report["proposers"][name] = entry
    report["time_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return report


def _measure(engine, name: str, args: argparse.Namespace, params, batch_sizes: list[int], repeats: int) -> dict:
    from engine.spec import Speculator

    proposer, config = _proposer(engine, name, args)
    prompt = REPETITIVE_PROMPT if name == "ngram" else OPEN_PROMPT
    prompt_ids = engine.encode_chat([{"role": "user", "content": prompt}])
    rows = []
    for batch_size in batch_sizes:
        plain, spec, identical = [], [], True
        accepted = drafted = drafts = 0
        verify_cost = draft_cost = 0.0
        for _ in range(repeats):
            engine.speculator = None
            tok_s, plain_ids = _run(engine, prompt_ids, batch_size, params)
            plain.append(tok_s)
            speculator = Speculator(proposer, config, engine.clock)
            engine.speculator = speculator
            tok_s, spec_ids = _run(engine, prompt_ids, batch_size, params)
            spec.append(tok_s)
            identical = identical and spec_ids == plain_ids
            stats = speculator.make_stats()
            accepted += stats.num_accepted_tokens_total
            drafted += stats.num_draft_tokens_total
            drafts += stats.num_drafts_total
            verify_cost, draft_cost = speculator.verify_cost, speculator.draft_cost
        engine.speculator = None
        base, fast = statistics.median(plain), statistics.median(spec)
        rows.append(
            {
                "batch_size": batch_size,
                "baseline_tok_per_s": round(base, 2),
                "spec_tok_per_s": round(fast, 2),
                "speedup": round(fast / base, 3),
                "acceptance_rate": round(accepted / drafted, 3) if drafted else 0.0,
                "mean_accepted_tokens": round(1 + accepted / drafts, 3) if drafts else 0.0,
                "identical": identical,
                "num_draft_tokens_total": drafted,
                "num_accepted_tokens_total": accepted,
                "verify_cost": round(verify_cost, 3),
                "draft_cost": round(draft_cost, 3),
                "baseline_runs_tok_per_s": [round(x, 2) for x in plain],
                "spec_runs_tok_per_s": [round(x, 2) for x in spec],
            }
        )
    entry = dict(rows[0])
    entry["by_batch_size"] = rows
    if hasattr(proposer, "close"):
        entry["num_timeouts"] = proposer.num_timeouts
        proposer.close()
    return entry
