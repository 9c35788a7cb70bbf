"""Drafts from a request's predicted output (OpenAI's Predicted Outputs: ``prediction`` on a chat completion, the text
the answer is expected to mostly repeat, as when a model edits a file it was given).

The prediction's tokens are the drafts, verified as any proposer's are (engine/spec/speculator.py), so the output is
exactly what it would be without one; only the number of steps changes. Per request, a cursor into the prediction
follows the output::

    output so far  = prediction[:c]            ─► drafts prediction[c : c + k]
    output departs from the prediction         ─► re-found where the output's last ``min_n`` tokens occur in the
                                                  prediction: of the occurrences nearest the cursor, the one whose
                                                  match runs furthest back (up to ``max_n`` tokens), then the
                                                  nearest; its continuation is drafted (none: the node's own proposer
                                                  drafts until one is found)

So an edit in the middle of a file costs a few plain steps, then the rest of the file is drafted again. A request
that never departs from its prediction pays a slice comparison a step; the first departure indexes the prediction
once ({min_n-gram: its ends}, one entry per position), and a search weighs at most ``max_candidates`` occurrences.
Sans-IO; owned by the Speculator, which gives each request with a prediction up to its largest k. vLLM and SGLang
take ``prediction`` without using it; this is the rule of OpenAI's API reference (the prediction's tokens that the
output does not repeat are "rejected prediction tokens") with prompt lookup's mechanics.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.prompt import PromptError
from engine.sampling_params import SamplingParams, SamplingParamsError


def tokenized(tokenizer: Any, params: SamplingParams) -> SamplingParams:
    """``params`` with its ``prediction`` tokenized into ``prediction_token_ids`` (unless it names ids already, or no
    prediction), as the output would spell it (no special tokens), the text dropped (the node reads the ids);
    PromptError naming ``prediction`` past the bounds."""
    if not params.prediction or params.prediction_token_ids:
        return params
    try:
        token_ids = tokenizer.encode(params.prediction, add_special_tokens=False)
        return msgspec.structs.replace(params, prediction_token_ids=tuple(token_ids), prediction=None)  # ids travel
    except SamplingParamsError as e:
        raise PromptError(str(e).replace("prediction_token_ids", "prediction", 1), "prediction") from None
    except ValueError as e:  # a lone surrogate
        raise PromptError(f"prediction: {e}", "prediction") from None


@dataclass(slots=True)
class _Track:
    prediction: tuple[int, ...]
    ends: dict[tuple[int, ...], list[int]] | None = None  # min_n-gram → its ends, sorted (built at the first loss)
    cursor: int = 0  # prediction[cursor:] continues the output's first ``synced`` tokens
    synced: int | None = 0  # None: lost (the output departed and has not been found again since)


class PredictionDrafts:
    """Each request's cursor into its prediction; ``drafts`` proposes, ``drop`` forgets."""

    def __init__(self, min_n: int = 2, max_n: int = 8, max_candidates: int = 64) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.min_n = min_n
        self.max_n = max_n
        self.max_candidates = max_candidates  # occurrences weighed per search, the nearest the cursor
        self._tracks: dict[str, _Track] = {}

    def drafts(self, req_id: str, prediction: Sequence[int], output: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` drafts continuing ``output`` (the request's output tokens so far) from ``prediction``."""
        track = self._tracks.get(req_id)
        if track is None:
            track = self._tracks[req_id] = _Track(tuple(prediction))
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

    def _find(self, track: _Track, output: Sequence[int]) -> bool:
        """Re-sync the cursor where the output's last ``min_n`` tokens occur in the prediction: of the occurrences
        nearest the cursor, the one whose match runs furthest back (up to ``max_n``), then the nearest, then the later;
        False when they occur nowhere (or the output is shorter than ``min_n``)."""
        n = self.min_n
        if len(output) < n:
            return False
        if track.ends is None:  # one entry per position, once per request that ever departs from its prediction
            pred, ends = track.prediction, {}
            for end in range(n, len(pred)):  # an occurrence at the very end has nothing to draft after it
                ends.setdefault(pred[end - n : end], []).append(end)
            track.ends = ends
        found = track.ends.get(tuple(output[len(output) - n :]))
        if not found:
            return False
        i = bisect_left(found, track.cursor)
        half = self.max_candidates // 2
        candidates = found[max(0, i - half) : i + half]
        track.cursor = max(
            candidates, key=lambda end: (self._run(track.prediction, end, output), -abs(end - track.cursor), end)
        )
        track.synced = len(output)
        return True

    def _run(self, pred: tuple[int, ...], end: int, output: Sequence[int]) -> int:
        """How many tokens before ``end`` in the prediction match the output's last ones (at most ``max_n``)."""
        run = 0
        while run < self.max_n and run < end and run < len(output) and pred[end - 1 - run] == output[-1 - run]:
            run += 1
        return run
