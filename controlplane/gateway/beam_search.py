"""vLLM's beam search over the OpenAI API (``use_beam_search: true``, ``n`` beams, ``length_penalty``), sans-IO: the
search's state between steps, and which requests may ask for it. Its steps run through the fleet as ordinary
one-token requests (gateway/beam_search_route.py), each beam's prompt extended by its tokens, so the prefix cache and
the router's prefix affinity keep a step's cost to one token's prefill.

The rule is vLLM's (vllm/entrypoints/openai/engine/serving.py ``BeamSearchOnlineMixin.beam_search``,
vllm/entrypoints/utils.py ``get_beam_search_score``):
    each step, every live beam asks for one token with ``2 * n`` log-probabilities; every candidate (the sampled token
    and its alternatives) scores the beam's cumulative log-probability plus its own; an end-of-sequence candidate
    (unless ``ignore_eos``) completes its beam; the ``n`` best of the others are the next step's beams;
    after ``max_tokens`` steps, or when no beam is left, the completed and live beams are ranked by
    ``cumulative logprob / length ** length_penalty`` (length: prompt and output, the end token not counted) and the
    ``n`` best answered, best first.

What a beam search does not apply is refused naming the field, where vLLM ignores it: streaming, a batch of prompts,
tools, structured outputs, stop strings and ids, logit bias, penalties, logprobs, echo, predictions, a thinking
budget; ``n`` is at most ``MAX_BEAM_WIDTH`` (2 n log-probabilities per step, within the engine's 20),
``max_tokens`` at most ``MAX_BEAM_TOKENS``, ``length_penalty`` within ``MAX_LENGTH_PENALTY`` either way (vLLM: any).
A beam stops at the context's end as a generation does (finish reason "length").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.frontend import FrontendError, invalid_param
from engine.sampling_params import MAX_LOGPROBS, SamplingParams
from transport.messages import ErrorCode

MAX_BEAM_WIDTH = MAX_LOGPROBS // 2
MAX_BEAM_TOKENS = 1024  # a beam search's max_tokens at most: each token is a step of n requests through the fleet
MAX_LENGTH_PENALTY = 10.0  # |length_penalty| at most (vLLM's users set ~0.5..2): length ** it stays a finite float


@dataclass(frozen=True, slots=True)
class BeamSpec:
    """A request's beam search: ``n`` beams (its ``n``), its ``length_penalty``."""

    beam_width: int
    length_penalty: float = 1.0


@dataclass(slots=True)
class Beam:
    tokens: list[int]  # the prompt's, then the beam's
    cum_logprob: float = 0.0
    finish_reason: str | None = None  # "stop" (its end token), else "length" once answered
    stop_reason: int | None = None  # the end token that completed it


def beam_score(beam: Beam, eos_token_id: int | None, length_penalty: float) -> float:
    """vLLM's ``get_beam_search_score``: the cumulative log-probability over the length to the power of the penalty,
    the end token not counted."""
    length = len(beam.tokens) - (1 if beam.tokens and beam.tokens[-1] == eos_token_id else 0)
    return beam.cum_logprob / (max(length, 1) ** length_penalty)


@dataclass(slots=True)
class BeamSearch:
    """One search: ``prompt`` (token ids) and the options; ``live`` the beams a step extends, ``done`` when none is
    left or ``max_tokens`` steps were taken."""

    prompt: list[int]
    spec: BeamSpec
    max_tokens: int
    eos_token_id: int | None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    live: list[Beam] = field(default_factory=list)
    completed: list[Beam] = field(default_factory=list)
    num_steps: int = 0

    def __post_init__(self) -> None:
        self.live = [Beam(list(self.prompt))]

    @property
    def done(self) -> bool:
        return not self.live or self.num_steps >= self.max_tokens

    def advance(self, candidates: list[dict[int, float]]) -> None:
        """One step: ``candidates[i]``, live beam i's next tokens and their log-probabilities."""
        eos, width = self.eos_token_id, self.spec.beam_width
        extended: list[tuple[float, int, Beam]] = []
        for beam, options in zip(self.live, candidates, strict=True):
            for token, logprob in options.items():
                score = beam.cum_logprob + logprob
                if token == eos and not self.ignore_eos:
                    tokens = [*beam.tokens, token] if self.include_stop_str_in_output else list(beam.tokens)
                    self.completed.append(Beam(tokens, score, "stop", token))
                else:
                    extended.append((score, token, beam))
        extended.sort(key=lambda c: c[0], reverse=True)
        self.live = [Beam([*beam.tokens, token], score) for score, token, beam in extended[:width]]
        self.num_steps += 1

    def best(self) -> list[Beam]:
        """The answer: the ``n`` best of the completed and live beams, best first (a live one's reason: length)."""
        for beam in self.live:
            beam.finish_reason = beam.finish_reason or "length"
        ranked = sorted(
            self.completed + self.live,
            key=lambda b: beam_score(b, self.eos_token_id, self.spec.length_penalty),
            reverse=True,
        )
        return ranked[: self.spec.beam_width]

    def output_tokens(self, beam: Beam) -> list[int]:
        """A beam's output, as its text is decoded: an end token it finished on left out (vLLM's)."""
        tokens = beam.tokens[len(self.prompt) :]
        return tokens[:-1] if beam.finish_reason == "stop" and tokens and tokens[-1] == self.eos_token_id else tokens


_REFUSED = (  # (what a beam search does not apply, as SamplingParams says it is asked, the request's field)
    (lambda s: s.stop, "stop"),
    (lambda s: s.stop_token_ids, "stop_token_ids"),
    (lambda s: s.logit_bias, "logit_bias"),
    (lambda s: s.bad_words, "bad_words"),
    (lambda s: s.allowed_token_ids, "allowed_token_ids"),
    (lambda s: s.logprobs is not None, "logprobs"),
    (lambda s: s.prompt_logprobs is not None, "prompt_logprobs"),
    (lambda s: s.presence_penalty, "presence_penalty"),
    (lambda s: s.frequency_penalty, "frequency_penalty"),
    (lambda s: s.repetition_penalty != 1.0, "repetition_penalty"),
    (lambda s: s.min_tokens, "min_tokens"),
    (lambda s: s.prediction is not None, "prediction"),
    (lambda s: s.thinking_token_budget is not None, "thinking_token_budget"),
)


def check_beam_request(args, spec: BeamSpec) -> None:
    """FrontendError naming the field a beam search does not apply (module docstring); ``args``: GenerateArgs."""
    if not 1 <= spec.beam_width <= MAX_BEAM_WIDTH:
        raise invalid_param("n", f"a beam search keeps 1..{MAX_BEAM_WIDTH} beams (n), got {spec.beam_width}")
    if not abs(spec.length_penalty) <= MAX_LENGTH_PENALTY:  # NaN fails too
        message = f"must be in [-{MAX_LENGTH_PENALTY:g}, {MAX_LENGTH_PENALTY:g}], got {spec.length_penalty}"
        raise invalid_param("length_penalty", message)
    if args.stream:
        raise invalid_param("stream", "a beam search answers whole: ask without stream")
    if args.sampling.max_tokens > MAX_BEAM_TOKENS:
        message = f"a beam search takes at most {MAX_BEAM_TOKENS} tokens (each a step of n requests)"
        raise invalid_param("max_tokens", f"{message}, got {args.sampling.max_tokens}")
    if args.prompts is not None:
        raise invalid_param("prompt", "a beam search takes one prompt, not a batch")
    if args.tools or args.sampling.structured_outputs is not None:
        field = "tools" if args.tools else args.structured_param or "response_format"
        raise invalid_param(field, "a beam search does not apply tools or structured outputs")
    if args.echo or args.chat_echo:
        raise invalid_param("echo", "a beam search does not echo the prompt")
    for asked, name in _REFUSED:
        if asked(args.sampling):
            raise invalid_param(name, "a beam search does not apply it (use_beam_search)")


def step_sampling(sampling: SamplingParams, spec: BeamSpec) -> SamplingParams:
    """A step's request: one token, ``2 n`` log-probabilities, the request's temperature and salt."""
    return SamplingParams(
        max_tokens=1,
        temperature=sampling.temperature,
        logprobs=2 * spec.beam_width,
        ignore_eos=True,  # the end token is a candidate like any other; the search decides what it ends
        cache_salt=sampling.cache_salt,
        skip_special_tokens=sampling.skip_special_tokens,
    )


def step_candidates(logprobs: list | None) -> dict[int, float]:
    """A step's candidates from its chunk's first token's log-probabilities ((token, logprob, [(top, logprob)])):
    the sampled token and its alternatives."""
    if not logprobs:
        raise FrontendError(ErrorCode.INTERNAL, "a beam search step came back without log-probabilities")
    token, logprob, top = logprobs[0]
    return {**dict(top), token: logprob}
