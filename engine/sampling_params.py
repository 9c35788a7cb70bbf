"""Per-request sampling parameters: one struct from the edge to the sampler, validated where it is made.

Sans-IO: no torch, no numpy. ``SamplingParams`` is a msgspec struct and travels on the wire as it is
(``ClientGenerate.sampling``, ``GenerateRequest.sampling``), so it is never converted: constructing one
validates it, and so does decoding one (msgspec runs ``__post_init__``; transport/codec.py turns a
``SamplingParamsError`` raised there into an INVALID_REQUEST reply that names the field). A backend's
sampler reads these fields; the scheduler reads ``max_tokens``, ``stop_token_ids`` and ``ignore_eos`` to
decide when a request is finished; the engine's detokenizer reads ``stop`` (stop strings).

Every field a client controls is bounded, so that no value can fail later where it is encoded (msgpack
carries integers in [-2**63, 2**64)), handed to a kernel (int32 indices) or scanned every step:

    field            accepted                       why this bound
    temperature      0 .. MAX_TEMPERATURE (100)     OpenAI accepts 0..2, vLLM any >= 0: room for both
    top_p            (0, 1]
    top_k            0 .. 2**31-1                   a kernel's int32; the sampler clamps k to the vocabulary
    seed             None | 0 .. 2**63-1            a torch/JAX generator's seed
    max_tokens       1 .. 2**31-1                   the engine stops at the context length anyway
    stop             <= 16 strings of 1..1024 chars OpenAI allows 4, vLLM any number; 16 keeps the
                                                    detokenizer's per-step scan cheap
    stop_token_ids   <= 256 ids in 0 .. 2**31-1     vLLM any number; each is compared every decode step
    logprobs         None | 0 .. MAX_LOGPROBS (20)  OpenAI's top_logprobs limit
"""

from __future__ import annotations

import math

import msgspec

MAX_LOGPROBS = 20
MAX_INT32 = 2**31 - 1
MAX_TEMPERATURE = 100.0
MAX_TOP_K = MAX_INT32
MAX_TOKENS = MAX_INT32
MAX_TOKEN_ID = MAX_INT32
MAX_SEED = 2**63 - 1
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 1024
MAX_STOP_TOKEN_IDS = 256
_MAX_SHOWN_CHARS = 40  # a value quoted in an error message is cut to this


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
            msgspec.structs.force_setattr(self, "stop", _as_tuple("stop", self.stop))
        if not isinstance(self.stop_token_ids, tuple):
            msgspec.structs.force_setattr(self, "stop_token_ids", _as_tuple("stop_token_ids", self.stop_token_ids))
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
        if not _is_number(t) or not math.isfinite(t) or not 0 <= t <= MAX_TEMPERATURE:
            raise SamplingParamsError(
                "temperature", f"must be a number in [0, {MAX_TEMPERATURE:g}], got {show_value(t)}"
            )
        p = self.top_p
        if not _is_number(p) or not (0.0 < p <= 1.0):
            raise SamplingParamsError("top_p", f"must be in (0, 1], got {show_value(p)}")
        if not _is_int(self.top_k) or not 0 <= self.top_k <= MAX_TOP_K:
            raise SamplingParamsError(
                "top_k", f"must be an integer in [0, 2**31-1] (0 disables), got {show_value(self.top_k)}"
            )
        if self.seed is not None and not _is_int(self.seed):
            raise SamplingParamsError("seed", f"must be an integer or None, got {show_value(self.seed)}")
        if self.seed is not None and not (0 <= self.seed <= MAX_SEED):
            raise SamplingParamsError("seed", f"must be in [0, 2**63), got {show_value(self.seed)}")
        m = self.max_tokens
        if not _is_int(m) or not 1 <= m <= MAX_TOKENS:
            raise SamplingParamsError("max_tokens", f"must be an integer in [1, 2**31-1], got {show_value(m)}")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise SamplingParamsError("stop", f"at most {MAX_STOP_STRINGS} stop strings, got {len(self.stop)}")
        for s in self.stop:
            if not isinstance(s, str) or not s or len(s) > MAX_STOP_CHARS:
                raise SamplingParamsError(
                    "stop", f"must be strings of 1 to {MAX_STOP_CHARS} characters, got {show_value(s)}"
                )
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise SamplingParamsError(
                "stop_token_ids", f"at most {MAX_STOP_TOKEN_IDS} ids, got {len(self.stop_token_ids)}"
            )
        for tid in self.stop_token_ids:
            if not _is_int(tid) or not 0 <= tid <= MAX_TOKEN_ID:
                raise SamplingParamsError("stop_token_ids", f"must be integers in [0, 2**31-1], got {show_value(tid)}")
        if not isinstance(self.ignore_eos, bool):
            raise SamplingParamsError("ignore_eos", f"must be a boolean, got {show_value(self.ignore_eos)}")
        lp = self.logprobs
        if lp is not None and (not _is_int(lp) or not 0 <= lp <= MAX_LOGPROBS):
            raise SamplingParamsError(
                "logprobs", f"must be None or an integer in [0, {MAX_LOGPROBS}], got {show_value(lp)}"
            )

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_tuple(field_name: str, value: object) -> tuple:
    try:
        return tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise SamplingParamsError(field_name, f"must be a list, got {show_value(value)}") from None


def show_value(value: object) -> str:
    """``repr(value)`` cut to a readable length (a client's value is quoted back, never echoed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN_CHARS else f"{text[: _MAX_SHOWN_CHARS - 3]}..."
