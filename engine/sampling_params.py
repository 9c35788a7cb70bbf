"""Per-request sampling parameters: one struct from the edge to the sampler, validated where it is made.

Sans-IO: no torch, no numpy. ``SamplingParams`` is a msgspec struct and travels on the wire as it is
(``ClientGenerate.sampling``, ``GenerateRequest.sampling``), so it is never converted: constructing one
validates it, and so does decoding one (msgspec runs ``__post_init__``; transport/codec.py turns a
``SamplingParamsError`` raised there into an INVALID_REQUEST reply that names the field). A backend's
sampler reads these fields; the scheduler reads ``max_tokens``, ``stop_token_ids`` and ``ignore_eos`` to
decide when a request is finished; the engine's detokenizer reads ``stop`` (stop strings).
"""

from __future__ import annotations

import math

import msgspec

MAX_LOGPROBS = 20


class SamplingParamsError(ValueError):
    """An invalid sampling parameter; ``field`` names it (as the HTTP/wire layers report it)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name


class SamplingParams(msgspec.Struct, frozen=True):
    """How to pick each next token.

    temperature: 0 means greedy (argmax); otherwise logits are divided by it.
    top_p: nucleus mass in (0, 1]; 1 disables it.
    top_k: keep the k most likely tokens; 0 disables it.
    seed: per-request RNG seed; the same seed gives the same tokens whatever the batch.
    max_tokens: the most tokens to generate (>= 1).
    stop: strings that end generation; the matched string is not returned (a single string is accepted).
    stop_token_ids: token ids that end generation (in addition to EOS unless ``ignore_eos``).
    logprobs: None, or the number (0..MAX_LOGPROBS) of top alternatives to report per token
        (0 reports only the sampled token's log-probability).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: int | None = None
    max_tokens: int = 16
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            msgspec.structs.force_setattr(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            msgspec.structs.force_setattr(self, "stop", tuple(self.stop))
        if not isinstance(self.stop_token_ids, tuple):
            msgspec.structs.force_setattr(self, "stop_token_ids", tuple(self.stop_token_ids))
        self._validate()

    @classmethod
    def unchecked(cls, **fields) -> SamplingParams:
        """The fields as given, not validated: for a client whose receiver validates them when it decodes
        the message (client/zoo_client.py), so that a request is validated once, at the control plane."""
        params = cls()
        for name, value in fields.items():
            msgspec.structs.force_setattr(params, name, value)
        return params

    def _validate(self) -> None:
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not math.isfinite(t) or t < 0:
            raise SamplingParamsError("temperature", f"must be a finite number >= 0, got {t!r}")
        p = self.top_p
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not (0.0 < p <= 1.0):
            raise SamplingParamsError("top_p", f"must be in (0, 1], got {p!r}")
        if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 0:
            raise SamplingParamsError("top_k", f"must be an integer >= 0 (0 disables), got {self.top_k!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise SamplingParamsError("seed", f"must be an integer or None, got {self.seed!r}")
        if self.seed is not None and not (0 <= self.seed < 2**63):
            raise SamplingParamsError("seed", f"must be in [0, 2**63), got {self.seed!r}")
        m = self.max_tokens
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise SamplingParamsError("max_tokens", f"must be an integer >= 1, got {m!r}")
        for s in self.stop:
            if not isinstance(s, str) or not s:
                raise SamplingParamsError("stop", f"must be non-empty strings, got {s!r}")
        for tid in self.stop_token_ids:
            if isinstance(tid, bool) or not isinstance(tid, int) or tid < 0:
                raise SamplingParamsError("stop_token_ids", f"must be integers >= 0, got {tid!r}")
        lp = self.logprobs
        if lp is not None and (isinstance(lp, bool) or not isinstance(lp, int) or not 0 <= lp <= MAX_LOGPROBS):
            raise SamplingParamsError("logprobs", f"must be None or an integer in [0, {MAX_LOGPROBS}], got {lp!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0
