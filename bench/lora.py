"""`zoo bench lora`: batched multi-LoRA decode against the base model, same engine, same process, same run.

A batch of 32 requests decodes on the base model and spread over 1, 8 and 32 distinct random rank-16
adapters (every projection targeted: q/k/v/o/gate/up/down, the heaviest case). Each case's steps alternate
with the base model's, one by one, so drift on a shared machine hits both alike; figures are medians over
rounds.

Definitions:
- decode tok/s: tokens sampled in steps that held only the 32 decodes / the runner time of those steps.
- ratio_vs_base: a case's decode tok/s / the base model's (a runner without LoRA, same weights, same
  prompts), their steps alternating one by one; the median over rounds.
- adapter load: disk -> host RAM (read, checked: ``add_lora``) per adapter, and host -> device slot
  (the copy into the slot tensors, timed by the runner) per load.
- swapping: 32 requests over 32 adapters through 8 device slots (the scheduler admits at most 8 adapters
  at a time, slots are evicted LRU as requests finish) against the same 32 requests on the base model,
  steps alternating: output tokens / runner time of all steps (prefills and slot loads included).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

BATCH = 32
RANK = 16
PROMPT_TOKENS = 24
CASES = (0, 1, 8, 32)  # distinct adapters in the batch; 0 = the base model (measured beside each case)


def run_lora_bench(args: argparse.Namespace) -> dict:
    import torch

    from backends.checkpoint import default_model_path, load_checkpoint
    from backends.checkpoint.peft_writer import random_peft_adapter
    from backends.torch import build_model
    from engine.lora import LoraConfig, LoraRequest

    if getattr(args, "num_threads", None):
        torch.set_num_threads(args.num_threads)
    device = getattr(args, "device", None) or "cpu"
    quick = bool(getattr(args, "quick", False))
    rounds, decode_steps = (2, 4) if quick else (3, 8)
    checkpoint = load_checkpoint(getattr(args, "model", None) or default_model_path())
    model = build_model(checkpoint, "float32", device, progress=False)
    report: dict = {
        "model": checkpoint.config.name,
        "device": device,
        "threads": torch.get_num_threads(),
        "batch": BATCH,
        "rank": RANK,
        "target_modules": "q,k,v,o,gate,up,down",
        "rounds": rounds,
        "decode_steps_per_round": decode_steps,
    }
    with tempfile.TemporaryDirectory(prefix="zoo-lora-bench-") as tmp:
        paths = [
            random_peft_adapter(Path(tmp) / f"a{i}", checkpoint.config, rank=RANK, seed=i) for i in range(max(CASES))
        ]
        loras = [LoraRequest(f"adapter-{i}", str(p)) for i, p in enumerate(paths)]
        engine = _engine(model, checkpoint.tokenizer, LoraConfig(max_loras=max(CASES), max_lora_rank=RANK), device)
        t0 = time.perf_counter()
        for lora in loras:
            engine.add_lora(lora)
        report["adapter_mb"] = round(engine.runner.lora_slots.store.host_adapter(loras[0].lora_id).num_bytes / 2**20, 2)
        report["adapter_disk_to_host_ms"] = round(1e3 * (time.perf_counter() - t0) / len(loras), 2)
        print(f"{len(loras)} adapters read in {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)

        base_engine = _engine(model, checkpoint.tokenizer, None, device)
        base: list[float] = []
        cases = []
        for n in CASES[1:]:
            lora_tok_s, base_tok_s, ratios = [], [], []
            for round_index in range(rounds):
                names = [loras[i % n].name for i in range(BATCH)]
                got, ref = _paired_decode_tok_s(engine, base_engine, names, decode_steps, seed=round_index)
                lora_tok_s.append(got)
                base_tok_s.append(ref)
                ratios.append(got / ref)
                print(
                    f"{n} adapters, round {round_index}: {got:.1f} vs base {ref:.1f} tok/s", file=sys.stderr, flush=True
                )
            base += base_tok_s
            cases.append(
                {
                    "num_adapters": n,
                    "decode_tok_s": round(statistics.median(lora_tok_s), 1),
                    "base_decode_tok_s": round(statistics.median(base_tok_s), 1),
                    "ratio_vs_base": round(statistics.median(ratios), 3),
                }
            )
        stats = engine.runner.lora_stats()
        report["adapter_host_to_device_ms"] = round(1e3 * stats.load_time_s_total / max(stats.num_loads_total, 1), 2)
        report["base_decode_tok_s"] = round(statistics.median(base), 1)
        report["cases"] = cases
        report["swapping"] = _swapping(model, checkpoint.tokenizer, loras, device)
    return report


def _engine(model, tokenizer, lora_config, device):
    from backends.torch import TorchModelRunner
    from engine.config import CacheConfig, SchedulerConfig
    from engine.llm_engine import LLMEngine

    runner = TorchModelRunner(model, device=device, progress=False, lora_config=lora_config)
    return LLMEngine(
        runner,
        tokenizer,
        SchedulerConfig(max_num_batched_tokens=1024, max_num_seqs=BATCH, max_model_len=512),
        CacheConfig(block_size=16, num_device_blocks=BATCH * 8, num_host_blocks=0, enable_prefix_caching=False),
    )


def _paired_decode_tok_s(engine, base_engine, lora_names: list[str], decode_steps: int, seed: int):
    """The same BATCH prompts on ``engine`` with these adapters and on ``base_engine`` (no LoRA at all),
    prefilled, then decoded step by step in alternation, so drift on a shared machine hits both alike.
    Returns (LoRA decode tok/s, base decode tok/s): tokens of pure-decode steps / their runner time."""
    from bench.workload import synthetic_prompt_ids
    from engine.sampling_params import SamplingParams

    params = SamplingParams(temperature=0, max_tokens=decode_steps + 2, ignore_eos=True)
    vocab = engine.tokenizer.vocab_size
    for i, name in enumerate(lora_names):
        prompt = synthetic_prompt_ids(PROMPT_TOKENS, vocab, seed * 1000 + i)
        engine.add_request(prompt, params, lora_name=name)
        base_engine.add_request(prompt, params)
    for e in (engine, base_engine):
        e.take_step_records()
    while engine.has_unfinished_requests() or base_engine.has_unfinished_requests():
        for e in (engine, base_engine):
            if e.has_unfinished_requests():
                e.step()

    def tok_s(e) -> float:
        steps = [r for r in e.take_step_records() if r.num_decode_requests == BATCH and r.num_prefill_tokens == 0]
        return sum(r.num_decode_requests for r in steps) / sum(r.step_time_s for r in steps)

    return tok_s(engine), tok_s(base_engine)


def _swapping(model, tokenizer, loras, device) -> dict:
    """32 requests over 32 adapters through 8 slots vs the same requests on the base model, steps alternating;
    output tok/s = all output tokens / the runner time of all steps (prefills and slot loads included)."""
    from bench.workload import synthetic_prompt_ids
    from engine.lora import LoraConfig
    from engine.sampling_params import SamplingParams

    engine = _engine(model, tokenizer, LoraConfig(max_loras=8, max_lora_rank=RANK), device)
    base_engine = _engine(model, tokenizer, None, device)
    for lora in loras:
        engine.add_lora(lora)
    for i, lora in enumerate(loras[:BATCH]):
        max_tokens = 4 + 4 * (i % 4)  # staggered finishes free slots for the adapters waiting
        params = SamplingParams(temperature=0, max_tokens=max_tokens, ignore_eos=True)
        prompt = synthetic_prompt_ids(PROMPT_TOKENS, tokenizer.vocab_size, i)
        engine.add_request(prompt, params, lora_name=lora.name)
        base_engine.add_request(prompt, params)
    busy = {id(engine): 0.0, id(base_engine): 0.0}
    tokens = {id(engine): 0, id(base_engine): 0}
    while engine.has_unfinished_requests() or base_engine.has_unfinished_requests():
        for e in (engine, base_engine):
            if e.has_unfinished_requests():
                pending = e.start_step()
                if pending is not None:
                    busy[id(e)] += pending.step_time_s
                    tokens[id(e)] += sum(len(t) for t in pending.output.sampled_token_ids.values())
                    e.finish_step(pending)
    stats = engine.runner.lora_stats()
    lora_tok_s = tokens[id(engine)] / busy[id(engine)]
    base_tok_s = tokens[id(base_engine)] / busy[id(base_engine)]
    return {
        "num_adapters": len(loras[:BATCH]),
        "device_slots": 8,
        "adapters_output_tok_s": round(lora_tok_s, 1),
        "base_output_tok_s": round(base_tok_s, 1),
        "ratio_vs_base": round(lora_tok_s / base_tok_s, 3),
        "slot_loads": stats.num_loads_total,
        "slot_evictions": stats.num_evictions_total,
    }
