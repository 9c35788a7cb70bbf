"""What structured outputs cost: ``zoo bench structured [--json] [--quick]``.

On SmolLM2's tokenizer (49,152 tokens; the checkpoint's tokenizer, no model weights), for each constraint kind:

    compile_ms       building the request's matcher (LLGuidanceCompiler.compile), median of ``repeats``
    mask_us          one step's ban (LLGuidanceGrammar.banned: llguidance's bitmask, unpacked to V booleans), median
                     and p99 over every step of walking a valid output token by token (its text tokenized as the
                     model would write it), ``advance_us`` the grammar consuming that step's token
    tokenizer_s      llguidance's token trie for the vocabulary, built once per node at its first constrained request

and, per batch of B rows (1, 8, 32) every one of them constrained by the JSON schema and one token further along its
document at each step, the torch sampler's step (the plan, then the sampler; temperature 0.8, top_p 0.95) beside the
same batch unconstrained, in the same run: ``torch_over_plain``. The logits are those of ``zoo bench logits`` (peaked as
a language model's).

``engine`` (not with ``--quick``): the real model (SmolLM2, torch runner, fp32) decoding a batch of 4 greedy requests,
each constrained by a regex no 32 tokens can complete (``[a-z ,.]{400}``: the grammar never ends them early), beside
the same batch unconstrained (``ignore_eos``), rounds alternated: milliseconds per decode step and their ratio; and
``forced_drafts``: one greedy request per constraint of FORCED_CASES, run with the grammar's forced tokens proposed as
drafts (engine/spec/grammar_drafts.py) and without, alternated: engine steps, wall seconds, and whether the outputs
are the same.
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np

from backends.grammar import LLGuidanceCompiler
from backends.logits_adjust import LogitsAdjuster
from backends.runner_driver import sampled_step
from backends.sample_slots import SampleSlot
from engine.request import Request
from engine.sampling_params import SamplingParams
from engine.spec.grammar_drafts import MAX_FORCED_DRAFTS
from engine.structured_output import StructuredOutput

SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 40},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "email": {"type": "string", "pattern": "^[a-z]+@[a-z]+\\.[a-z]{2,3}$"},
        "tags": {"type": "array", "items": {"type": "string", "enum": ["red", "green", "blue"]}, "maxItems": 5},
        "address": {
            "type": "object",
            "properties": {"city": {"type": "string"}, "zip": {"type": "string", "pattern": "^[0-9]{5}$"}},
            "required": ["city", "zip"],
        },
    },
    "required": ["name", "age", "email", "tags", "address"],
    "additionalProperties": False,
}
DOCUMENT = {
    "name": "Ada Lovelace",
    "age": 36,
    "email": "ada@engine.uk",
    "tags": ["red", "blue"],
    "address": {"city": "London", "zip": "12345"},
}
KINDS = {
    "json_schema": (StructuredOutput(json=json.dumps(SCHEMA)), json.dumps(DOCUMENT)),
    "json_object": (StructuredOutput(json_object=True), json.dumps(DOCUMENT, indent=2)),
    "regex": (StructuredOutput(regex=r"[0-9]{3}-[0-9]{3}-[0-9]{4}"), "555-867-5309"),
    "choice": (StructuredOutput(choice=tuple(f"label_{i}" for i in range(50))), "label_42"),
}


def _walk(compiler: LLGuidanceCompiler, spec: StructuredOutput, tokens: list[int], vocab: int) -> dict:
    mask_us, advance_us = [], []
    grammar = compiler.compile(spec)
    for token in tokens:
        t0 = time.perf_counter()
        banned = grammar.banned(vocab)
        t1 = time.perf_counter()
        if banned[token]:
            raise RuntimeError(f"the document's token {token} is not allowed by {spec.describe()}")
        grammar.advance([token])
        t2 = time.perf_counter()
        mask_us.append((t1 - t0) * 1e6)
        advance_us.append((t2 - t1) * 1e6)
    return {
        "steps": len(tokens),
        "mask_us_p50": statistics.median(mask_us),
        "mask_us_p99": float(np.percentile(mask_us, 99)),
        "advance_us_p50": statistics.median(advance_us),
    }


def _sampler_steps(tokenizer, compiler, num_rows: int, repeats: int, rng: np.random.Generator) -> dict:
    """The torch sampler's step over ``num_rows`` rows, unconstrained and constrained, alternated step by step (so a
    neighbour's load falls on both alike); median µs of each after 3 warm-up steps."""
    import torch

    from backends.torch.sampler import Sampler as TorchSampler

    vocab = tokenizer.vocab_size
    spec, text = KINDS["json_schema"]
    document = tokenizer.encode(text)
    ranks = np.argsort(rng.random((num_rows, vocab)), axis=1)
    logits = torch.from_numpy((-2.0 * np.log1p(ranks)).astype(np.float32))
    cases = {}
    for case, constrained in (("plain", False), ("json_schema", True)):
        params = SamplingParams(
            temperature=0.8, top_p=0.95, max_tokens=4096, structured_outputs=spec if constrained else None
        )
        requests = []
        for i in range(num_rows):
            grammar = compiler.compile(spec) if constrained else None
            requests.append(Request(f"r{i}", [1, 2, 3], params, 0.0, tokenizer.eos_token_id, grammar=grammar))
        cases[case] = (requests, TorchSampler(torch.device("cpu")), LogitsAdjuster(), [])
    for step in range(min(repeats + 3, len(document) - 1)):
        for requests, sampler, adjuster, times in cases.values():
            ids, plist = [r.req_id for r in requests], [r.sampling_params for r in requests]
            slots = [SampleSlot(sampled_step(r), i, 1) for i, r in enumerate(requests)]
            t0 = time.perf_counter()
            plan = adjuster.plan(slots, vocab)
            sampler.sample(logits, ids, plist, plan)
            times.append((time.perf_counter() - t0) * 1e6)
            for r in requests:  # each row one token further along the document, as its grammar expects
                r.append_output_token_ids(document[step])
    plain_us, constrained_us = (statistics.median(cases[c][3][3:]) for c in ("plain", "json_schema"))
    return {"rows": num_rows, "plain_us": plain_us, "json_schema_us": constrained_us,
            "torch_over_plain": constrained_us / plain_us}  # fmt: skip


FORCED_SCHEMA = {
    "type": "object",
    "properties": {
        "capital_city": {"enum": ["Paris", "London", "Rome"]},
        "country_name": {"type": "string", "maxLength": 12},
    },
    "required": ["capital_city", "country_name"],
    "additionalProperties": False,
}
FORCED_CASES = {
    "json_schema": (
        "What is the capital of France? Answer in JSON.",
        StructuredOutput(json=json.dumps(FORCED_SCHEMA)),
        48,
    ),
    "regex": ("Give me an order id.", StructuredOutput(regex=r"ORDER-[0-9]{4}-DONE"), 16),
    "choice": ("Is 'I love it' positive?", StructuredOutput(choice=("positive_sentiment", "negative_sentiment")), 16),
}


def _real_engine(checkpoint, compiler, num_rows: int):
    from backends.torch import TorchModelRunner
    from engine.config import CacheConfig, SchedulerConfig
    from engine.llm_engine import LLMEngine

    return LLMEngine(
        TorchModelRunner(checkpoint, progress=False),
        checkpoint.tokenizer,
        SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=num_rows, max_model_len=1024),
        CacheConfig(block_size=16, num_device_blocks=64 * num_rows, num_host_blocks=0),
        grammars=compiler,
    )


def _forced_draft_steps(engine, rounds: int = 2) -> list[dict]:
    """Per FORCED_CASES constraint: engine steps and wall seconds of one greedy request with forced drafts and
    without, alternated, and whether the outputs are the same."""
    tok, rows = engine.tokenizer, []
    for name, (question, spec, max_tokens) in FORCED_CASES.items():
        prompt = tok.encode(tok.apply_chat_template([{"role": "user", "content": question}]))
        params = SamplingParams(temperature=0, max_tokens=max_tokens, structured_outputs=spec)
        runs: dict[int, list] = {0: [], MAX_FORCED_DRAFTS: []}
        for _ in range(rounds):
            for forced in runs:
                engine.forced_drafts = forced
                steps, t0 = engine.num_steps, time.perf_counter()
                out = engine.generate([prompt], params)[0]
                runs[forced].append((engine.num_steps - steps, time.perf_counter() - t0, out.text))
        engine.forced_drafts = MAX_FORCED_DRAFTS
        plain, forced = runs[0], runs[MAX_FORCED_DRAFTS]
        rows.append({
            "kind": name, "output": forced[0][2], "same_output": plain[0][2] == forced[0][2],
            "steps_plain": plain[0][0], "steps_forced": forced[0][0],
            "wall_s_plain": statistics.median(r[1] for r in plain),
            "wall_s_forced": statistics.median(r[1] for r in forced),
        })  # fmt: skip
    return rows


def _engine_steps(engine, num_rows: int = 4, num_tokens: int = 32, rounds: int = 2) -> dict:
    """ms per decode step of the real model, constrained and not, rounds alternated (module docstring)."""
    tok = engine.tokenizer
    prompts = [tok.encode(tok.apply_chat_template([{"role": "user", "content": f"Write line {i} of a poem."}]))
               for i in range(num_rows)]  # fmt: skip
    cases = {
        "plain": SamplingParams(temperature=0, max_tokens=num_tokens, ignore_eos=True),
        "regex": SamplingParams(
            temperature=0, max_tokens=num_tokens, structured_outputs=StructuredOutput(regex="[a-z ,.]{400}")
        ),
    }
    step_ms: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(rounds):
        for name, params in cases.items():
            for p in prompts:
                engine.add_request(p, params)
            engine.step()  # the prefill step: not a decode step
            t0, steps = time.perf_counter(), 0
            while engine.has_unfinished_requests():
                engine.step()
                steps += 1
            step_ms[name].append((time.perf_counter() - t0) * 1e3 / max(1, steps))
    plain, regex = (statistics.median(step_ms[c]) for c in cases)
    return {"rows": num_rows, "tokens": num_tokens, "plain_step_ms": plain, "regex_step_ms": regex,
            "regex_over_plain": regex / plain}  # fmt: skip


def bench_structured_outputs(batch_sizes=(1, 8, 32), repeats: int = 20, seed: int = 0, engine: bool = True) -> dict:
    from backends.checkpoint import load_checkpoint

    checkpoint = load_checkpoint()
    tokenizer = checkpoint.tokenizer
    vocab = checkpoint.config.vocab_size
    t0 = time.perf_counter()
    compiler = LLGuidanceCompiler(tokenizer, vocab)
    compiler.compile(StructuredOutput(json_object=True))  # builds the token trie
    report: dict = {"vocab": vocab, "tokenizer_s": time.perf_counter() - t0, "repeats": repeats, "kinds": []}
    for name, (spec, text) in KINDS.items():
        compile_ms = []
        for _ in range(repeats):
            t = time.perf_counter()
            compiler.compile(spec)
            compile_ms.append((time.perf_counter() - t) * 1e3)
        row = {"kind": name, "compile_ms": statistics.median(compile_ms)}
        row.update(_walk(compiler, spec, tokenizer.encode(text), vocab))
        report["kinds"].append(row)
    rng = np.random.default_rng(seed)
    report["sampler"] = [_sampler_steps(tokenizer, compiler, b, repeats, rng) for b in batch_sizes]
    if engine:
        real = _real_engine(checkpoint, compiler, num_rows=4)
        report["engine"] = _engine_steps(real)
        report["forced_drafts"] = _forced_draft_steps(real)
    return report


def run_structured_bench(args) -> dict:
    """``zoo bench structured``: batches of 1, 8 and 32 rows (``--quick``: 1 and 8, fewer repeats)."""
    quick = getattr(args, "quick", False)
    report = bench_structured_outputs((1, 8) if quick else (1, 8, 32), 5 if quick else 20, engine=not quick)
    if not getattr(args, "json", False):
        print(f"llguidance token trie for {report['vocab']} tokens: {report['tokenizer_s']:.2f} s")
        print(
            "{:12s} {:>10s} {:>6s} {:>10s} {:>10s} {:>11s}".format(
                "kind", "compile ms", "steps", "mask us", "p99", "advance us"
            )
        )
        for k in report["kinds"]:
            print(
                f"{k['kind']:12s} {k['compile_ms']:10.2f} {k['steps']:6d} {k['mask_us_p50']:10.0f} "
                f"{k['mask_us_p99']:10.0f} {k['advance_us_p50']:11.0f}"
            )
        print("{:>4s} {:>10s} {:>14s} {:>8s}".format("rows", "plain us", "json_schema us", "x plain"))
        for s in report["sampler"]:
            print(f"{s['rows']:4d} {s['plain_us']:10.0f} {s['json_schema_us']:14.0f} {s['torch_over_plain']:8.2f}")
        if "engine" in report:
            e = report["engine"]
            print(
                f"real model, {e['rows']} rows x {e['tokens']} tokens: a step {e['plain_step_ms']:.1f} ms plain, "
                f"{e['regex_step_ms']:.1f} ms constrained (x{e['regex_over_plain']:.2f})"
            )
            for f in report["forced_drafts"]:
                print(
                    f"forced drafts, {f['kind']}: {f['steps_plain']} -> {f['steps_forced']} steps, "
                    f"{f['wall_s_plain']:.2f} -> {f['wall_s_forced']:.2f} s, same output: {f['same_output']}"
                )
    return report
