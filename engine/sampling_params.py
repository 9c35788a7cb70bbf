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
    prompt_logprobs  None | 0 .. MAX_LOGPROBS (20)  as logprobs (vLLM's field); the request skips the prefix cache
    truncate_prompt_tokens None | 1 .. 2**31-1      vLLM's: keep the prompt's last k tokens (the intake cuts it)
    include_stop_str_in_output, skip_special_tokens  booleans (vLLM's; the detokenizer reads them)
    embed            boolean                        the prompt's embedding too (engine/embeddings.py)
    presence_penalty -2 .. 2                        OpenAI's range
    frequency_penalty -2 .. 2                       OpenAI's range
    repetition_penalty (0, MAX_REPETITION_PENALTY]  vLLM's extension (any > 0); 1 is off
    logit_bias       <= 300 (id, bias) pairs,       OpenAI's bias range; the pairs are scanned every step. An id
                     ids 0 .. 2**31-1, bias -100..100  past the model's vocabulary is refused by the engine
    min_p            0 .. 1                         vLLM's extension
    min_tokens       0 .. max_tokens                vLLM's extension
    allowed_token_ids <= 16,384 ids                 vLLM's extension; an id past the vocabulary refused as logit_bias's
    bad_words        <= 128 strings of 1..1024      vLLM's; the intake tokenizes them (engine/bad_words.py), each
                     chars, not all spaces          sequence then matched against the output every step
    bad_words_token_ids <= 256 sequences of 1..4096  the words' token sequences (the intake's; a client may give
                     ids in 0 .. 2**31-1             them); an id past the vocabulary refused as logit_bias's
    structured_outputs None | one constraint        vLLM's; a schema, regex or grammar of <= 64 KiB, <= 256 choices
                                                    (engine/structured_output.py); not with ignore_eos, min_tokens
                                                    or allowed_token_ids, which could leave no token to sample
    prediction       None | <= 256 KiB of text      OpenAI's Predicted Outputs; the intake tokenizes it into
    prediction_token_ids <= 65,536 ids              prediction_token_ids (a client may give them; an id past the
                                                    vocabulary refused as logit_bias's): drafts, never the output
    thinking_token_budget None | 0 .. 2**31-1       vLLM's; the thinking's end forced at the budget
                                                    (engine/thinking_budget.py); not with structured outputs
    think_start_token_ids, think_end_token_ids      the thinking's delimiters, <= 16 ids each (the intake's from
                     <= 16 ids in 0 .. 2**31-1      ``<think>``/``</think>``; a client may give them)

Logits processing (backends/logits_adjust.py applies it, the same for every backend), in the order of vLLM V1's sampler
(vllm/v1/sample/sampler.py): outside ``allowed_token_ids`` (when given) every token is banned; while fewer than
``min_tokens`` tokens are out, EOS (unless ``ignore_eos``) and ``stop_token_ids`` are banned; a bad word's last token is
banned where the output so far ends with the rest of it (vLLM's ``bad_words``, engine/bad_words.py); ``logit_bias`` is
added; then ``repetition_penalty`` divides the positive logits and multiplies the negative ones of every token in the
prompt or the output so far; then ``frequency_penalty`` times a token's count in the output, plus ``presence_penalty``
where that count is not 0, is subtracted (OpenAI's formula). A ``structured_outputs`` constraint bans every token its
grammar does not allow next. Then temperature, then ``min_p`` (tokens below ``min_p`` times the most likely one's
probability are dropped), then top-k and top-p. Reported logprobs stay those of the raw logits.
"""

from __future__ import annotations

import math

import msgspec

from engine.structured_output import StructuredOutput, StructuredOutputError

MAX_LOGPROBS = 20
MAX_CACHE_SALT_CHARS = 1024  # vLLM's bound on cache_salt
MAX_INT32 = 2**31 - 1
MAX_TEMPERATURE = 100.0
MAX_TOP_K = MAX_INT32
MAX_TOKENS = MAX_INT32
MAX_TOKEN_ID = MAX_INT32
MAX_SEED = 2**63 - 1
MAX_STOP_STRINGS = 16
MAX_STOP_CHARS = 1024
MAX_STOP_TOKEN_IDS = 256
MAX_PENALTY = 2.0  # presence and frequency: OpenAI's [-2, 2]
MAX_REPETITION_PENALTY = 100.0
MAX_LOGIT_BIAS_ENTRIES = 300
MAX_LOGIT_BIAS = 100.0  # OpenAI's [-100, 100]
MAX_ALLOWED_TOKEN_IDS = 16_384
MAX_BAD_WORDS = 128
MAX_BAD_WORD_CHARS = 1024
MAX_BAD_WORD_SEQUENCES = 2 * MAX_BAD_WORDS  # each word, and each with a leading space where that tokenizes apart
MAX_BAD_WORD_TOKENS = 4 * MAX_BAD_WORD_CHARS  # a word's UTF-8 bytes, one token each (a byte tokenizer)
MAX_PREDICTION_CHARS = 1 << 18  # a predicted output (an edited file): 256 KiB of text
MAX_PREDICTION_TOKENS = 1 << 16  # its tokens (more: refused, naming ``prediction``)
MAX_THINK_DELIMITER_TOKENS = 16  # ``</think>``'s tokens: a special token, or a few under a tokenizer without it
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
    presence_penalty / frequency_penalty: OpenAI's penalties on the tokens generated so far (0: off).
    repetition_penalty: vLLM's (and HF's) penalty on every token of the prompt and the output (1: off).
    logit_bias: (token id, bias) pairs added to the logits (OpenAI's ``logit_bias``, its keys as ints).
    min_p: drop the tokens less likely than ``min_p`` times the most likely one (0: off).
    min_tokens: EOS and ``stop_token_ids`` are banned, and stop strings not matched, until this many are out.
    allowed_token_ids: when not empty, the only ids that may be sampled (vLLM's; a label set for classification).
    structured_outputs: a constraint on the output's shape (a JSON schema, a regex, choices, a grammar), or None.
    prompt_logprobs: None, or the number (0..MAX_LOGPROBS) of top alternatives to report per prompt token with the
        prompt token's own log-probability and rank (vLLM's; engine/prompt_logprobs.py).
    truncate_prompt_tokens: keep only the prompt's last k tokens (vLLM's left truncation; None: the whole prompt).
    include_stop_str_in_output: a matched stop string stays at the end of the text (vLLM's; default: cut off).
    skip_special_tokens: leave special tokens' text out of the output text (vLLM's; default True).
    embed: the first output also carries the prompt's embedding (engine/embeddings.py; /v1/embeddings asks it).
    cache_salt: vLLM's: the prefix cache is salted with it, so only requests with the same salt share cached
        blocks (engine/prefix_key.py); None: the shared cache. 1..1024 characters.
    bad_words: vLLM's: words not to generate: a word's last token is banned wherever the output so far ends with
        the tokens before it (engine/bad_words.py).
    bad_words_token_ids: the words' token sequences, as the intake tokenized them (vLLM's rule: each word, and
        each word after a space where that is other tokens); the engine reads these, not the strings.
    prediction: OpenAI's Predicted Outputs: text the output is expected to mostly repeat (an edited file); a node
        that speculates drafts from it (engine/spec/prediction_drafts.py). The output is the same with or without.
    prediction_token_ids: the prediction as the intake tokenized it (or as a client gave it); the engine reads these.
    thinking_token_budget: vLLM's: the most tokens a reasoning model may think; at it, the thinking's end delimiter is
        forced (engine/thinking_budget.py). None: no budget.
    think_start_token_ids / think_end_token_ids: the thinking's delimiters as tokens (the intake's, from ``<think>``
        and ``</think>``, or a client's own); a budget without an end delimiter is refused by the engine.
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
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    logit_bias: tuple[tuple[int, float], ...] = ()
    min_p: float = 0.0
    min_tokens: int = 0
    allowed_token_ids: tuple[int, ...] = ()
    structured_outputs: StructuredOutput | None = None
    prompt_logprobs: int | None = None
    truncate_prompt_tokens: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True
    embed: bool = False
    cache_salt: str | None = None
    bad_words: tuple[str, ...] = ()
    bad_words_token_ids: tuple[tuple[int, ...], ...] = ()
    prediction: str | None = None
    prediction_token_ids: tuple[int, ...] = ()
    thinking_token_budget: int | None = None
    think_start_token_ids: tuple[int, ...] = ()
    think_end_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            msgspec.structs.force_setattr(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            msgspec.structs.force_setattr(self, "stop", _as_tuple("stop", self.stop))
        if not isinstance(self.stop_token_ids, tuple):
            msgspec.structs.force_setattr(self, "stop_token_ids", _as_tuple("stop_token_ids", self.stop_token_ids))
        if not isinstance(self.allowed_token_ids, tuple):
            allowed = _as_tuple("allowed_token_ids", self.allowed_token_ids)
            msgspec.structs.force_setattr(self, "allowed_token_ids", allowed)
        if not isinstance(self.bad_words, tuple):
            msgspec.structs.force_setattr(self, "bad_words", _as_tuple("bad_words", self.bad_words))
        sequences = self.bad_words_token_ids
        if not isinstance(sequences, tuple) or any(type(s) is not tuple for s in sequences):
            tuples = tuple(_as_tuple("bad_words_token_ids", s) for s in _as_tuple("bad_words_token_ids", sequences))
            msgspec.structs.force_setattr(self, "bad_words_token_ids", tuples)
        if not isinstance(self.prediction_token_ids, tuple):
            predicted = _as_tuple("prediction_token_ids", self.prediction_token_ids)
            msgspec.structs.force_setattr(self, "prediction_token_ids", predicted)
        for name in ("think_start_token_ids", "think_end_token_ids"):
            if not isinstance(getattr(self, name), tuple):
                msgspec.structs.force_setattr(self, name, _as_tuple(name, getattr(self, name)))
        if not isinstance(self.logit_bias, tuple) or any(type(pair) is not tuple for pair in self.logit_bias):
            msgspec.structs.force_setattr(self, "logit_bias", _as_pairs(self.logit_bias))
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
        for name in ("logprobs", "prompt_logprobs"):
            lp = getattr(self, name)
            if lp is not None and (not _is_int(lp) or not 0 <= lp <= MAX_LOGPROBS):
                raise SamplingParamsError(
                    name, f"must be None or an integer in [0, {MAX_LOGPROBS}], got {show_value(lp)}"
                )

        for name in ("include_stop_str_in_output", "skip_special_tokens", "embed"):
            if not isinstance(getattr(self, name), bool):
                raise SamplingParamsError(name, f"must be a boolean, got {show_value(getattr(self, name))}")
        k = self.truncate_prompt_tokens
        if k is not None and (not _is_int(k) or not 1 <= k <= MAX_INT32):
            raise SamplingParamsError("truncate_prompt_tokens", f"must be None or an integer >= 1, got {show_value(k)}")
        salt = self.cache_salt
        if salt is not None and (not isinstance(salt, str) or not 1 <= len(salt) <= MAX_CACHE_SALT_CHARS):
            raise SamplingParamsError("cache_salt", f"must be None or a string of 1..{MAX_CACHE_SALT_CHARS} characters")
        prediction = self.prediction
        if prediction is not None and (not isinstance(prediction, str) or len(prediction) > MAX_PREDICTION_CHARS):
            raise SamplingParamsError(
                "prediction", f"must be None or a string of at most {MAX_PREDICTION_CHARS} characters"
            )
        predicted = self.prediction_token_ids
        if len(predicted) > MAX_PREDICTION_TOKENS or not all(_is_int(t) and 0 <= t <= MAX_TOKEN_ID for t in predicted):
            message = f"must be at most {MAX_PREDICTION_TOKENS} integers in [0, 2**31-1]"
            raise SamplingParamsError("prediction_token_ids", message)
        self._validate_logits_processing()

    def _validate_logits_processing(self) -> None:
        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            if not _is_number(value) or not math.isfinite(value) or not -MAX_PENALTY <= value <= MAX_PENALTY:
                raise SamplingParamsError(name, f"must be a number in [-2, 2], got {show_value(value)}")
        r = self.repetition_penalty
        if not _is_number(r) or not math.isfinite(r) or not 0 < r <= MAX_REPETITION_PENALTY:
            message = f"must be a number in (0, {MAX_REPETITION_PENALTY:g}] (1: off), got {show_value(r)}"
            raise SamplingParamsError("repetition_penalty", message)
        if len(self.logit_bias) > MAX_LOGIT_BIAS_ENTRIES:
            raise SamplingParamsError(
                "logit_bias", f"at most {MAX_LOGIT_BIAS_ENTRIES} tokens, got {len(self.logit_bias)}"
            )
        for pair in self.logit_bias:
            token_id, bias = pair if len(pair) == 2 else (None, None)
            if not _is_int(token_id) or not 0 <= token_id <= MAX_TOKEN_ID:
                message = f"token ids must be integers in [0, 2**31-1], got {show_value(pair)}"
                raise SamplingParamsError("logit_bias", message)
            if not _is_number(bias) or not math.isfinite(bias) or not -MAX_LOGIT_BIAS <= bias <= MAX_LOGIT_BIAS:
                message = f"biases must be numbers in [-100, 100], got {show_value(pair)}"
                raise SamplingParamsError("logit_bias", message)
        if len({token_id for token_id, _ in self.logit_bias}) != len(self.logit_bias):
            raise SamplingParamsError("logit_bias", "a token id is given twice")
        m = self.min_p
        if not _is_number(m) or not math.isfinite(m) or not 0 <= m <= 1:
            raise SamplingParamsError("min_p", f"must be a number in [0, 1], got {show_value(m)}")
        allowed = self.allowed_token_ids
        if len(allowed) > MAX_ALLOWED_TOKEN_IDS:
            message = f"at most {MAX_ALLOWED_TOKEN_IDS} ids, got {len(allowed)}"
            raise SamplingParamsError("allowed_token_ids", message)
        for tid in allowed:
            if not _is_int(tid) or not 0 <= tid <= MAX_TOKEN_ID:
                message = f"must be integers in [0, 2**31-1], got {show_value(tid)}"
                raise SamplingParamsError("allowed_token_ids", message)
        self._validate_bad_words()
        n = self.min_tokens
        if not _is_int(n) or not 0 <= n <= self.max_tokens:
            raise SamplingParamsError(
                "min_tokens", f"must be an integer in [0, max_tokens ({self.max_tokens})], got {show_value(n)}"
            )
        self._validate_structured_outputs()
        self._validate_thinking()

    def _validate_thinking(self) -> None:
        budget = self.thinking_token_budget
        if budget is not None and (not _is_int(budget) or not 0 <= budget <= MAX_INT32):
            message = f"must be None or an integer in [0, 2**31-1], got {show_value(budget)}"
            raise SamplingParamsError("thinking_token_budget", message)
        for name in ("think_start_token_ids", "think_end_token_ids"):
            ids = getattr(self, name)
            if len(ids) > MAX_THINK_DELIMITER_TOKENS or not all(_is_int(t) and 0 <= t <= MAX_TOKEN_ID for t in ids):
                message = f"must be at most {MAX_THINK_DELIMITER_TOKENS} integers in [0, 2**31-1]"
                raise SamplingParamsError(name, message)
        if budget is not None and self.structured_outputs is not None:  # the grammar would refuse the forced end
            raise SamplingParamsError("thinking_token_budget", "cannot be combined with structured outputs")

    def _validate_bad_words(self) -> None:
        if len(self.bad_words) > MAX_BAD_WORDS:
            raise SamplingParamsError("bad_words", f"at most {MAX_BAD_WORDS} words, got {len(self.bad_words)}")
        for word in self.bad_words:
            if not isinstance(word, str) or not word.strip() or len(word) > MAX_BAD_WORD_CHARS:
                message = (
                    f"must be strings of 1 to {MAX_BAD_WORD_CHARS} characters, not all spaces, got {show_value(word)}"
                )
                raise SamplingParamsError("bad_words", message)
        sequences = self.bad_words_token_ids
        if len(sequences) > MAX_BAD_WORD_SEQUENCES:
            message = f"at most {MAX_BAD_WORD_SEQUENCES} sequences, got {len(sequences)}"
            raise SamplingParamsError("bad_words_token_ids", message)
        for sequence in sequences:
            if not 1 <= len(sequence) <= MAX_BAD_WORD_TOKENS or not all(
                _is_int(t) and 0 <= t <= MAX_TOKEN_ID for t in sequence
            ):
                message = (
                    f"each must be 1 to {MAX_BAD_WORD_TOKENS} integers in [0, 2**31-1], got {show_value(sequence)}"
                )
                raise SamplingParamsError("bad_words_token_ids", message)

    def _validate_structured_outputs(self) -> None:
        spec = self.structured_outputs
        if spec is None:
            return
        if not isinstance(spec, StructuredOutput):
            raise SamplingParamsError("structured_outputs", f"must be a StructuredOutput, got {show_value(spec)}")
        try:
            spec.check()
        except StructuredOutputError as error:
            raise SamplingParamsError("structured_outputs", str(error)) from None
        # each of these could ban the only tokens the grammar allows (its EOS once complete): nothing left to sample
        for name, clash in (
            ("ignore_eos", self.ignore_eos),
            ("min_tokens", self.min_tokens > 0),
            ("allowed_token_ids", bool(self.allowed_token_ids)),
        ):
            if clash:
                raise SamplingParamsError(name, "cannot be combined with structured outputs")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0

    @property
    def penalizes(self) -> bool:
        """A penalty on the tokens seen so far: the sampler needs the request's tokens."""
        return self.presence_penalty != 0.0 or self.frequency_penalty != 0.0 or self.repetition_penalty != 1.0

    @property
    def processes_logits(self) -> bool:
        """Any logits processing before temperature (an allowed set, a grammar, a penalty, a bias, min_tokens' or the
        bad words' ban, a thinking budget) or min_p after it."""
        processed = self.penalizes or bool(self.logit_bias) or self.min_tokens > 0 or self.min_p > 0.0
        processed = processed or bool(self.bad_words_token_ids)
        processed = processed or self.thinking_token_budget is not None
        return processed or bool(self.allowed_token_ids) or self.structured_outputs is not None


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _as_tuple(field_name: str, value: object) -> tuple:
    try:
        return tuple(value)  # type: ignore[arg-type]
    except TypeError:
        raise SamplingParamsError(field_name, f"must be a list, got {show_value(value)}") from None


def _as_pairs(value: object) -> tuple:
    """``logit_bias`` as a tuple of (id, bias) tuples: from pairs (a list off the wire) or a {id: bias} mapping."""
    if isinstance(value, dict):
        return tuple(value.items())
    try:
        return tuple(tuple(pair) for pair in value)  # type: ignore[union-attr]
    except TypeError:
        raise SamplingParamsError("logit_bias", f"must be (token id, bias) pairs, got {show_value(value)}") from None


def show_value(value: object) -> str:
    """``repr(value)`` cut to a readable length (a client's value is quoted back, never echoed whole)."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN_CHARS else f"{text[: _MAX_SHOWN_CHARS - 3]}..."
