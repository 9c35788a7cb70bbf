"""Heterogeneous speculative pairs: which weak node drafts for which strong node, and what a pair is worth.

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

The pairing rule (``pair_nodes``), sans-IO:
  1. a node may draft for another when the target's decode step on it is at least ``min_step_ratio`` x
     the other's (it is the weaker of the two) and it is under-used: its utilisation (when known, e.g.
     measured in a previous window) at most ``max_weak_utilization``;
  2. every candidate (verifier, drafter) is priced by ``PairCosts.best`` at batch 1; greedily, best
     first, each node joins at most one pair; a node that could verify with some drafter never drafts;
  3. mode "auto" keeps only pairs predicted to gain at least ``min_gain``; mode "all" pairs every strong
     node it can, gain or not (to measure what a losing pair costs and that the engine turns it off).

alpha: ``backends/sim/spec_model.py``'s DEFAULT_ALPHA = 0.7 unless told (the middle of Leviathan et al.'s
Table 3, 0.6-0.8 for drafts 10-100x smaller than their targets; assumed for a 1B draft of an 8B target).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.checkpoint.model_config import ModelConfig
from backends.sim.cost_model import NodeHardware, StepCostModel
from backends.sim.model_shapes import sim_model
from backends.sim.spec_model import DEFAULT_ALPHA
from engine.spec.draft_length import expected_tokens

PAIR_MODES = ("none", "auto", "all")
DEFAULT_DRAFTS = {"sim:llama-3-8b": "sim:llama-3.2-1b", "sim:llama-3.1-8b": "sim:llama-3.2-1b"}


@dataclass(frozen=True, slots=True)
class SpecPairsConfig:
    """How pairs are formed and run.

    mode: "none" (no pairs), "auto" (pairs predicted to gain), "all" (every strong node that finds a drafter).
    draft_model: the draft's shape (a ``sim:*`` name sharing the target's vocabulary); None = the target's
        usual draft (DEFAULT_DRAFTS).
    alpha: per-token acceptance rate of the draft (drawn i.i.d. by the verifier's simulated runner).
    k_max: the most drafts per request per round (the engine adapts k in 0..k_max).
    hop_s: one round's network time (the verifier's accepted tokens to the drafter and the drafts back).
    context_tokens: the mean context of a decoding request, for the predictions (the workload's mean
        prompt + half its mean output when ``zoo sim`` sets it).
    min_step_ratio: a drafter's decode step of the target is at least this x its verifier's.
    max_weak_utilization: a node busier than this (when its utilisation is known) drafts for nobody.
    min_gain: "auto" keeps pairs whose predicted speed-up at batch 1 is at least this; a pair's verifier
        speculates up to the largest batch predicted to gain more than this (its crossover batch).
    max_draft_share: the most of its GPU time a drafter gives to drafting (a token bucket; past it, and
        whenever it has requests of its own waiting, it declines a round and the verifier decodes plainly).
    """

    mode: str = "none"
    draft_model: str | None = None
    alpha: float = DEFAULT_ALPHA
    k_max: int = 4
    hop_s: float = 0.0005
    context_tokens: float = 1024.0
    min_step_ratio: float = 2.0
    max_weak_utilization: float = 0.5
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
        """The draft's shape; ValueError when none is known or its vocabulary differs from the target's."""
        name = self.draft_model or DEFAULT_DRAFTS.get(target.name)
        if name is None:
            raise ValueError(f"no draft model known for {target.name}; name one (e.g. sim:llama-3.2-1b)")
        draft = sim_model(name)
        if draft.vocab_size != target.vocab_size:
            raise ValueError(
                f"draft {draft.name} has a {draft.vocab_size}-token vocabulary, the target {target.name} "
                f"{target.vocab_size}: they cannot pair"
            )
        return draft


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
        """(k, speed-up) at the best k in 1..k_max; with ``forced`` False, (0, 1.0) when no k gains."""
        best_k, best_s = (0, 1.0) if not forced else (1, self.speedup(batch, 1, context, alpha))
        for k in range(1, k_max + 1):
            s = self.speedup(batch, k, context, alpha)
            if s > best_s:
                best_k, best_s = k, s
        return best_k, best_s


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


@dataclass(frozen=True, slots=True)
class SpecPair:
    verifier: str  # node id of the strong node
    drafter: str  # node id of the weak node
    predicted_speedup: float  # at batch 1, the best k (forced k >= 1 in mode "all")
    predicted_k: int
    crossover_batch: int  # 0: speculation never gains; the verifier's max_batch_size then stays "never off"

    def describe(self) -> str:
        return (
            f"{self.verifier} <- {self.drafter}: predicted x{self.predicted_speedup:.2f} at batch 1 "
            f"(k={self.predicted_k}), gains up to batch {self.crossover_batch}"
        )


def pair_costs(target: ModelConfig, draft: ModelConfig, verifier: NodeHardware, drafter: NodeHardware, hop_s: float):
    return PairCosts(StepCostModel(target, verifier), StepCostModel(draft, drafter), hop_s)


def pair_nodes(
    nodes: dict[str, NodeHardware],
    target: ModelConfig,
    config: SpecPairsConfig,
    utilization: dict[str, float] | None = None,
) -> list[SpecPair]:
    """The pairs of ``nodes`` (node id -> hardware) under ``config`` (see the module docstring); [] for "none".

    utilization: each node's busy share when measured; unknown nodes count as under-used. Deterministic:
    ties go to the less used drafter, then node order."""
    if config.mode == "none":
        return []
    draft = config.draft_for(target)
    util = utilization or {}
    ctx, alpha = config.context_tokens, config.alpha
    plain = {n: StepCostModel(target, hw).decode_step_s(1, ctx) for n, hw in nodes.items()}
    order = {n: i for i, n in enumerate(nodes)}
    forced = config.mode == "all"
    candidates = []
    for v, v_hw in nodes.items():
        for d, d_hw in nodes.items():
            if d == v or plain[d] < config.min_step_ratio * plain[v]:
                continue
            if util.get(d, 0.0) > config.max_weak_utilization:
                continue
            costs = pair_costs(target, draft, v_hw, d_hw, config.hop_s)
            k, gain = costs.best(1, ctx, alpha, config.k_max, forced=forced)
            if not forced and gain < config.min_gain:
                continue
            candidates.append((-gain, util.get(d, 0.0), order[v], order[d], v, d, k, costs))
    candidates.sort(key=lambda c: c[:4])
    verifiers = {c[4] for c in candidates}  # a node that can verify (a middle GPU) is kept for that
    taken: set[str] = set()
    pairs = []
    for neg_gain, _, _, _, v, d, k, costs in candidates:
        if v in taken or d in taken or d in verifiers:
            continue
        taken.update((v, d))
        crossover = crossover_batch_size(costs, ctx, alpha, config.k_max, config.min_gain)
        pairs.append(SpecPair(v, d, -neg_gain, k, crossover))
    return pairs
