"""Heterogeneous speculative pairs in the simulator: what a round of a weak drafter + strong verifier costs.

A pair is a strong node (H100, A100) that verifies and a weak node (L4, T4) that runs a small draft model
of the same vocabulary (Llama-3.2-1B for a Llama-3(.1)-8B target) beside its own serving. One round of a
pair, for a verifier batch of B decoding requests with k drafts each (``round_time_s``)::

    hop_s  +  k x draft decode step (B sequences, the draft's shape on the weak node)  +  one verify step
                                                            (B x (k+1) tokens of the target on the strong node)

and it yields ``E(alpha, k) = (1 - alpha^(k+1)) / (1 - alpha)`` tokens per request (Leviathan, Kalman,
Matias, ICML 2023, eq. 1; the i.i.d. acceptance model), against one token per plain step. Both step times
come from the same per-operator cost model (backends/sim/cost_model.py) with each model's shape on each
GPU. ``PairCosts.best`` is the ratio at the best k; ``crossover_batch_size`` the largest verifier batch
at which it still exceeds ``min_gain`` (a margin for what the prediction does not see: mixed prefill steps,
the variance of acceptance), given to the verifier's speculator as ``max_batch_size`` (above it, the
engine's own logic turns speculation off: engine/spec/speculator.py).

Who pairs with whom is not decided here: the simulator runs the control plane's own policy
(controlplane/spec_pairs.py, through controlplane/spec_pairing.py) on the simulated nodes' hellos and
LoadReports (sim/spec_pair_control.py). This module is the *cost* side: what a round of a pair takes on
the simulated GPUs, and the verifier's crossover batch (its speculator's ``max_batch_size``).

alpha: ``backends/sim/spec_model.py``'s DEFAULT_ALPHA = 0.7 unless told (the middle of Leviathan et al.'s
Table 3, 0.6-0.8 for drafts 10-100x smaller than their targets; assumed for a 1B draft of an 8B target).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.checkpoint.model_config import ModelConfig
from backends.sim.cost_model import NodeHardware, StepCostModel
from backends.sim.model_shapes import sim_model
from backends.sim.spec_model import DEFAULT_ALPHA
from controlplane.spec_cost import best_k
from controlplane.spec_pairs import SpecPairConfig
from engine.spec.draft_length import expected_tokens

PAIR_MODES = ("none", "auto", "all")
DEFAULT_DRAFTS = {"sim:llama-3-8b": "sim:llama-3.2-1b", "sim:llama-3.1-8b": "sim:llama-3.2-1b"}


@dataclass(frozen=True, slots=True)
class SpecPairsConfig:
    """How pairs are formed and run.

    mode: "none" (no pairs), "auto" (the control plane's policy with its defaults: pairs predicted to gain),
        "all" (the same policy forced: every compatible idle drafter pairs, gain or not, at any verifier
        batch; an experiment, to measure what a losing pair costs and that the engine turns it off).
    draft_model: the draft's shape (a ``sim:*`` name sharing the target's vocabulary); None = the target's
        usual draft (DEFAULT_DRAFTS).
    alpha: per-token acceptance rate of the draft (drawn i.i.d. by the verifier's simulated runner).
    k_max: the most drafts per request per round (the engine adapts k in 0..k_max).
    hop_s: one round's network time (the verifier's accepted tokens to the drafter and the drafts back).
    context_tokens: the mean context of a decoding request, for the predictions (the workload's mean
        prompt + half its mean output when ``zoo sim`` sets it).
    drafters: the GPU profiles whose nodes run a DraftServer (``zoo agent --can-draft``) and say so in their
        hello; None = the weak GPUs: those whose decode step of the target is at least ``min_step_ratio`` x
        the fleet's fastest (a deployment choice, not a pairing: the control plane's policy pairs them).
    policy_min_gain: the control plane's ``SpecPairConfig.min_gain`` in mode "auto" (``zoo controlplane
        --spec-pair-min-gain``): it pairs when the predicted TPOT is at least this much better.
    min_gain: a pair's verifier speculates up to the largest batch predicted to gain more than this (its
        crossover batch, from this module's per-operator costs).
    max_draft_share: the most of its GPU time a drafter gives to drafting (a token bucket; past it, and
        whenever it has requests of its own waiting, it declines a round and the verifier decodes plainly).
    """

    mode: str = "none"
    draft_model: str | None = None
    alpha: float = DEFAULT_ALPHA
    k_max: int = 4
    hop_s: float = 0.0005
    context_tokens: float = 1024.0
    drafters: tuple[str, ...] | None = None
    min_step_ratio: float = 2.0
    policy_min_gain: float = SpecPairConfig().min_gain
    min_gain: float = 1.02
    max_draft_share: float = 0.5

    def __post_init__(self) -> None:
        if self.mode not in PAIR_MODES:
            raise ValueError(f"spec pairs mode must be one of {PAIR_MODES}, got {self.mode!r}")
        if not 0.0 <= self.alpha <= 1.0:
            raise ValueError(f"alpha must be in [0, 1], got {self.alpha}")
        if not 1 <= self.k_max <= 32:
            raise ValueError(f"k_max must be in [1, 32], got {self.k_max}")
        if self.hop_s < 0 or self.context_tokens < 0:
            raise ValueError("hop_s and context_tokens must be >= 0")
        if not 0.0 < self.max_draft_share <= 1.0:
            raise ValueError(f"max_draft_share must be in (0, 1], got {self.max_draft_share}")

    def draft_for(self, target: ModelConfig) -> ModelConfig:
        """The draft's shape; ValueError when none is known. (Another vocabulary is not refused here: the
        drafters advertise its tokenizer and the control plane's policy refuses the pair, with its reason.)"""
        name = self.draft_model or DEFAULT_DRAFTS.get(target.name)
        if name is None:
            raise ValueError(f"no draft model known for {target.name}; name one (e.g. sim:llama-3.2-1b)")
        return sim_model(name)

    def policy_config(self) -> SpecPairConfig:
        """The control plane's SpecPairConfig for this mode: its defaults with this deployment's hop and k_max
        ("auto"), or forced ("all": any predicted TPOT, any verifier batch)."""
        config = SpecPairConfig(
            enabled=self.mode != "none", hop_s=self.hop_s, num_spec_tokens=self.k_max, min_gain=self.policy_min_gain
        )
        if self.mode == "all":
            config.min_gain, config.max_verifier_batch = -10.0, 1 << 30
        return config


@dataclass(frozen=True, slots=True)
class PairCosts:
    """The two cost models of one (verifier, drafter) pair."""

    target: StepCostModel  # the target on the verifier
    draft: StepCostModel  # the draft on the drafter
    hop_s: float

    def plain_step_s(self, batch: int, context: float) -> float:
        return self.target.decode_step_s(batch, context)

    def draft_step_s(self, batch: int, context: float) -> float:
        return self.draft.decode_step_s(batch, context)

    def verify_step_s(self, batch: int, k: int, context: float) -> float:
        """One target step over ``batch`` requests of ``k + 1`` new tokens each (the last token and k drafts)."""
        q = k + 1
        ctx = int(batch * context)
        return self.target.step_time_s(batch * q, batch, batch * q, batch * q * (context + (q + 1) / 2), ctx)

    def round_time_s(self, batch: int, k: int, context: float) -> float:
        """hop + k sequential draft steps on the drafter + one verify step on the verifier (k = 0: plain)."""
        if k <= 0:
            return self.plain_step_s(batch, context)
        return self.hop_s + k * self.draft_step_s(batch, context) + self.verify_step_s(batch, k, context)

    def speedup(self, batch: int, k: int, context: float, alpha: float) -> float:
        """Tokens per second of a pair's rounds over plain decoding's, at this batch and k."""
        if k <= 0:
            return 1.0
        return expected_tokens(alpha, k) * self.plain_step_s(batch, context) / self.round_time_s(batch, k, context)

    def best(self, batch: int, context: float, alpha: float, k_max: int, forced: bool = False) -> tuple[int, float]:
        """(k, speed-up) at the best k in 1..k_max (controlplane/spec_cost.py ``best_k`` over this pair's round
        time); with ``forced`` False, (0, 1.0) when no k gains."""
        k, per_token_s, _ = best_k(lambda k: self.round_time_s(batch, k, context), alpha, k_max)
        speedup = self.plain_step_s(batch, context) / per_token_s
        if not forced and speedup <= 1.0:
            return 0, 1.0
        return k, speedup


def crossover_batch_size(
    costs: PairCosts, context: float, alpha: float, k_max: int, min_gain: float = 1.0, max_batch: int = 512
) -> int:
    """The largest verifier batch at which the pair's best k still gains more than ``min_gain`` (0: none does).

    The speed-up falls with the batch (a verify step's extra tokens cost more as the target turns
    compute-bound, and the draft steps grow too); the first batch size where it no longer exceeds
    ``min_gain``, found by doubling then bisecting, minus one."""

    def gains(batch: int) -> bool:
        k, speedup = costs.best(batch, context, alpha, k_max)
        return k > 0 and speedup > min_gain

    if not gains(1):
        return 0
    lo, hi = 1, 2
    while hi <= max_batch and gains(hi):
        lo, hi = hi, hi * 2
    if hi > max_batch:
        return max_batch
    while hi - lo > 1:  # gains(lo), not gains(hi)
        mid = (lo + hi) // 2
        if gains(mid):
            lo = mid
        else:
            hi = mid
    return lo


def pair_costs(target: ModelConfig, draft: ModelConfig, verifier: NodeHardware, drafter: NodeHardware, hop_s: float):
    return PairCosts(StepCostModel(target, verifier), StepCostModel(draft, drafter), hop_s)
