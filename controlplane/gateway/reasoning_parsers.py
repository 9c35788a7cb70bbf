"""Reasoning parsers: a reasoning model's thinking split from its answer, chosen by the gateway's ``reasoning_parser``
(``zoo controlplane --reasoning-parser NAME``, vLLM's flag and names). Sans-IO.

    name          the model writes                           as vLLM's (vllm/reasoning/, main)
    deepseek_r1   [<think>]reasoning</think>answer           deepseek_r1_reasoning_parser.py (basic_parsers.py)
    qwen3         [<think>]reasoning</think>answer           qwen3_reasoning_parser.py

The rule, one for both (their chat templates differ in whether the prompt or the model opens the think block):

- a ``<think>`` the reply opens with (after blanks) is dropped;
- the text up to the first ``</think>`` is the reasoning, the text after it the answer: the message's ``content``, where
  tool calls are read (gateway/tool_calls.py), never from the reasoning;
- a reply without ``</think>`` was cut short while thinking: all of it is reasoning, and its content is null;
- qwen3 with ``chat_template_kwargs: {"enable_thinking": false}``: its template closes the think block in the prompt,
  so the reply is all answer (vLLM's serving layer reads that from the prompt and skips the parser); deepseek_r1 has
  no such switch.

The reply carries the reasoning as vLLM's does, ``reasoning``, and under ``reasoning_content``, the name vLLM used
before and many clients still read (the same text). A chat's ``include_reasoning: false`` (vLLM's extension) drops it.
Streamed, a choice's ``ReasoningSplit`` sends exactly the reasoning and content the whole reply has: a tail that may
be the start of ``</think>`` (or, at the reply's start, of ``<think>``) is held back until the next text decides it
(tests/controlplane/gateway/test_reasoning_parsers.py checks every split of a reply).

Deliberate differences from vLLM: it drops everything before a ``<think>`` anywhere in a whole reply (its
``partition``) and splits a streamed one by token ids, so the two may differ; here only an opening ``<think>`` is
dropped, by text, the same whole and streamed. qwen3's implicit end of reasoning at ``<tool_call>`` followed by
``<function=`` (Qwen3.5's tool format, which no parser here reads) is not taken.
"""

from __future__ import annotations

from controlplane.gateway.tool_parsers import tag_tail

THINK_START, THINK_END = "<think>", "</think>"
REASONING_PARSERS = ("deepseek_r1", "qwen3")


def reasoning_parser_for(parser: str | None, chat_template_kwargs: dict | None) -> str | None:
    """The parser a request's reply goes through: the gateway's, unless the request turned thinking off where the
    model's template can (qwen3's ``enable_thinking``); None: no split, the reply is all content."""
    if parser == "qwen3" and (chat_template_kwargs or {}).get("enable_thinking", True) is False:
        return None
    return parser


def split_reasoning(text: str) -> tuple[str | None, str | None]:
    """A whole reply's (reasoning, content); None where there is none."""
    opened = text.lstrip()
    if opened.startswith(THINK_START):
        text = opened[len(THINK_START) :]
    reasoning, end, content = text.partition(THINK_END)
    if not end:
        return text or None, None
    return reasoning or None, content or None


class ReasoningSplit:
    """One streamed reply's split (one choice's): ``feed`` each text delta, ``finish`` at its end; each returns the
    (reasoning, content) text to send now, "" for none."""

    def __init__(self) -> None:
        self._opening = True  # deciding whether the reply opens with <think>
        self._thinking = True  # before </think>
        self._held = ""  # text not decided yet

    @property
    def thinking(self) -> bool:
        """No answer has begun yet (no ``</think>`` seen)."""
        return self._thinking

    def feed(self, text: str, last: bool = False) -> tuple[str, str]:
        """``last``: the reply's last text; what is held back goes out with it (``finish``)."""
        thought, answer = self._feed(text)
        return (thought + self.finish()[0], answer) if last else (thought, answer)

    def _feed(self, text: str) -> tuple[str, str]:
        if not self._thinking:
            return "", text
        held = self._held + text
        if self._opening:
            opened = held.lstrip()
            if opened.startswith(THINK_START):
                held = opened[len(THINK_START) :]
            elif THINK_START.startswith(opened):  # blank so far, or a <think> still coming
                self._held = held
                return "", ""
            self._opening = False
        reasoning, end, content = held.partition(THINK_END)
        if end:
            self._thinking, self._held = False, ""
            return reasoning, content
        keep = tag_tail(held, THINK_END)
        self._held = held[len(held) - keep :] if keep else ""
        return held[: len(held) - keep], ""

    def finish(self) -> tuple[str, str]:
        """The text held back, at the reply's end: reasoning (no </think> came to end it)."""
        held, self._held = self._held, ""
        return held, ""
