"""backends/grammar.py with the fake backend's byte tokenizer (one token per byte: what a grammar allows next is
easy to state): compile checks, masks, advancing, the error state, drafts' copies, and the plan's grammar rows."""

from __future__ import annotations

import json

import numpy as np
import pytest

from backends.fake.byte_tokenizer import ByteTokenizer
from backends.grammar import LLGuidanceCompiler, check
from backends.logits_adjust import LogitsAdjuster
from backends.runner_driver import sampled_step
from backends.sample_slots import SampleSlot
from engine.request import Request
from engine.sampling_params import SamplingParams
from engine.structured_output import StructuredOutput, StructuredOutputError, compile_grammar

TOK = ByteTokenizer()
V = TOK.vocab_size
EOS = TOK.eos_token_id


@pytest.fixture(scope="module")
def compiler():
    return LLGuidanceCompiler(TOK)


def allowed_text(grammar) -> set[str]:
    return {TOK.decode([t]) if t != EOS else "<eos>" for t in np.flatnonzero(~grammar.banned(V))}


def test_a_grammar_allows_what_its_constraint_allows_next_then_only_eos(compiler):
    g = compiler.compile(StructuredOutput(choice=("yes", "no")))
    assert allowed_text(g) == {"y", "n"}
    assert g.advance(TOK.encode("ye")) and allowed_text(g) == {"s"}
    assert g.advance(TOK.encode("s")) and allowed_text(g) == {"<eos>"}
    assert g.num_consumed == 3
    regex = compiler.compile(StructuredOutput(regex="[0-9]{2}"))
    assert allowed_text(regex) == set("0123456789")
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    js = compiler.compile(StructuredOutput(json=json.dumps(schema)))
    assert js.advance(TOK.encode('{"a": 12}'))
    assert "<eos>" in allowed_text(js) and "x" not in allowed_text(js)


def test_disable_any_whitespace_keeps_json_compact(compiler):
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]})
    flexible = compiler.compile(StructuredOutput(json=schema))
    compact = compiler.compile(StructuredOutput(json=schema, disable_any_whitespace=True))
    assert flexible.advance(TOK.encode("{")) and compact.advance(TOK.encode("{"))
    assert {" ", "\n", '"'} <= allowed_text(flexible) and allowed_text(compact) == {'"'}
    any_object = compiler.compile(StructuredOutput(json_object=True, disable_any_whitespace=True))
    assert any_object.advance(TOK.encode("{")) and " " not in allowed_text(any_object)
    with pytest.raises(StructuredOutputError, match="disable_any_whitespace must be a boolean"):
        StructuredOutput(json=schema, disable_any_whitespace="yes").check()


def test_a_token_the_grammar_does_not_allow_puts_it_in_error_and_only_eos_follows(compiler):
    g = compiler.compile(StructuredOutput(choice=("yes",)))
    assert not g.advance(TOK.encode("n"))
    assert g.is_error and allowed_text(g) == {"<eos>"}
    assert not g.advance(TOK.encode("y"))  # stays in error; still counts what it was given
    assert g.num_consumed == 2


def test_a_copy_goes_its_own_way(compiler):
    g = compiler.compile(StructuredOutput(choice=("ab", "ac")))
    g.advance(TOK.encode("a"))
    draft = g.copy()
    draft.advance(TOK.encode("b"))
    assert allowed_text(draft) == {"<eos>"} and allowed_text(g) == {"b", "c"}


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        (StructuredOutput(json="{not json"), "JSON schema"),
        (StructuredOutput(json='{"type": "frobnicate"}'), "JSON schema"),
        (StructuredOutput(json="[1, 2]"), "JSON schema"),
        (StructuredOutput(json='{"a":' * 20_000 + "1" + "}" * 20_000), "JSON schema"),  # deeper than serde allows
        (StructuredOutput(regex="[a-"), "regex"),
        (StructuredOutput(grammar="start: undefined_rule"), "grammar"),
    ],
)
def test_what_does_not_compile_is_refused_saying_what(compiler, spec, words):
    with pytest.raises(StructuredOutputError, match=words):
        check(spec)
    with pytest.raises(StructuredOutputError, match=words):
        compiler.compile(spec)


def test_an_error_is_short(compiler):
    with pytest.raises(StructuredOutputError) as refused:
        check(StructuredOutput(regex="[" * 5000))
    assert len(str(refused.value)) < 400


def test_the_engine_without_a_compiler_refuses_a_constraint():
    with pytest.raises(ValueError, match="structured_outputs: this node's backend cannot"):
        compile_grammar(None, StructuredOutput(json_object=True), [5, 6], 0)
    assert compile_grammar(None, None, [5, 6], 0) is None


def test_a_resumed_requests_grammar_has_consumed_its_output(compiler):
    spec = StructuredOutput(choice=("yes", "no"))
    g = compile_grammar(compiler, spec, [*TOK.encode("Q?"), *TOK.encode("ye")], 2)
    assert g.num_consumed == 2 and allowed_text(g) == {"s"}
    with pytest.raises(ValueError, match="does not follow"):
        compile_grammar(compiler, spec, [*TOK.encode("Q?"), *TOK.encode("ma")], 2)


def _slot(req_id, params, prompt, output, grammar, first_row=0, num_resumed=0):
    request = Request(req_id, prompt, params, 0.0, eos_token_id=EOS, num_resumed_tokens=num_resumed, grammar=grammar)
    request.append_output_token_ids(output)
    return SampleSlot(sampled_step(request), first_row, 1)


def test_the_plan_advances_the_grammar_by_the_new_output_and_bans_the_rest(compiler):
    spec = StructuredOutput(choice=("yes", "no"))
    params = SamplingParams(max_tokens=8, structured_outputs=spec)
    g = compiler.compile(spec)
    adjuster = LogitsAdjuster()
    plain = SampleSlot(sampled_step(Request("p", [5, 6], SamplingParams(), 0.0, eos_token_id=EOS)), 0, 1)
    plan = adjuster.plan([plain, _slot("g", params, [5, 6], [], g, first_row=1)], V)
    mask = plan.allowed_mask(2, V)
    assert not mask[0].any()  # the plain row: nothing banned
    assert {TOK.decode([t]) for t in np.flatnonzero(~mask[1])} == {"y", "n"}
    plan = adjuster.plan([_slot("g", params, [5, 6], TOK.encode("n"), g)], V)  # one new token since
    assert g.num_consumed == 1
    assert {TOK.decode([t]) for t in np.flatnonzero(~plan.allowed_mask(1, V)[0])} == {"o"}
    # a resumed request: its output before the resume (the prompt's last tokens) already consumed
    r = compile_grammar(compiler, spec, [5, 6, *TOK.encode("y")], 1)
    plan = adjuster.plan([_slot("r", params, [5, 6, *TOK.encode("y")], TOK.encode("e"), r, num_resumed=1)], V)
    assert r.num_consumed == 2
    assert {TOK.decode([t]) for t in np.flatnonzero(~plan.allowed_mask(1, V)[0])} == {"s"}


def test_draft_rows_follow_the_drafts_before_them(compiler):
    spec = StructuredOutput(choice=("abc",))
    params = SamplingParams(max_tokens=8, structured_outputs=spec)
    g = compiler.compile(spec)
    slot = _slot("d", params, [5, 6], [], g)
    slot.request.spec_token_ids = TOK.encode("ab")
    plan = LogitsAdjuster().plan([SampleSlot(slot.request, 0, 3)], V)
    mask = plan.allowed_mask(3, V)
    assert [{TOK.decode([t]) for t in np.flatnonzero(~mask[j])} for j in range(3)] == [{"a"}, {"b"}, {"c"}]
    assert g.num_consumed == 0  # the drafts advanced a copy


def test_a_grammar_with_a_penalty_and_a_bias_applies_both(compiler):
    spec = StructuredOutput(choice=("ab", "ba"))
    bias = {TOK.encode("b")[0]: 5.0}
    params = SamplingParams(max_tokens=8, structured_outputs=spec, frequency_penalty=1.0, logit_bias=bias)
    plan = LogitsAdjuster().plan([_slot("b", params, [5, 6], [], compiler.compile(spec))], V)
    assert len(plan) > 0 and plan.allowed_mask(1, V)[0].sum() == V - 2


def test_the_check_remembers_what_compiled_and_refuses_again_what_did_not():
    check.cache_clear()
    good, bad = StructuredOutput(regex="[0-9]+"), StructuredOutput(regex="[0-")
    check(good)
    check(good)
    assert check.cache_info().hits == 1
    for _ in range(2):
        with pytest.raises(StructuredOutputError):
            check(bad)
    assert check.cache_info().currsize == 1


def test_forced_tokens_become_drafts_within_the_room_and_only_for_decoding_requests(compiler):
    from engine.spec.grammar_drafts import propose_forced_drafts

    spec = StructuredOutput(regex="ab-[0-9]-xyz")
    params = SamplingParams(max_tokens=6, structured_outputs=spec)

    def decoding(output: str) -> Request:
        r = Request("g", [5, 6], params, 0.0, eos_token_id=EOS, grammar=compiler.compile(spec))
        r.append_output_token_ids(TOK.encode(output))
        r.num_computed_tokens = r.num_tokens - 1  # every known token but the last computed
        return r

    r = decoding("a")
    assert propose_forced_drafts([r]) == 2 and TOK.decode(r.spec_token_ids) == "b-"  # then a digit: free
    assert r.grammar.num_consumed == 1  # the output it had not seen, consumed first
    r = decoding("ab-4")
    assert propose_forced_drafts([r]) == 1 and TOK.decode(r.spec_token_ids) == "-"  # max_tokens 6: room for 1
    r = decoding("ab-4")
    assert propose_forced_drafts([r], max_drafts=0) == 0 and r.spec_token_ids == []
    prefilling = decoding("a")
    prefilling.num_computed_tokens = 0
    plain = Request("p", [5, 6], SamplingParams(max_tokens=6), 0.0, eos_token_id=EOS)
    plain.append_output_token_ids([7])
    plain.num_computed_tokens = plain.num_tokens - 1
    assert propose_forced_drafts([prefilling, plain]) == 0
    assert prefilling.spec_token_ids == [] and plain.spec_token_ids == []
