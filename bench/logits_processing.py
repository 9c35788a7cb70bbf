"""What logits processing costs a sampling step: ``zoo bench logits [--json] [--quick]``.

Per batch size B (1, 8, 32 rows; SmolLM2's vocabulary, 49,152 ids; fp32 logits peaked as a language model's are,
a token of rank r at probability ~ r^-2 in a random order per row, so the top-256 candidates hold the top-p nucleus;
the same logits in every case), the torch and JAX samplers' time per step (median of ``repeats`` after a warm-up),
each case beside the plain one in the same run:

    plain        temperature 0.8, top_p 0.95
    penalties    the same, plus frequency 0.5, presence 0.3, repetition 1.1 (a 512-token prompt, 256 tokens out)
    bias         the same as plain, plus a logit_bias of 50 ids
    min_p        the same as plain, plus min_p 0.05

``plan_us``: the Python side alone (LogitsAdjuster.plan over the batch, one new token per row since the last step,
as in decode), included in the penalties and bias times. A decode step of the real model on this host takes tens of
milliseconds (``zoo bench step``), so these figures are to be read against that.
"""

from __future__ import annotations

import statistics
import time
from functools import partial

import numpy as np

from backends.logits_adjust import LogitsAdjuster
from backends.runner_driver import sampled_step
from backends.sample_slots import SampleSlot
from engine.request import Request
from engine.sampling_params import SamplingParams

VOCAB = 49_152
PROMPT_TOKENS = 512
OUTPUT_TOKENS = 256
CASES = {
    "plain": {},
    "penalties": {"frequency_penalty": 0.5, "presence_penalty": 0.3, "repetition_penalty": 1.1},
    "bias": {"logit_bias": {i * 97: 5.0 for i in range(50)}},
    "min_p": {"min_p": 0.05},
}


def _batch(num_rows: int, fields: dict, rng: np.random.Generator) -> list[Request]:
    params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=4096, **fields)
    requests = []
    for i in range(num_rows):
        r = Request(f"r{i}", rng.integers(0, VOCAB, PROMPT_TOKENS).tolist(), params, 0.0, eos_token_id=2)
        r.append_output_token_ids(rng.integers(0, VOCAB, OUTPUT_TOKENS).tolist())
        requests.append(r)
    return requests


def _slots(requests: list[Request]) -> list[SampleSlot]:
    return [SampleSlot(sampled_step(r), i, 1) for i, r in enumerate(requests)]


def _time_steps(sample, requests: list[Request], repeats: int, rng: np.random.Generator) -> tuple[float, float]:
    """Median wall time of one step (the plan, then the sampler) and of the plan alone, in µs; each step appends one
    token to every request first, as decode does."""
    adjuster = LogitsAdjuster()
    step_us, plan_us = [], []
    for k in range(repeats + 3):
        for r in requests:
            r.append_output_token_ids(int(rng.integers(0, VOCAB)))
        slots = _slots(requests)
        t0 = time.perf_counter()
        plan = adjuster.plan(slots, VOCAB)
        t1 = time.perf_counter()
        sample(plan)
        t2 = time.perf_counter()
        if k >= 3:
            step_us.append((t2 - t0) * 1e6)
            plan_us.append((t1 - t0) * 1e6)
    return statistics.median(step_us), statistics.median(plan_us)


def bench_logits_processing(batch_sizes=(1, 8, 32), repeats: int = 20, seed: int = 0) -> dict:
    import jax.numpy as jnp
    import torch

    from backends.jax.sampler import Sampler as JaxSampler
    from backends.torch.sampler import Sampler as TorchSampler

    rng = np.random.default_rng(seed)
    report: dict = {"vocab": VOCAB, "prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS, "repeats": repeats}
    rows = []
    for num_rows in batch_sizes:
        ranks = np.argsort(rng.random((num_rows, VOCAB)), axis=1)  # a random order of the ranks per row
        logits_np = (-2.0 * np.log1p(ranks)).astype(np.float32)
        logits_t, logits_j = torch.from_numpy(logits_np), jnp.asarray(logits_np)
        warm = [SamplingParams(temperature=0.8, top_p=0.95, min_p=0.01)] * num_rows
        for _ in range(10):  # the first calls pay for thread pools and compilation, in every case alike
            TorchSampler(torch.device("cpu")).sample(logits_t, [f"w{i}" for i in range(num_rows)], warm)
            JaxSampler().sample(logits_j, list(range(num_rows)), [f"w{i}" for i in range(num_rows)], warm)
        for name, fields in CASES.items():
            requests = _batch(num_rows, fields, rng)
            ids = [r.req_id for r in requests]
            params = [r.sampling_params for r in requests]
            torch_step = partial(TorchSampler(torch.device("cpu")).sample, logits_t, ids, params)
            jax_step = partial(JaxSampler().sample, logits_j, list(range(num_rows)), ids, params)
            torch_us, plan_us = _time_steps(torch_step, requests, repeats, rng)
            jax_us, _ = _time_steps(jax_step, requests, repeats, rng)
            rows.append({"rows": num_rows, "case": name, "torch_us": torch_us, "jax_us": jax_us, "plan_us": plan_us})
    plain = {(r["rows"]): r for r in rows if r["case"] == "plain"}
    for r in rows:
        r["torch_over_plain"] = r["torch_us"] / plain[r["rows"]]["torch_us"]
        r["jax_over_plain"] = r["jax_us"] / plain[r["rows"]]["jax_us"]
    report["cases"] = rows
    return report


def run_logits_bench(args) -> dict:
    """``zoo bench logits``: batches of 1, 8 and 32 rows (``--quick``: 1 and 8, fewer repeats)."""
    quick = getattr(args, "quick", False)
    report = bench_logits_processing((1, 8) if quick else (1, 8, 32), 5 if quick else 20)
    if not getattr(args, "json", False):
        head = ("rows", "case", "torch us", "x plain", "jax us", "x plain", "plan us")
        print("{:>4s} {:10s} {:>9s} {:>8s} {:>9s} {:>8s} {:>8s}".format(*head))
        for r in report["cases"]:
            print(
                f"{r['rows']:4d} {r['case']:10s} {r['torch_us']:9.0f} {r['torch_over_plain']:8.2f} "
                f"{r['jax_us']:9.0f} {r['jax_over_plain']:8.2f} {r['plan_us']:8.0f}"
            )
    return report
