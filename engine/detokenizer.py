"""Incremental detokenization and stop strings, per request.

Sans-IO: works with any tokenizer that has ``decode(ids, skip_special_tokens=True) -> str``.

Streaming text must never contain half a UTF-8 character nor the beginning of a stop string that
may still complete, so each delta is computed over a sliding window of token ids::

    output ids:  [ ... | prefix_offset ......... read_offset ......... len(ids) ]
                          text already emitted    ▲  new ids decoded against it

and the last ``len(longest stop string) - 1`` characters are held back until the request ends.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol


class Decoder(Protocol):
    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...


class IncrementalDetokenizer:
    """Turns a growing list of output token ids into text deltas; finds stop strings."""

    def __init__(
        self,
        decoder: Decoder,
        stop: Sequence[str] = (),
        min_tokens: int = 0,
        include_stop: bool = False,
        skip_special_tokens: bool = True,
    ) -> None:
        """``min_tokens``: a stop string is looked for only in the text after that of the first ``min_tokens``
        tokens (SamplingParams.min_tokens), as vLLM means it to (its V1 detokenizer once did not:
        vllm-project/vllm#21987). ``include_stop``: a matched stop string stays at the end of the text
        (``include_stop_str_in_output``); ``skip_special_tokens``: special tokens have no text."""
        self._decoder = decoder
        self._include_stop = include_stop
        self._skip_special = skip_special_tokens
        self._stop = tuple(stop)
        self._min_tokens = min_tokens
        self._stop_from = 0  # where a stop string may begin: after the text of the first min_tokens tokens
        self._holdback_chars = max((len(s) for s in self._stop), default=1) - 1
        self._token_ids: list[int] = []
        self._prefix_offset = 0
        self._read_offset = 0
        self.text = ""  # all decoded text so far (stop string excluded once matched)
        self._num_emitted_chars = 0
        self.stop_string: str | None = None  # set when a stop string matched

    def add_tokens(self, new_token_ids: Sequence[int]) -> None:
        """Decode newly sampled ids; stops decoding once a stop string has matched."""
        for token_id in new_token_ids:
            if self.stop_string is not None:
                return
            self._token_ids.append(token_id)
            skip = self._skip_special
            prefix_text = self._decoder.decode(self._token_ids[self._prefix_offset : self._read_offset], skip)
            new_text = self._decoder.decode(self._token_ids[self._prefix_offset :], skip)
            if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
                continue  # an incomplete UTF-8 sequence, or a token that decodes to nothing
            delta = new_text[len(prefix_text) :]
            self._prefix_offset = self._read_offset
            self._read_offset = len(self._token_ids)
            self._append_text(delta)

    def _append_text(self, delta: str) -> None:
        start = max(0, len(self.text) - self._holdback_chars, self._stop_from)
        self.text += delta
        if not self._stop:
            return
        if len(self._token_ids) <= self._min_tokens:
            self._stop_from = len(self.text)
            return
        best: tuple[int, str] | None = None
        for s in self._stop:
            i = self.text.find(s, start)
            if i != -1 and (best is None or i < best[0]):
                best = (i, s)
        if best is not None:
            self.text = self.text[: best[0] + (len(best[1]) if self._include_stop else 0)]
            self.stop_string = best[1]

    def take_delta(self, finished: bool) -> str:
        """Text not yet returned. While running, the stop-string holdback stays back."""
        end = len(self.text) if finished or self.stop_string is not None else len(self.text) - self._holdback_chars
        if end <= self._num_emitted_chars:
            return ""
        delta = self.text[self._num_emitted_chars : end]
        self._num_emitted_chars = end
        return delta
