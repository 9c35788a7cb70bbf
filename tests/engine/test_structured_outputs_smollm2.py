"""Structured outputs on the real model (torch runner, fp32; llguidance compiles each constraint for SmolLM2's
tokenizer): the output follows its JSON schema, regex or choices, and stops once complete (backends/grammar.py)."""

from __future__ import annotations

import json
import re

import pytest

from backends.grammar import LLGuidanceCompiler
from backends.torch import TorchModelRunner
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from engine.structured_output import StructuredOutput

pytestmark = pytest.mark.slow

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 12},
        "population": {"type": "integer", "minimum": 0, "maximum": 99_999_999},
    },
    "required": ["city", "population"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def engine(smollm2_model, smollm2_checkpoint):
    tok = smollm2_checkpoint.tokenizer
    return LLMEngine(
        TorchModelRunner(smollm2_model, progress=False),
        tok,
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8, max_model_len=1024),
        CacheConfig(block_size=16, num_device_blocks=256, num_host_blocks=64),
        grammars=LLGuidanceCompiler(tok, smollm2_checkpoint.config.vocab_size),
    )


def _chat(engine, text: str) -> list[int]:
    tok = engine.tokenizer
    return tok.encode(tok.apply_chat_template([{"role": "user", "content": text}]))


def _run(engine, prompts, params_list, **kwargs) -> list[tuple[list[int], str, str]]:
    """Each request's (tokens, text, finish reason), run in one batch."""
    ids = [engine.add_request(p, params, **kwargs) for p, params in zip(prompts, params_list)]
    got = {i: ([], "", None) for i in ids}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens = got[out.req_id][0]
            got[out.req_id] = (tokens + out.new_token_ids, out.text, out.finish_reason)
    return [got[i] for i in ids]


def test_each_kind_of_constraint_holds_in_one_batch(engine):
    """A schema, a regex, choices (greedy and sampled) and any JSON object, batched with a plain request: each output
    follows its constraint and ends with EOS once complete; the plain request is untouched."""
    plain = SamplingParams(temperature=0, max_tokens=6)
    params = [
        SamplingParams(temperature=0, max_tokens=40, structured_outputs=StructuredOutput(json=json.dumps(SCHEMA))),
        SamplingParams(temperature=0, max_tokens=12, structured_outputs=StructuredOutput(regex=r"[0-9]{3}-[0-9]{4}")),
        SamplingParams(temperature=1, seed=7, max_tokens=8, structured_outputs=StructuredOutput(choice=("yes", "no"))),
        SamplingParams(temperature=0, max_tokens=60, structured_outputs=StructuredOutput(json_object=True)),
        plain,
    ]
    prompts = [
        _chat(engine, "What is the capital of France? Answer in JSON."),
        _chat(engine, "Give me a US phone number."),
        _chat(engine, "Is the sky blue? Answer yes or no."),
        _chat(engine, "Name a color in JSON."),
        _chat(engine, "Say hello."),
    ]
    (schema_out, regex_out, choice_out, object_out, plain_out) = _run(engine, prompts, params)
    alone = _run(engine, prompts[4:], [plain])[0]
    answer = json.loads(schema_out[1])
    assert set(answer) == {"city", "population"} and isinstance(answer["population"], int)
    assert len(answer["city"]) <= 12 and schema_out[2] == "stop"
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", regex_out[1]) and regex_out[2] == "stop"
    assert choice_out[1] in ("yes", "no") and choice_out[2] == "stop"
    assert isinstance(json.loads(object_out[1]), dict) and object_out[2] == "stop"
    assert plain_out[0] == alone[0]
    for tokens, _, _ in (schema_out, regex_out, choice_out, object_out):
        assert tokens[-1] == engine.tokenizer.eos_token_id


def test_without_a_constraint_the_model_does_not_answer_so(engine):
    """The same prompts unconstrained do not give these shapes (so the test above can fail)."""
    prompts = [_chat(engine, "Give me a US phone number."), _chat(engine, "Is the sky blue? Answer yes or no.")]
    outs = _run(engine, prompts, [SamplingParams(temperature=0, max_tokens=12)] * 2)
    assert not re.fullmatch(r"[0-9]{3}-[0-9]{4}", outs[0][1])
    assert outs[1][1] not in ("yes", "no")


def test_a_resumed_constrained_request_continues_as_it_would_have(engine):
    """Resumed after k tokens (the prompt extended by them, num_resumed_tokens = k), the grammar consumes them first:
    the continuation is the one it would have produced. Told nothing, its grammar starts afresh: another output."""
    spec = StructuredOutput(json=json.dumps(SCHEMA))
    prompt = _chat(engine, "What is the capital of France? Answer in JSON.")
    ((whole, _, _),) = _run(engine, [prompt], [SamplingParams(temperature=0, max_tokens=40, structured_outputs=spec)])
    k = 4
    rest = SamplingParams(temperature=0, max_tokens=40 - k, structured_outputs=spec)
    ((resumed, _, _),) = _run(engine, [[*prompt, *whole[:k]]], [rest], num_resumed_tokens=k)
    assert whole[:k] + resumed == whole
    ((told_nothing, _, _),) = _run(engine, [[*prompt, *whole[:k]]], [rest])
    assert told_nothing != resumed
    off = engine.tokenizer.encode(" hello world")  # output no JSON schema allows: refused, nothing queued
    with pytest.raises(ValueError, match="structured_outputs"):
        engine.add_request([*prompt, *off], rest, num_resumed_tokens=len(off))
    assert not engine.has_unfinished_requests()


def test_forced_tokens_are_verified_as_drafts_same_output_fewer_steps(engine):
    """Where the grammar allows one continuation only, its tokens go in as drafts (engine/spec/grammar_drafts.py): the
    greedy outputs are those of one token a step, in fewer steps; a sampled request's output still follows its
    constraint."""
    prompts = [_chat(engine, "What is the capital of France? Answer in JSON."), _chat(engine, "Give me an order id.")]
    params = [
        SamplingParams(temperature=0, max_tokens=40, structured_outputs=StructuredOutput(json=json.dumps(SCHEMA))),
        SamplingParams(temperature=0, max_tokens=16, structured_outputs=StructuredOutput(regex=r"ORDER-[0-9]{4}-DONE")),
    ]
    runs = {}
    for forced in (0, 8):
        engine.forced_drafts = forced
        steps, drafts = engine.num_steps, engine.structured_stats.num_forced_draft_tokens_total
        outs = _run(engine, prompts, params)
        runs[forced] = (outs, engine.num_steps - steps, engine.structured_stats.num_forced_draft_tokens_total - drafts)
    engine.forced_drafts = 8
    (plain_outs, plain_steps, no_drafts), (ff_outs, ff_steps, drafts) = runs[0], runs[8]
    assert [o[0] for o in ff_outs] == [o[0] for o in plain_outs]
    assert re.fullmatch(r"ORDER-[0-9]{4}-DONE", ff_outs[1][1])
    assert no_drafts == 0 and drafts >= 4 and ff_steps < plain_steps
    sampled = SamplingParams(temperature=1, seed=3, max_tokens=16, structured_outputs=params[1].structured_outputs)
    ((_, text, reason),) = _run(engine, prompts[1:], [sampled])
    assert re.fullmatch(r"ORDER-[0-9]{4}-DONE", text) and reason == "stop"
