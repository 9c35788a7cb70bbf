"""A token's text and bytes, as OpenAI's logprobs show them (``"token": " Paris"``, ``"bytes": [32, 80, …]``).

The bytes are the token's own (a byte-level BPE token may hold part of a UTF-8 character; its bytes let a
client join such tokens back into text); the text is those bytes decoded, a partial character replaced by
U+FFFD, as vLLM shows it. Tokenizers that know their tokens' bytes say so with ``token_bytes(id) -> bytes``
(backends/checkpoint/tokenizer.py, backends/fake/byte_tokenizer.py); for any other the text is
``decode([id])`` and the bytes its UTF-8. Without a tokenizer, tokens are named ``"token_id:<id>"`` (vLLM's
``return_tokens_as_token_ids`` form) and have no bytes; a request that asks for that form gets it (TokenIdText).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

MIN_LOGPROB = -9999.0  # JSON has no -inf; vLLM reports an impossible token's logprob as this


class TokenText:
    """Cached id → (text, bytes) lookups over one tokenizer (None: names only)."""

    def __init__(self, tokenizer: Any | None) -> None:
        self.tokenizer = tokenizer
        self._cache: dict[int, tuple[str, list[int] | None]] = {}

    def lookup(self, token_id: int) -> tuple[str, list[int] | None]:
        found = self._cache.get(token_id)
        if found is None:
            found = self._cache[token_id] = self._lookup(token_id)
        return found

    def _lookup(self, token_id: int) -> tuple[str, list[int] | None]:
        tokenizer = self.tokenizer
        if tokenizer is None or not 0 <= token_id < getattr(tokenizer, "vocab_size", 1 << 31):
            return f"token_id:{token_id}", None
        token_bytes = getattr(tokenizer, "token_bytes", None)
        if token_bytes is not None:
            raw = token_bytes(token_id)
            return raw.decode("utf-8", errors="replace"), list(raw)
        text = tokenizer.decode([token_id], skip_special_tokens=False)
        return text, list(text.encode("utf-8", errors="replace"))

    def texts(self, token_ids: Sequence[int]) -> list[str]:
        return [self.lookup(t)[0] for t in token_ids]


class TokenIdText:
    """vLLM's ``return_tokens_as_token_ids``: every token named ``"token_id:<id>"`` (its bytes that name's), so a
    client can tell tokens apart whose text is not valid UTF-8 on its own. TokenText's ``lookup`` interface."""

    def lookup(self, token_id: int) -> tuple[str, list[int] | None]:
        name = f"token_id:{token_id}"
        return name, list(name.encode("ascii"))


def clamp_logprob(logprob: float) -> float:
    """A JSON-safe logprob: -inf (and NaN, which compares false) become MIN_LOGPROB."""
    return logprob if logprob >= MIN_LOGPROB else MIN_LOGPROB
