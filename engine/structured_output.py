"""Structured outputs: a request's constraint on the shape of its output (a JSON schema, any JSON object, a regex,
a list of choices, a grammar), and what a node needs to honour it.

The constraint's fields are vLLM's ``StructuredOutputsParams`` (vllm/sampling_params.py, since vllm-project/vllm#22772,
August 2025; its OpenAI server takes them as ``structured_outputs``; the older ``guided_json``, ``guided_regex``,
``guided_choice``, ``guided_grammar`` were removed in v0.12.0, which now ignores them silently: here they are still
honoured); OpenAI's ``response_format`` maps onto ``json`` and ``json_object``
(controlplane/gateway/structured_fields.py). Exactly one is set. Sans-IO: shapes and sizes are checked here, where the
struct is made or decoded; whether the schema, the regex or the grammar compiles is checked by the grammar library at
the control plane's intake (backends/grammar.py), before routing, and a node that cannot compile one refuses the
request.

A node compiles the constraint into a ``Grammar`` (``GrammarCompiler``, given to the engine by whoever builds it:
backends/builder.py); the grammar rides on its request, is advanced by each token the request puts out, and names the
tokens it may sample next (the sampler bans the others: backends/logits_adjust.py). When the grammar is complete,
only EOS may follow, so the request stops as any other does. An engine given no compiler (the simulated and fake
runners) refuses a constrained request with a clear error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import msgspec

MAX_SPEC_CHARS = 64 * 1024  # a schema's JSON text, a regex or a grammar
MAX_CHOICES = 256
MAX_CHOICE_CHARS = 1024
KINDS = ("json", "json_object", "regex", "choice", "grammar")


class StructuredOutputError(ValueError):
    """A malformed constraint, or one that does not compile (sampling_params.py turns the first into a
    SamplingParamsError naming the field ``structured_outputs``)."""


class StructuredOutput(msgspec.Struct, frozen=True, omit_defaults=True):
    """One constraint on a request's output; exactly one field set.

    json: a JSON schema, as its JSON text (an object or a boolean schema).
    json_object: any JSON object (OpenAI's ``response_format: {"type": "json_object"}``).
    regex: the output matches this regular expression (Rust's regex syntax, as llguidance reads it).
    choice: the output is exactly one of these strings.
    grammar: a context-free grammar in Lark syntax (llguidance reads GBNF too).
    disable_any_whitespace: JSON (``json``, ``json_object``) written compactly, with no whitespace between its
        tokens (vLLM's field of that name); a small model otherwise may pad an object with whitespace until
        max_tokens. Forced tool calls set it (controlplane/gateway/tool_calls.py).
    """

    json: str | None = None
    json_object: bool = False
    regex: str | None = None
    choice: tuple[str, ...] | None = None
    grammar: str | None = None
    disable_any_whitespace: bool = False

    def __post_init__(self) -> None:
        if self.choice is not None and not isinstance(self.choice, tuple):
            try:
                msgspec.structs.force_setattr(self, "choice", tuple(self.choice))
            except TypeError:
                raise StructuredOutputError("choice must be a list of strings") from None

    def check(self) -> None:
        """Raises StructuredOutputError naming what is wrong (SamplingParams calls it where it is made or decoded)."""
        for name in ("json_object", "disable_any_whitespace"):
            if not isinstance(getattr(self, name), bool):
                raise StructuredOutputError(f"{name} must be a boolean")
        given = [name for name in KINDS if _given(getattr(self, name))]
        if len(given) != 1:
            said = ", ".join(given) if given else "none"
            raise StructuredOutputError(f"exactly one of {', '.join(KINDS)} must be set, got {said}")
        for name in ("json", "regex", "grammar"):
            text = getattr(self, name)
            if text is not None and (not isinstance(text, str) or not text or len(text) > MAX_SPEC_CHARS):
                raise StructuredOutputError(f"{name} must be a string of 1 to {MAX_SPEC_CHARS} characters")
        if self.choice is not None:
            if not 1 <= len(self.choice) <= MAX_CHOICES:
                raise StructuredOutputError(f"choice must list 1 to {MAX_CHOICES} strings, got {len(self.choice)}")
            for item in self.choice:
                if not isinstance(item, str) or not item or len(item) > MAX_CHOICE_CHARS:
                    raise StructuredOutputError(f"choice must list strings of 1 to {MAX_CHOICE_CHARS} characters")

    @property
    def kind(self) -> str:
        """Which field is set: one of KINDS."""
        return next(name for name in KINDS if _given(getattr(self, name)))

    def describe(self) -> str:
        """The kind in words, for an error message ("the JSON schema", "the regex", ...)."""
        return _WORDS[self.kind]


_WORDS = {
    "json": "the JSON schema",
    "json_object": "the JSON object constraint",
    "regex": "the regex",
    "choice": "the choices",
    "grammar": "the grammar",
}


def _given(value: object) -> bool:
    return value is not None and value is not False


class Grammar(Protocol):
    """One request's compiled constraint, in step with the tokens it has put out."""

    def advance(self, token_ids: Sequence[int]) -> bool:
        """Consume the request's next tokens; False when one is not allowed (the grammar is then in error)."""
        ...

    @property
    def num_consumed(self) -> int:
        """Output tokens consumed so far."""
        ...

    def banned(self, vocab_size: int):
        """A backend's boolean array [vocab_size], True where the next token may not be (the sampler's ban)."""
        ...

    def copy(self) -> Grammar:
        """An independent copy (a draft row's, advanced by the drafts before it)."""
        ...

    def forced_tokens(self, limit: int) -> list[int]:
        """The next tokens the grammar allows no alternative to (at most ``limit``; none in error): proposed as
        drafts that the model verifies in one step (engine/spec/grammar_drafts.py)."""
        ...


class GrammarCompiler(Protocol):
    """Compiles a constraint for this node's tokenizer (backends/grammar.py)."""

    def compile(self, spec: StructuredOutput) -> Grammar:
        """Raises StructuredOutputError when the schema, regex or grammar does not compile."""
        ...


def compile_grammar(
    compiler: GrammarCompiler | None, spec: StructuredOutput | None, token_ids: list[int], num_resumed_tokens: int
) -> Grammar | None:
    """A new request's compiled constraint, advanced past the output it resumes with (the last ``num_resumed_tokens``
    of ``token_ids``); None without one. Raises ValueError naming ``structured_outputs`` (LLMEngine.add_request
    queues nothing then)."""
    if spec is None:
        return None
    if compiler is None:
        raise ValueError("structured_outputs: this node's backend cannot constrain its output (no grammar compiler)")
    try:
        grammar = compiler.compile(spec)
    except StructuredOutputError as error:
        raise ValueError(f"structured_outputs: {error}") from None
    if num_resumed_tokens and not grammar.advance(token_ids[-num_resumed_tokens:]):
        raise ValueError("structured_outputs: the output this request resumes with does not follow its constraint")
    return grammar
