"""Reasoning parsers (controlplane/gateway/reasoning_parsers.py): a reply's thinking split from its answer by vLLM's
rule, and a streamed reply split exactly as the whole one, however its text is cut into deltas."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from controlplane.gateway.reasoning_parsers import ReasoningSplit, reasoning_parser_for, split_reasoning


@pytest.mark.parametrize(
    "text, reasoning, content",
    [
        ("<think>\nLet me add.\n</think>\n\n4", "\nLet me add.\n", "\n\n4"),  # the model opens the block
        ("Let me add.</think>4", "Let me add.", "4"),  # the template opened it (DeepSeek-R1, Qwen3.5)
        ("  \n<think>x</think>y", "x", "y"),  # blanks before the opening tag go with it
        ("<think>still thinking", "still thinking", None),  # cut short: all reasoning, no content
        ("plain answer", "plain answer", None),  # no end tag: reasoning (the model never finished thinking)
        ("<think></think>answer", None, "answer"),
        ("<think>r</think>", "r", None),  # ended right after thinking
        ("a</think>b</think>c", "a", "b</think>c"),  # the first end tag ends it
        ("intro <think>x</think>y", "intro <think>x", "y"),  # a <think> inside the text is text
        ("", None, None),
    ],
)
def test_a_whole_reply_is_split_at_the_first_end_tag(text, reasoning, content):
    assert split_reasoning(text) == (reasoning, content)


def _stream(text: str, cuts: list[int]) -> tuple[str, str, list[tuple[str, str]]]:
    split, sent = ReasoningSplit(), []
    bounds = sorted({0, len(text), *(c % (len(text) + 1) for c in cuts)})
    for start, end in itertools.pairwise(bounds):
        sent.append(split.feed(text[start:end]))
    sent.append(split.finish())
    return "".join(r for r, _ in sent), "".join(c for _, c in sent), sent


FRAGMENTS = st.sampled_from(["<think>", "</think>", "<th", "ink>", "</", "think", "</think", ">", "a", "é", " ", "\n"])


@given(st.lists(FRAGMENTS, max_size=12).map("".join), st.lists(st.integers(0, 200), max_size=8))
def test_a_streamed_reply_sends_what_the_whole_reply_has(text, cuts):
    reasoning, content = split_reasoning(text)
    streamed_reasoning, streamed_content, _ = _stream(text, cuts)
    assert streamed_reasoning == (reasoning or "") and streamed_content == (content or "")


def test_a_tail_that_may_open_the_end_tag_is_held_back_and_nothing_else():
    split = ReasoningSplit()
    assert split.feed("<thi") == ("", "")  # the opening tag may be coming
    assert split.feed("nk>Two and two") == ("Two and two", "")
    assert split.feed(" make four</th") == (" make four", "")  # "</th" waits
    assert split.feed("ink>\n4") == ("", "\n4")
    assert split.feed(" apples") == ("", " apples")  # the answer goes as it comes
    assert split.finish() == ("", "")
    cut_short = ReasoningSplit()
    assert cut_short.feed("hmm </") == ("hmm ", "")
    assert cut_short.finish() == ("</", "")  # no end came: the held text was reasoning


def test_qwen3_with_thinking_turned_off_is_all_content():
    assert reasoning_parser_for("qwen3", {"enable_thinking": False}) is None
    assert reasoning_parser_for("qwen3", {"enable_thinking": True}) == "qwen3"
    assert reasoning_parser_for("qwen3", None) == "qwen3"
    assert reasoning_parser_for("deepseek_r1", {"enable_thinking": False}) == "deepseek_r1"  # no switch in R1
    assert reasoning_parser_for(None, None) is None
