"""vLLM's ``thinking_token_budget``: a reasoning model's thinking cut short after so many tokens by forcing its end.

A reasoning model thinks between a start and an end delimiter (``<think>`` ... ``</think>``: every reasoning parser
the gateway ships, controlplane/gateway/reasoning_parsers.py) and answers after it. A request with a budget may think
that many tokens; at the budget the engine forces the end delimiter's tokens, one per step, and the model answers.

    intake (the control plane; an engine given the budget directly does the same): tokenized(tokenizer, params)
        think_start_token_ids, think_end_token_ids   the delimiters' tokens (a client may give its own)
    every step (engine/request.py LogitsInputs.forced_token_id)
        ThinkingBudget.advance(output)               the output tokens since the last step read
        ThinkingBudget.forced_token()                the end delimiter's next token while forcing, else None

The rule is vLLM's ``ThinkingTokenBudgetLogitsProcessor`` (vllm/v1/sample/logits_processor/builtin.py, with
``ReasoningConfig`` of vllm/config/reasoning.py naming the delimiters):

- the prompt opens the thinking when its last start delimiter comes after its last end delimiter (a chat template
  that ends with ``<think>``); the prompt's tokens after that start count against the budget;
- each output token: one that completes a start delimiter opens the thinking (count 0), one that completes an end
  delimiter closes it, any other counts one while the thinking is open;
- when the open thinking's count reaches the budget, the end delimiter's tokens are forced in turn.

One deliberate difference: vLLM first looks at the count after a request's first output token, so a budget of 0 under
a template that opens the thinking still lets one token through; here the count is checked from the prompt on, so a
budget of 0 forces the end at once. Forcing is a one-token allowed set (backends/logits_adjust.py), so every backend's
sampler does it the same way. Sans-IO: no torch, no numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from engine.prompt import PromptError
from engine.sampling_params import SamplingParams, SamplingParamsError

THINK_START = "<think>"  # the delimiters of deepseek_r1's and qwen3's parsers (vLLM's think_start_str/think_end_str)
THINK_END = "</think>"


def tokenized(tokenizer: Any, params: SamplingParams) -> SamplingParams:
    """``params`` with the delimiters' tokens filled in when it has a budget and names none (a client's own kept);
    PromptError naming ``thinking_token_budget`` when the tokenizer makes more tokens than SamplingParams' bound."""
    if params.thinking_token_budget is None or params.think_end_token_ids:
        return params
    start = tuple(tokenizer.encode(THINK_START, add_special_tokens=False))
    end = tuple(tokenizer.encode(THINK_END, add_special_tokens=False))
    try:
        return msgspec.structs.replace(params, think_start_token_ids=start, think_end_token_ids=end)
    except SamplingParamsError as e:
        message = f"thinking_token_budget: the thinking's delimiters do not tokenize within bounds: {e}"
        raise PromptError(message, "thinking_token_budget") from None


def _last_index(tokens: Sequence[int], sequence: Sequence[int]) -> int:
    """Where ``sequence`` last starts in ``tokens``; -1 when nowhere (or empty)."""
    n = len(sequence)
    if not n:
        return -1
    first = sequence[0]
    for i in range(len(tokens) - n, -1, -1):
        if tokens[i] == first and list(tokens[i : i + n]) == list(sequence):
            return i
    return -1


def _ends_with(tokens: Sequence[int], end: int, sequence: Sequence[int]) -> bool:
    """Whether ``tokens[:end]`` ends with ``sequence`` (not empty)."""
    n = len(sequence)
    return 0 < n <= end and list(tokens[end - n : end]) == list(sequence)


@dataclass(slots=True)
class ThinkingBudget:
    """One request's thinking: open or not, its count, and how far the end delimiter is forced (module docstring)."""

    budget: int
    start: tuple[int, ...]
    end: tuple[int, ...]
    open: bool = False
    count: int = 0
    forcing: int = -1  # the end delimiter's token forced next (an index into ``end``); -1: none
    num_read: int = 0  # output tokens read

    @classmethod
    def for_request(cls, params: SamplingParams, prompt: Sequence[int]) -> ThinkingBudget:
        """The state after ``prompt`` (a resumed request's prompt ends with its earlier output: counted the same)."""
        state = cls(params.thinking_token_budget or 0, params.think_start_token_ids, params.think_end_token_ids)
        start_at = _last_index(prompt, state.start)
        if start_at > _last_index(prompt, state.end):
            state.open, state.count = True, len(prompt) - start_at - len(state.start)
        state._check()
        return state

    def advance(self, output: Sequence[int]) -> None:
        """Read the output tokens after the ``num_read`` read before (``output`` the request's output so far)."""
        for i in range(self.num_read + 1, len(output) + 1):
            if _ends_with(output, i, self.start):
                self.open, self.count, self.forcing = True, 0, -1
            elif _ends_with(output, i, self.end):
                self.open, self.count, self.forcing = False, 0, -1
            elif self.forcing >= 0:
                self.forcing += 1  # the forced token (what completes the end is the branch above)
                if self.forcing >= len(self.end):  # a forced token did not come (cannot happen): stop forcing
                    self.open, self.count, self.forcing = False, 0, -1
            elif self.open:
                self.count += 1
            self._check()
        self.num_read = max(self.num_read, len(output))

    def _check(self) -> None:
        if self.open and self.forcing < 0 and self.count >= self.budget and self.end:
            self.forcing = 0

    def forced_token(self) -> int | None:
        """The token the next one must be, or None."""
        return self.end[self.forcing] if self.forcing >= 0 else None
