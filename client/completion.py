"""One request's whole result, as the ZeroMQ client returns it (``generate(stream=False)``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(slots=True)
class Completion:
    request_id: str
    text: str
    token_ids: list[int]
    finish_reason: str | None
    num_prompt_tokens: int
    num_output_tokens: int
    node_id: str
    chunks: int = 0
    logprobs: list[Any] = field(default_factory=list)
    # with prompt_logprobs: per prompt position (token, logprob, top, rank), position 0's logprob None
    prompt_logprobs: list[Any] | None = None
    embedding: list[float] | None = None  # with embed: the prompt's (engine/embeddings.py)
    prompt_token_ids: list[int] | None = None  # with return_prompt_token_ids: the prompt's tokens as served
