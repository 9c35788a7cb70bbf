"""Prompt-lookup drafts: the latest occurrence of the longest suffix n-gram, incrementally indexed."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.sampling_params import SamplingParams
from engine.spec.ngram_proposer import NgramProposer
from engine.spec.proposer import DraftRequest, Proposer

PARAMS = SamplingParams(temperature=0.0)


def _propose(proposer: NgramProposer, tokens: list[int], k: int, req_id: str = "r") -> list[int]:
    draft = proposer.propose([DraftRequest(req_id, tokens, k, PARAMS)]).get(req_id)
    return [] if draft is None else draft.token_ids


def _brute_force(tokens: list[int], k: int, min_n: int, max_n: int) -> list[int]:
    """The specification: for n from max_n down, the latest earlier occurrence of the suffix n-gram."""
    num = len(tokens)
    for n in range(min(max_n, num - 1), min_n - 1, -1):
        suffix = tokens[num - n :]
        for end in range(num - 1, n - 1, -1):
            if tokens[end - n : end] == suffix:
                return tokens[end : min(end + k, num)]
    return []


def test_is_a_proposer():
    assert isinstance(NgramProposer(), Proposer)


def test_continues_the_latest_occurrence_of_the_longest_suffix():
    p = NgramProposer(min_n=1, max_n=3)
    #          0  1  2  3  4  5  6  7  8  9
    tokens = [5, 1, 2, 3, 9, 1, 2, 4, 7, 1, 2]
    # suffix (1, 2) occurs ending at 3 (-> 3 9 ...) and at 7 (-> 4 7 ...): the latest wins
    assert _propose(p, tokens, 3) == [4, 7, 1]


def test_a_longer_match_beats_a_later_shorter_one():
    p = NgramProposer(min_n=1, max_n=3)
    tokens = [8, 1, 2, 3, 6, 2, 5, 8, 1, 2]
    # (8, 1, 2) matches at the start -> 3; (2,) alone would match later -> 5
    assert _propose(p, tokens, 2) == [3, 6]


def test_no_match_no_draft_and_finished_requests_are_forgotten():
    p = NgramProposer(min_n=2, max_n=3)
    assert _propose(p, [1, 2, 3, 4], 4) == []
    p.drop(["r"])
    assert p._indexes == {}


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 3), min_size=1, max_size=40),
    growth=st.lists(st.integers(1, 5), max_size=6),
    k=st.integers(1, 6),
    min_n=st.integers(1, 2),
    extra_n=st.integers(0, 3),
)
def test_incremental_index_matches_a_full_scan(tokens, growth, k, min_n, extra_n):
    """Growing a request's tokens step by step gives the same drafts as a scan of the whole context."""
    max_n = min_n + extra_n
    p = NgramProposer(min_n, max_n)
    cut = 1
    for g in [*growth, len(tokens)]:
        cut = min(len(tokens), cut + g)
        context = tokens[:cut]
        assert _propose(p, context, k) == _brute_force(context, k, min_n, max_n)
