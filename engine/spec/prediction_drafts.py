"""Drafts from a request's predicted output (OpenAI's Predicted Outputs: ``prediction`` on a chat completion, the text
the answer is expected to mostly repeat, as when a model edits a file it was given).

The prediction's tokens are the drafts, verified as any proposer's are (engine/spec/speculator.py), so the output is
exactly what it would be without one; only the number of steps changes. Per request, a cursor into the prediction
follows the output::

    output so far  = prediction[:c]            ─► drafts prediction[c : c + k]
    output departs from the prediction         ─► re-found: the output's last n tokens (n from ``max_n`` down to
                                                  ``min_n``) located in the prediction, at the occurrence nearest
                                                  the cursor; its continuation is drafted (none found: the node's
                                                  own proposer drafts until one is)

So an edit in the middle of a file costs a few plain steps, then the rest of the file is drafted again. The
prediction is indexed once per request ({n-gram: its ends}), a lookup is O(max_n) probes plus the occurrences of
the n-gram found. Sans-IO; owned by the Speculator, which gives each request with a prediction up to its largest k.
vLLM and SGLang take ``prediction`` without using it; this is the rule of OpenAI's API reference (the prediction's
tokens that the output does not repeat are "rejected prediction tokens") with prompt lookup's mechanics.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import msgspec

from engine.prompt import PromptError
from engine.sampling_params import SamplingParams, SamplingParamsError


def tokenized(tokenizer: Any, params: SamplingParams) -> SamplingParams:
    """``params`` with its ``prediction`` tokenized into ``prediction_token_ids`` (unless it names ids already, or no
    prediction), as the output would spell it (no special tokens); PromptError naming ``prediction`` past the
    bounds."""
    if not params.prediction or params.prediction_token_ids:
        return params
    try:
        token_ids = tokenizer.encode(params.prediction, add_special_tokens=False)
        return msgspec.structs.replace(params, prediction_token_ids=tuple(token_ids))
    except SamplingParamsError as e:
        raise PromptError(str(e).replace("prediction_token_ids", "prediction", 1), "prediction") from None
    except ValueError as e:  # a lone surrogate
        raise PromptError(f"prediction: {e}", "prediction") from None


@dataclass(slots=True)
class _Track:
    prediction: tuple[int, ...]
    ends: dict[tuple[int, ...], list[int]] = field(default_factory=dict)  # n-gram → ends of its occurrences, sorted
    cursor: int = 0  # prediction[cursor:] continues the output's first ``synced`` tokens
    synced: int | None = 0  # None: lost (the output departed and no n-gram has been found since)


class PredictionDrafts:
    """Each request's cursor into its prediction; ``drafts`` proposes, ``drop`` forgets."""

    def __init__(self, min_n: int = 2, max_n: int = 8) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.min_n = min_n
        self.max_n = max_n
        self._tracks: dict[str, _Track] = {}

    def drafts(self, req_id: str, prediction: Sequence[int], output: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` drafts continuing ``output`` (the request's output tokens so far) from ``prediction``."""
        track = self._tracks.get(req_id)
        if track is None:
            track = self._tracks[req_id] = _Track(tuple(prediction))
            self._index(track)
        pred = track.prediction
        if track.synced is not None and track.synced <= len(output):
            new = output[track.synced :]
            if tuple(new) == pred[track.cursor : track.cursor + len(new)]:
                track.cursor += len(new)
                track.synced = len(output)
            else:
                track.synced = None
        if track.synced is None and not self._find(track, output):
            return []
        return list(pred[track.cursor : track.cursor + k])

    def drop(self, req_ids: Iterable[str]) -> None:
        for req_id in req_ids:
            self._tracks.pop(req_id, None)

    def __len__(self) -> int:
        return len(self._tracks)

    def _index(self, track: _Track) -> None:
        pred, ends = track.prediction, track.ends
        for n in range(self.min_n, self.max_n + 1):
            for end in range(n, len(pred)):  # an occurrence at the very end has nothing to draft after it
                ends.setdefault(pred[end - n : end], []).append(end)

    def _find(self, track: _Track, output: Sequence[int]) -> bool:
        """Re-sync the cursor on the output's longest suffix found in the prediction (its occurrence nearest the
        cursor, the later one on a tie); False when none is."""
        for n in range(min(self.max_n, len(output)), self.min_n - 1, -1):
            found = track.ends.get(tuple(output[len(output) - n :]))
            if found:
                i = bisect_left(found, track.cursor)
                near = [e for e in found[max(0, i - 1) : i + 1]]
                track.cursor = min(near, key=lambda e: (abs(e - track.cursor), -e))
                track.synced = len(output)
                return True
        return False
