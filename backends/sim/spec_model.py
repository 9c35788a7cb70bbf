"""Speculative decoding on a simulated node: how many drafts the verifier accepts, and what drafting costs.

A simulated model produces no real tokens, so acceptance is drawn: each draft is accepted with a per-token
probability alpha, independently, until the first rejection (the i.i.d. model of Leviathan, Kalman, Matias,
"Fast Inference from Transformers via Speculative Decoding", ICML 2023, section 3.1). Their Table 3
measures alpha between about 0.6 and 0.8 for drafts one to two orders of magnitude smaller than the target
(T5-small/base/large drafting for T5-XXL: 0.62-0.82 over translation and summarisation; LaMDA 100M/2B/8B
drafting for LaMDA 137B on dialog: about 0.61/0.71/0.75). ``DEFAULT_ALPHA`` = 0.7 is that range's middle,
assumed for a 1B-class draft of an 8B target (Llama 3.2 1B for Llama 3 8B; not measured here).

Drafting cost: k sequential decode steps of the draft model (``draft_cost``: a StepCostModel of the draft
shape on its own GPU) for the requests that draft, before the target's verification step; None = free
(n-gram lookup). ``SimDraftProposer`` proposes the runner's dummy token; the runner decides acceptance.
"""

from __future__ import annotations

import random
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from backends.sim.cost_model import StepCostModel
from engine.spec import SpecDecodeConfig, Speculator
from engine.spec.proposer import Draft, DraftRequest

DEFAULT_ALPHA = 0.7


@dataclass(slots=True)
class SimSpecModel:
    alpha: float = DEFAULT_ALPHA
    draft_cost: StepCostModel | None = None
    seed: int = 0
    _rng: random.Random = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        self._rng = random.Random(self.seed)

    def num_accepted(self, num_drafts: int) -> int:
        """Drafts accepted before the first rejection (each with probability alpha)."""
        n = 0
        while n < num_drafts and self._rng.random() < self.alpha:
            n += 1
        return n

    def draft_time_s(self, num_requests: int, num_drafts: int, context_tokens: int) -> float:
        """k = num_drafts decode steps of the draft model over num_requests sequences of ~context_tokens."""
        if self.draft_cost is None or num_drafts <= 0:
            return 0.0
        attn_units = num_requests * (context_tokens + 1.0)
        one = self.draft_cost.step_time_s(
            num_requests, num_requests, num_requests, attn_units, num_requests * context_tokens
        )
        return num_drafts * one


def attach_sim_speculator(engine: Any, spec: SpecDecodeConfig, gpu_profile: str) -> Speculator:
    """Speculation on a simulated node: method "model" drafts with ``spec.draft_model`` (a ``sim:*``
    shape) on one ``gpu_profile`` GPU before each verification; "ngram" drafts for free. Either way the
    drafts' fate is drawn with DEFAULT_ALPHA."""
    from backends.sim.cost_model import NodeHardware
    from backends.sim.model_shapes import sim_model

    runner = getattr(engine.runner, "runner", engine.runner)  # under a PacedRunner
    draft_cost = None
    if spec.method == "model":
        if not spec.draft_model:
            raise ValueError("a simulated node drafting with a model needs draft_model (e.g. sim:llama-3.2-1b)")
        draft = sim_model(spec.draft_model)
        if draft.vocab_size != runner.model.vocab_size:
            raise ValueError(
                f"draft model's vocabulary has {draft.vocab_size} tokens, the target's {runner.model.vocab_size}"
            )
        draft_cost = StepCostModel(draft, NodeHardware(gpu_profile, 1), block_size=runner.cost.block_size)
    elif spec.method != "ngram":
        raise ValueError(f"a simulated node cannot speculate with {spec.method!r} (ngram or model)")
    runner.spec = SimSpecModel(DEFAULT_ALPHA, draft_cost)
    speculator = Speculator(SimDraftProposer(runner.dummy_token_id), spec, engine.clock)
    engine.speculator = speculator
    return speculator


class SimDraftProposer:
    """Proposes ``k`` copies of the simulated runner's dummy token (the runner draws their acceptance)."""

    name = "sim"

    def __init__(self, token_id: int) -> None:
        self.token_id = token_id

    def propose(self, requests: list[DraftRequest]) -> dict[str, Draft]:
        return {r.req_id: Draft([self.token_id] * r.num_spec_tokens) for r in requests}

    def drop(self, req_ids: Iterable[str]) -> None:
        pass
