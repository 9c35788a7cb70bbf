"""Structured outputs compiled with llguidance (PyPI ``llguidance``, the Rust library behind vLLM's ``guidance``
structured-output backend: vllm/v1/structured_output/backend_guidance.py).

    StructuredOutput ─► grammar_text ─► check (intake: compiles, no tokenizer) ─► LLGuidanceCompiler.compile
                                                                                   (node: for its tokenizer)
                                                                                  ─► LLGuidanceGrammar
    each step: advance(new output tokens) ─► banned(vocab) ─► the sampler's plan bans those tokens

A request's grammar is compiled at the control plane's intake without a tokenizer (``check``: a bad schema, regex or
grammar is an INVALID_REQUEST naming ``structured_outputs`` before routing), and again on its node for that node's
tokenizer (``LLGuidanceCompiler``, given to the engine by backends/builder.py). Both run under ``LIMITS``, so no
schema or grammar, however large or ambiguous, can take unbounded time or memory: llguidance puts a matcher that
exceeds them in its error state instead.

A grammar in error (a token it did not allow reached it: a resumed request whose earlier output breaks it) allows only
EOS, so the request ends rather than going on unconstrained. The tokenizer the compiler needs (llguidance's
LLTokenizer: a token trie over the vocabulary's bytes, ~0.3 s for SmolLM2's 49,152 tokens) is built at the first
compile and kept.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence

import llguidance
import numpy as np

from engine.structured_output import StructuredOutput, StructuredOutputError

# llguidance's own defaults but for the grammar size (500,000 symbols there); the fuel and item caps bound each step's
# mask at tens of milliseconds in the worst case (llguidance's speeds: lexer fuel ~14k/ms, Earley items ~20k/ms)
LIMITS = llguidance.LLParserLimits(
    max_grammar_size=200_000,
    step_lexer_fuel=200_000,
    step_max_items=50_000,
    initial_lexer_fuel=1_000_000,
    verbose_errors=False,
)
_MAX_ERROR_CHARS = 300
CHECKED_KEPT = 256


def grammar_text(spec: StructuredOutput) -> str:
    """llguidance's grammar for ``spec``. Raises StructuredOutputError where the JSON schema is not JSON."""
    kind = spec.kind
    defaults = {"whitespace_flexible": False} if spec.disable_any_whitespace else None  # llguidance's x-guidance
    if kind == "json":
        try:
            return llguidance.LLMatcher.grammar_from_json_schema(spec.json, defaults=defaults)
        except (ValueError, RecursionError) as error:
            raise StructuredOutputError(f"the JSON schema is not a JSON object or boolean: {_short(error)}") from None
    if kind == "json_object":
        return llguidance.LLMatcher.grammar_from_json_schema('{"type": "object"}', defaults=defaults)
    if kind == "regex":
        return llguidance.LLMatcher.grammar_from_regex(spec.regex)
    if kind == "choice":
        return llguidance.LLMatcher.grammar_from_lark("start: " + " | ".join(json.dumps(c) for c in spec.choice))
    return llguidance.grammar_from("grammar", spec.grammar)


@functools.lru_cache(maxsize=CHECKED_KEPT)
def check(spec: StructuredOutput) -> None:
    """Raises StructuredOutputError saying why ``spec`` does not compile (no tokenizer needed). The last CHECKED_KEPT
    constraints that compiled are remembered (an application sends the same schema again and again; a refusal is
    not remembered: lru_cache keeps no exception)."""
    try:
        text = grammar_text(spec)
        message = llguidance.LLMatcher.validate_grammar(text, None, limits=LIMITS)
    except StructuredOutputError:
        raise
    except Exception as error:
        message = _short(error) or type(error).__name__
    if message and not message.startswith("WARNING"):
        raise StructuredOutputError(f"{spec.describe()} does not compile: {_short(message)}")


class LLGuidanceGrammar:
    """One request's matcher (engine/structured_output.Grammar): advanced by its output tokens; ``banned`` says which
    tokens it may not sample next."""

    __slots__ = ("_eos", "_matcher", "num_consumed")

    def __init__(self, matcher: llguidance.LLMatcher, eos_token_id: int | None) -> None:
        self._matcher = matcher
        self._eos = eos_token_id
        self.num_consumed = 0

    def advance(self, token_ids: Sequence[int]) -> bool:
        ok = True
        for token in token_ids:
            self.num_consumed += 1
            if ok and not self._matcher.is_error():
                ok = self._matcher.consume_token(int(token))
        return ok and not self._matcher.is_error()

    @property
    def is_error(self) -> bool:
        return self._matcher.is_error()

    def banned(self, vocab_size: int) -> np.ndarray:
        """Boolean [vocab_size]: True where the next token may not be (all but EOS once in error)."""
        if self._matcher.is_error():
            banned = np.ones(vocab_size, dtype=bool)
            if self._eos is not None and self._eos < vocab_size:
                banned[self._eos] = False
            return banned
        bits = np.unpackbits(np.frombuffer(self._matcher.compute_bitmask(), dtype=np.uint8), bitorder="little")
        allowed = np.zeros(vocab_size, dtype=bool)
        n = min(vocab_size, len(bits))
        allowed[:n] = bits[:n].astype(bool)
        return ~allowed

    def forced_tokens(self, limit: int) -> list[int]:
        """llguidance's fast-forward tokens: the bytes the grammar forces next, tokenized as the tokenizer would."""
        if limit <= 0 or self._matcher.is_error():
            return []
        return self._matcher.compute_ff_tokens()[:limit]

    def copy(self) -> LLGuidanceGrammar:
        """An independent copy (a draft row's grammar, advanced by the drafts before it)."""
        other = LLGuidanceGrammar(self._matcher.deep_copy(), self._eos)
        other.num_consumed = self.num_consumed
        return other


class LLGuidanceCompiler:
    """engine/structured_output.GrammarCompiler for one tokenizer: a checkpoint's (its ``backend_tokenizer`` is a
    Hugging Face ``tokenizers`` one) or any with ``token_bytes`` (the fake backend's byte tokenizer)."""

    def __init__(self, tokenizer, vocab_size: int | None = None) -> None:
        self._tokenizer = tokenizer
        self._vocab_size = max(vocab_size or 0, tokenizer.vocab_size)
        self._eos = tokenizer.eos_token_id
        self._ll: llguidance.LLTokenizer | None = None  # built at the first compile (the engine thread's)

    def _lltokenizer(self) -> llguidance.LLTokenizer:
        if self._ll is None:
            backend = getattr(self._tokenizer, "backend_tokenizer", None)
            if backend is not None:
                source = backend.to_str()
            else:
                source = llguidance.TokenizerWrapper(_BytesTokenizer(self._tokenizer))
            self._ll = llguidance.LLTokenizer(source, n_vocab=self._vocab_size, eos_token=self._eos)
        return self._ll

    def compile(self, spec: StructuredOutput) -> LLGuidanceGrammar:
        text = grammar_text(spec)
        matcher = llguidance.LLMatcher(self._lltokenizer(), text, log_level=0, limits=LIMITS)
        if matcher.is_error():
            raise StructuredOutputError(f"{spec.describe()} does not compile: {_short(matcher.get_error())}")
        return LLGuidanceGrammar(matcher, self._eos)


class _BytesTokenizer:
    """What llguidance.TokenizerWrapper reads, from a tokenizer with ``token_bytes`` and ``encode``."""

    def __init__(self, tokenizer) -> None:
        self.eos_token_id = tokenizer.eos_token_id
        self.bos_token_id = getattr(tokenizer, "bos_token_id", None)
        special = {self.eos_token_id, self.bos_token_id, getattr(tokenizer, "pad_token_id", None)} - {None}
        # special tokens spelled with a 0xff lead byte (llguidance's convention): never part of a constrained text
        self.tokens = [
            b"\xff<special_%d>" % i if i in special else tokenizer.token_bytes(i) for i in range(tokenizer.vocab_size)
        ]
        self.special_token_ids = sorted(special)
        self._tokenizer = tokenizer

    def __call__(self, text: str | bytes) -> list[int]:
        if isinstance(text, bytes):
            text = text.decode("utf-8", errors="replace")
        return self._tokenizer.encode(text)


def _short(error: object) -> str:
    text = " ".join(str(error).split())
    return text if len(text) <= _MAX_ERROR_CHARS else text[: _MAX_ERROR_CHARS - 3] + "..."
