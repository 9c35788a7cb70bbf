"""Model-free drafts by prompt lookup: continue the context the way it continued last time.

If the last ``n`` tokens (n from ``max_n`` down to ``min_n``) occurred earlier in the request's own tokens,
the tokens that followed that occurrence are proposed::

    tokens   ... A B C D E ... X A B C   <- suffix "A B C" (n = 3) seen before
                       ^^^^^ proposed: D E ... (up to k tokens)

Re-implementation of prompt-lookup decoding (Apoorv Saxena, github.com/apoorvumang/prompt-lookup-decoding,
2023) as vLLM ships it (vllm v0.6.3, ``vllm/spec_decode/ngram_worker.py``: ``ngram_prompt_lookup_max`` /
``_min``), written anew: instead of a scan of the whole context each step, each request keeps an index
{n-gram -> end of its latest occurrence} grown incrementally as tokens arrive (a request's tokens only
ever grow: drafts are never appended, only accepted tokens), so a lookup is O(max_n) dict probes. The
latest occurrence wins (repetitive text repeats its most recent form). Deterministic drafts: exact under
greedy and sampled verification alike (engine/spec/proposer.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from engine.spec.proposer import Draft, DraftRequest


@dataclass(slots=True)
class _NgramIndex:
    # n-gram (as a tuple) -> end (exclusive) of its latest occurrence that has a known continuation
    ends: dict[tuple[int, ...], int] = field(default_factory=dict)
    num_indexed: int = 0  # n-grams ending at positions < num_indexed are in ``ends``


class NgramProposer:
    """Prompt-lookup drafts. ``min_n``/``max_n``: the n-gram lengths tried, longest first."""

    name = "ngram"

    def __init__(self, min_n: int = 1, max_n: int = 4) -> None:
        if not 1 <= min_n <= max_n:
            raise ValueError(f"need 1 <= min_n <= max_n, got min_n={min_n}, max_n={max_n}")
        self.min_n = min_n
        self.max_n = max_n
        self._indexes: dict[str, _NgramIndex] = {}

    def propose(self, requests: list[DraftRequest]) -> dict[str, Draft]:
        drafts: dict[str, Draft] = {}
        for r in requests:
            index = self._indexes.get(r.req_id)
            if index is None:
                index = self._indexes[r.req_id] = _NgramIndex()
            token_ids = r.token_ids if isinstance(r.token_ids, list) else list(r.token_ids)
            self._extend(index, token_ids)
            draft = self._lookup(index, token_ids, r.num_spec_tokens)
            if draft:
                drafts[r.req_id] = Draft(draft)
        return drafts

    def drop(self, req_ids: Iterable[str]) -> None:
        for req_id in req_ids:
            self._indexes.pop(req_id, None)

    def _extend(self, index: _NgramIndex, token_ids: Sequence[int]) -> None:
        """Index every n-gram ending at positions [num_indexed, len - 1): each has a continuation token."""
        ends = index.ends
        stop = len(token_ids) - 1  # an n-gram ending at the last token has no continuation yet
        for end in range(max(index.num_indexed, 1), stop + 1):
            for n in range(self.min_n, min(self.max_n, end) + 1):
                ends[tuple(token_ids[end - n : end])] = end
        index.num_indexed = max(index.num_indexed, stop + 1)

    def _lookup(self, index: _NgramIndex, token_ids: Sequence[int], k: int) -> list[int]:
        num_tokens = len(token_ids)
        for n in range(min(self.max_n, num_tokens - 1), self.min_n - 1, -1):
            end = index.ends.get(tuple(token_ids[num_tokens - n :]))
            if end is not None:
                # the continuation may run into the suffix itself (a period shorter than k): still valid
                return list(token_ids[end : min(end + k, num_tokens)])
        return []
