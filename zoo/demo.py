"""`make demo` until the control plane exists: a chat answer from the real model, then a small
continuous-batching run with a latency table."""

from __future__ import annotations

import argparse
import sys

from bench.stats import format_table, percentile
from bench.workload import LengthScale, sample_lengths, synthetic_prompt_ids
from controlplane.engine.sampling_params import SamplingParams

QUESTION = "What is the capital of France?"
NUM_BATCH_REQUESTS = 8


def run_demo(args: argparse.Namespace) -> int:
    from zoo.cli import engine_config_from_args
    from zoo.engine_builder import build_engine

    engine = build_engine(engine_config_from_args(args))
    print(f"\n== 1. chat: {QUESTION}")
    engine.add_request(
        engine.encode_chat([{"role": "user", "content": QUESTION}]), SamplingParams(temperature=0, max_tokens=24)
    )
    while engine.has_unfinished_requests():
        for out in engine.step():
            sys.stdout.write(out.new_text)
            sys.stdout.flush()
    print()

    scale = LengthScale(max_prompt=256, max_output=24)
    lengths = sample_lengths(NUM_BATCH_REQUESTS, scale, seed=1)
    print(
        f"\n== 2. continuous batching: {NUM_BATCH_REQUESTS} concurrent requests, lengths from the Azure "
        f"conversation trace ({scale.describe()})"
    )
    vocab = engine.tokenizer.vocab_size
    t0 = engine.clock.now()
    ids = [
        engine.add_request(
            synthetic_prompt_ids(p, vocab, seed=i), SamplingParams(temperature=0, max_tokens=o, ignore_eos=True)
        )
        for i, (p, o) in enumerate(lengths)
    ]
    final = engine.run_until_done()
    wall_s = engine.clock.now() - t0
    rows = []
    for rid in ids:
        m = final[rid].metrics
        rows.append(
            [
                rid,
                final[rid].num_prompt_tokens,
                final[rid].num_output_tokens,
                m.ttft_s * 1e3,
                (m.tpot_s or float("nan")) * 1e3,
                m.e2e_s * 1e3,
            ]
        )
    print(format_table(["request", "prompt", "output", "TTFT ms", "TPOT ms", "e2e ms"], rows))
    ttfts = [r[3] for r in rows]
    tpots = [r[4] for r in rows]
    num_out = sum(r[2] for r in rows)
    stats = engine.make_stats()
    print(
        f"TTFT p50 {percentile(ttfts, 50):.0f} ms, p99 {percentile(ttfts, 99):.0f} ms; "
        f"TPOT p50 {percentile(tpots, 50):.1f} ms, p99 {percentile(tpots, 99):.1f} ms; "
        f"{num_out} output tokens in {wall_s:.1f} s = {num_out / wall_s:.1f} tok/s aggregate over "
        f"{engine.num_steps} steps; preemptions {stats.num_preemptions_total}"
    )
    return 0
