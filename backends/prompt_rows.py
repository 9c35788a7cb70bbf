"""PromptRows: which logits rows of a step score a request's prompt tokens (vLLM's ``prompt_logprobs``), and how
their log-probabilities become RunnerOutput.prompt_logprobs. Shared by the torch and JAX runners; pure Python.

A chunk's row at position p predicts the token at p + 1; ``ScheduledRequest.prompt_targets`` lists the prompt
tokens this chunk's rows predict, from its first row on (engine/request.py). Those rows are projected to logits
after the sampled rows (``SampleRows``), so the sampler never sees them::

    chunk rows    t0  t1  t2  t3        start_pos = 4, prompt of 7 tokens: targets = prompt[5:8] = [t1, t2, t3']
    prompt rows   r0  r1  r2            r_i: log_softmax(logits of row i); the target's logprob, its rank, the top k
    output        RunnerOutput.prompt_logprobs[req_id] = (5, [TokenLogprob(t1, ...), ...])
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.batch import RunnerOutput, ScheduledRequest, TokenLogprob


@dataclass(slots=True)
class PromptSpan:
    request: ScheduledRequest
    first_row: int  # index into the prompt rows
    targets: list[int]


class PromptRows:
    """Built request by request beside SampleRows; ``logits_rows[i]`` is the step row of prompt row i."""

    def __init__(self) -> None:
        self.logits_rows: list[int] = []
        self.spans: list[PromptSpan] = []

    def add(self, request: ScheduledRequest, row: int) -> None:
        """``request``'s chunk starts at step row ``row``; only a chunk with prompt targets gets rows."""
        targets = request.prompt_targets
        if targets:
            self.spans.append(PromptSpan(request, len(self.logits_rows), targets))
            self.logits_rows.extend(range(row, row + len(targets)))

    @property
    def targets(self) -> list[int]:
        """The token each prompt row scores, row by row."""
        return [t for s in self.spans for t in s.targets]

    @property
    def num_top(self) -> int:
        """The most alternatives any span asks for (each span keeps its own number)."""
        return max((s.request.sampling_params.prompt_logprobs or 0 for s in self.spans), default=0)

    def record(
        self,
        logprobs: list[float],
        ranks: list[int],
        top_ids: list[list[int]],
        top_logprobs: list[list[float]],
        out: RunnerOutput,
    ) -> None:
        """Each span's entries into ``out``: per prompt row its target's logprob and rank (1: the most likely), and
        the row's top ``num_top`` alternatives (cut to the span's own number)."""
        for s in self.spans:
            k = s.request.sampling_params.prompt_logprobs or 0
            entries = []
            for j, target in enumerate(s.targets):
                i = s.first_row + j
                top = list(zip(top_ids[i][:k], top_logprobs[i][:k], strict=True)) if k else []
                entries.append(TokenLogprob(target, logprobs[i], top, ranks[i]))
            out.prompt_logprobs[s.request.req_id] = (s.request.start_pos + 1, entries)
