"""Speculative decoding settings (explicit, validated where made)."""

from __future__ import annotations

from dataclasses import dataclass

SPEC_METHODS = frozenset({"ngram", "model", "remote"})


@dataclass(slots=True)
class SpecDecodeConfig:
    """How a node speculates.

    method: "ngram" (prompt lookup), "model" (a draft model in this process) or "remote" (a draft agent
        on another node, ``zoo draft-server``, at ``draft_endpoint``; no drafts past ``draft_timeout_s``).
    num_spec_tokens: the most drafts per request per step (k).
    adaptive: choose each request's k from its measured acceptance rate (engine/spec/draft_length.py);
        False always asks for ``num_spec_tokens``.
    draft_cost: cost of one draft token relative to one target decode step (0 for n-gram); with
        ``verify_cost_per_token`` (the target's extra cost per verified token) it prices k.
    initial_acceptance: the acceptance rate assumed before a request has been measured.
    max_batch_size: speculation is off in steps with more running requests than this (verifying drafts
        costs compute that a full batch does not have); 0 = never off.
    ngram_min / ngram_max: n-gram lengths the prompt lookup tries.
    draft_model: checkpoint of the draft model (method "model"); None = the target's own checkpoint.
    draft_dtype / draft_num_threads: the draft runner's weights/activations dtype and CPU threads.
    """

    method: str = "ngram"
    num_spec_tokens: int = 4
    adaptive: bool = True
    draft_cost: float = 0.0
    verify_cost_per_token: float = 0.05
    initial_acceptance: float = 0.7
    max_batch_size: int = 8
    ngram_min: int = 1
    ngram_max: int = 4
    draft_model: str | None = None
    draft_dtype: str = "float32"
    draft_num_threads: int | None = None
    draft_endpoint: str | None = None
    draft_timeout_s: float = 0.5

    def __post_init__(self) -> None:
        if self.method not in SPEC_METHODS:
            raise ValueError(f"speculative method must be one of {sorted(SPEC_METHODS)}, got {self.method!r}")
        if not 1 <= self.num_spec_tokens <= 32:
            raise ValueError(f"num_spec_tokens must be in [1, 32], got {self.num_spec_tokens}")
        if self.draft_cost < 0 or self.verify_cost_per_token < 0:
            raise ValueError("draft_cost and verify_cost_per_token must be >= 0")
        if not 0.0 < self.initial_acceptance < 1.0:
            raise ValueError(f"initial_acceptance must be in (0, 1), got {self.initial_acceptance}")
        if self.max_batch_size < 0:
            raise ValueError(f"max_batch_size must be >= 0, got {self.max_batch_size}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ValueError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min}, {self.ngram_max}")
        if self.draft_dtype not in ("float32", "bfloat16"):
            raise ValueError(f"draft_dtype must be 'float32' or 'bfloat16', got {self.draft_dtype!r}")
        if self.method == "remote" and not self.draft_endpoint:
            raise ValueError("speculative method 'remote' needs draft_endpoint (the draft agent's address)")
        if not self.draft_timeout_s > 0:
            raise ValueError(f"draft_timeout_s must be > 0, got {self.draft_timeout_s}")
        if self.draft_num_threads is not None and self.draft_num_threads < 1:
            raise ValueError(f"draft_num_threads must be >= 1, got {self.draft_num_threads}")
