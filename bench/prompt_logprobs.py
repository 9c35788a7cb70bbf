"""What prompt logprobs cost: ``zoo bench prompt-logprobs [--json] [--quick]``.

The real model (SmolLM2, torch runner, fp32), one engine, a 512-token step budget. For each prompt length, requests of
one output token (lm-evaluation-harness's loglikelihood request: ``echo`` + ``logprobs`` asks the node for
``prompt_logprobs``) are run one at a time, with ``prompt_logprobs`` = None, 0 and 5 in turn (rounds alternated, a
fresh prompt every request, so no prefix cache serves any of them): milliseconds per request, median over the
rounds, and the ratio to None. Then ``batch``: 8 such requests at once (64-token prompts, batched in one prefill step),
scored and not, alternated: requests per second. The extra work is the output head over every prompt row (49,152 x
576 multiply-adds each) and the log-softmax; the prefix cache is skipped by design (engine/prompt_logprobs.py).
"""

from __future__ import annotations

import statistics
import time

from bench.workload import synthetic_prompt_ids
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

SETTINGS = (None, 0, 5)


def make_engine(model=None, checkpoint=None) -> LLMEngine:
    """The bench's engine over SmolLM2 (``model`` and ``checkpoint`` when the caller has them loaded)."""
    from backends.checkpoint import load_checkpoint
    from backends.torch import TorchModelRunner, build_model

    checkpoint = checkpoint or load_checkpoint()
    runner = TorchModelRunner(model or build_model(checkpoint, "float32", progress=False), progress=False)
    config = SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, max_model_len=2048)
    return LLMEngine(runner, checkpoint.tokenizer, config, CacheConfig(block_size=16, num_device_blocks=512))


def _run(engine: LLMEngine, prompts: list[list[int]], prompt_logprobs: int | None) -> float:
    """Wall seconds to run ``prompts`` (one output token each) to completion, all queued at once."""
    params = SamplingParams(max_tokens=1, temperature=0, prompt_logprobs=prompt_logprobs)
    t0 = time.perf_counter()
    for prompt in prompts:
        engine.add_request(prompt, params)
    scored = 0
    while engine.has_unfinished_requests():
        scored += sum(out.prompt_logprobs is not None for out in engine.step())
    assert scored == (len(prompts) if prompt_logprobs is not None else 0)
    return time.perf_counter() - t0


def bench_prompt_logprobs(lengths: tuple[int, ...], rounds: int, engine: LLMEngine | None = None) -> dict:
    engine = engine or make_engine()
    vocab = engine.tokenizer.vocab_size
    seed = iter(range(1_000_000))
    _run(engine, [synthetic_prompt_ids(32, vocab, seed=next(seed))], 0)  # warm up
    singles = []
    for length in lengths:
        times: dict[int | None, list[float]] = {k: [] for k in SETTINGS}
        for _ in range(rounds):
            for k in SETTINGS:
                times[k].append(_run(engine, [synthetic_prompt_ids(length, vocab, seed=next(seed))], k))
        ms = {k: 1e3 * statistics.median(v) for k, v in times.items()}
        singles.append(
            {
                "prompt_tokens": length,
                "ms_plain": round(ms[None], 2),
                "ms_prompt_logprobs_0": round(ms[0], 2),
                "ms_prompt_logprobs_5": round(ms[5], 2),
                "x_plain_0": round(ms[0] / ms[None], 3),
                "x_plain_5": round(ms[5] / ms[None], 3),
            }
        )
    batch_s: dict[int | None, list[float]] = {None: [], 1: []}
    for _ in range(rounds):
        for k in batch_s:
            batch_s[k].append(_run(engine, [synthetic_prompt_ids(64, vocab, seed=next(seed)) for _ in range(8)], k))
    rps = {k: 8 / statistics.median(v) for k, v in batch_s.items()}
    return {
        "what": "SmolLM2-135M fp32, torch runner; one output token per request; fresh prompts (no prefix cache)",
        "rounds": rounds,
        "single": singles,
        "batch": {
            "requests": 8,
            "prompt_tokens": 64,
            "rps_plain": round(rps[None], 2),
            "rps_prompt_logprobs_1": round(rps[1], 2),
            "x_plain": round(rps[None] / rps[1], 3),
        },
    }


def run_prompt_logprobs_bench(args) -> dict:
    quick = getattr(args, "quick", False)
    report = bench_prompt_logprobs((128,) if quick else (128, 512), 3 if quick else 7)
    if not getattr(args, "json", False):
        print(
            "{:>7s} {:>10s} {:>10s} {:>10s} {:>8s} {:>8s}".format(
                "prompt", "plain ms", "pl=0 ms", "pl=5 ms", "x0", "x5"
            )
        )
        for s in report["single"]:
            print(
                f"{s['prompt_tokens']:7d} {s['ms_plain']:10.1f} {s['ms_prompt_logprobs_0']:10.1f} "
                f"{s['ms_prompt_logprobs_5']:10.1f} {s['x_plain_0']:8.3f} {s['x_plain_5']:8.3f}"
            )
        b = report["batch"]
        print(
            f"batch of {b['requests']} x {b['prompt_tokens']} tokens: {b['rps_plain']:.1f} req/s plain, "
            f"{b['rps_prompt_logprobs_1']:.1f} req/s scored (x{b['x_plain']:.2f} time)"
        )
    return report
