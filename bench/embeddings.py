"""What an embedding costs, beside its baseline: ``zoo bench embeddings [--json] [--quick]``.

The real model (SmolLM2, fp32, on the CPU) in one run, rounds alternated, fresh prompts every round (no prefix cache
serves any of them). For each shape (inputs x prompt tokens):

    engine embed      the inputs queued at once as embedding requests (``SamplingParams.embed``: vLLM's LAST pooling,
                      normalised; engine/embeddings.py), batched by the scheduler: inputs per second
    engine 1 token    the same inputs as one-token completions (no vector): what the embedding itself adds
    transformers      the baseline a team without this engine would serve embeddings with: the inputs padded into
                      one batch through transformers' LlamaModel (the base model, no output head, as
                      sentence-transformers runs a decoder), the last real token's hidden state normalised

The vectors of the engine and of transformers are compared in the same run (the lowest cosine of any input).
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

from bench.workload import synthetic_prompt_ids
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

EMBED = SamplingParams(max_tokens=1, temperature=0, embed=True)
ONE_TOKEN = SamplingParams(max_tokens=1, temperature=0)


def make_engine(model, checkpoint) -> LLMEngine:
    from backends.torch import TorchModelRunner

    runner = TorchModelRunner(model, progress=False)
    config = SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=64, max_model_len=2048)
    return LLMEngine(runner, checkpoint.tokenizer, config, CacheConfig(block_size=16, num_device_blocks=1024))


def _engine_run(engine: LLMEngine, prompts: list[list[int]], params: SamplingParams) -> tuple[float, list]:
    """(wall seconds, the vectors) to run ``prompts`` to completion, all queued at once."""
    t0 = time.perf_counter()
    ids = [engine.add_request(p, params) for p in prompts]
    vectors: dict[str, list[float]] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.embedding is not None:
                vectors[out.req_id] = out.embedding
    seconds = time.perf_counter() - t0
    return seconds, [vectors.get(i) for i in ids]


def _hf_run(hf, prompts: list[list[int]]) -> tuple[float, list]:
    """(wall seconds, the vectors) of the prompts as one right-padded batch through transformers' base model."""
    import torch

    t0 = time.perf_counter()
    width = max(len(p) for p in prompts)
    ids = torch.zeros(len(prompts), width, dtype=torch.long)
    mask = torch.zeros(len(prompts), width, dtype=torch.long)
    for i, p in enumerate(prompts):
        ids[i, : len(p)] = torch.tensor(p)
        mask[i, : len(p)] = 1
    with torch.inference_mode():
        hidden = hf.model(input_ids=ids, attention_mask=mask).last_hidden_state
        last = hidden[torch.arange(len(prompts)), mask.sum(1) - 1].float()
        vectors = torch.nn.functional.normalize(last, dim=1)
    return time.perf_counter() - t0, vectors.tolist()


def _lowest_cosine(ours: list, theirs: list) -> float:
    return min(sum(a * b for a, b in zip(u, v)) for u, v in zip(ours, theirs))


def bench_embeddings(shapes: tuple[tuple[int, int], ...], rounds: int) -> dict:
    import torch

    from backends.checkpoint import load_checkpoint
    from backends.torch import build_model
    from bench.hf_reference import load_hf_reference

    checkpoint = load_checkpoint()
    engine = make_engine(build_model(checkpoint, "float32", progress=False), checkpoint)
    hf = load_hf_reference(Path(checkpoint.path))
    vocab = engine.tokenizer.vocab_size
    seed = iter(range(1_000_000))
    fresh = lambda n, length: [synthetic_prompt_ids(length, vocab, seed=next(seed)) for _ in range(n)]  # noqa: E731
    _engine_run(engine, fresh(4, 32), EMBED)  # warm up both
    _hf_run(hf, fresh(4, 32))
    results = []
    for n, length in shapes:
        seconds: dict[str, list[float]] = {"embed": [], "one_token": [], "transformers": []}
        lowest = 1.0
        for _ in range(rounds):
            prompts = fresh(n, length)
            t_embed, ours = _engine_run(engine, prompts, EMBED)
            t_hf, theirs = _hf_run(hf, prompts)
            t_one, _ = _engine_run(engine, fresh(n, length), ONE_TOKEN)
            seconds["embed"].append(t_embed)
            seconds["transformers"].append(t_hf)
            seconds["one_token"].append(t_one)
            lowest = min(lowest, _lowest_cosine(ours, theirs))
        per_s = {k: n / statistics.median(v) for k, v in seconds.items()}
        results.append(
            {
                "inputs": n,
                "prompt_tokens": length,
                "inputs_per_s_engine_embed": round(per_s["embed"], 2),
                "inputs_per_s_engine_one_token": round(per_s["one_token"], 2),
                "inputs_per_s_transformers": round(per_s["transformers"], 2),
                "x_engine_over_transformers": round(per_s["embed"] / per_s["transformers"], 3),
                "x_embed_time_over_one_token": round(per_s["one_token"] / per_s["embed"], 3),
                "lowest_cosine_engine_vs_transformers": round(lowest, 6),
            }
        )
    return {
        "what": "SmolLM2-135M fp32 on the CPU, torch runner vs transformers' LlamaModel; fresh prompts every round",
        "torch_threads": torch.get_num_threads(),
        "rounds": rounds,
        "shapes": results,
    }


def run_embeddings_bench(args) -> dict:
    quick = getattr(args, "quick", False)
    report = bench_embeddings(((8, 64),) if quick else ((32, 64), (8, 256), (1, 512)), 3 if quick else 5)
    if not getattr(args, "json", False):
        print(
            f"{'inputs':>6s} {'tokens':>6s} {'embed/s':>9s} {'1-tok/s':>9s} {'hf/s':>9s} {'x hf':>7s} {'cos min':>9s}"
        )
        for s in report["shapes"]:
            print(
                f"{s['inputs']:6d} {s['prompt_tokens']:6d} {s['inputs_per_s_engine_embed']:9.1f} "
                f"{s['inputs_per_s_engine_one_token']:9.1f} {s['inputs_per_s_transformers']:9.1f} "
                f"{s['x_engine_over_transformers']:7.2f} {s['lowest_cosine_engine_vs_transformers']:9.6f}"
            )
    return report
