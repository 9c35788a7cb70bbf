"""TPOT of a verifier with and without a remote drafter: the cost model the pairing policy decides by.

Per verification round of a verifier paired with a drafter on another node (all times in seconds)::

    drafter:   k decode steps of the draft model ........ k * t_d
    the hop:   DraftPropose -> DraftReply over the wire .. t_hop
    verifier:  one step over 1 + k positions ............ t_v * (1 + c * k)

    tokens per round  E(alpha, k) = (1 - alpha**(k + 1)) / (1 - alpha)        Leviathan, Kalman, Matias,
                                   "Fast Inference from Transformers via Speculative Decoding", ICML 2023, eq. 1
                                   (engine/spec/draft_length.py ``expected_tokens``)
    TPOT paired  = (k * t_d + t_hop + t_v * (1 + c * k)) / E(alpha, k)
    TPOT plain   = t_v

t_v: the verifier's measured decode step at its current batch; c: a verified draft's extra cost relative to
a decode step (engine/spec/spec_config.py ``verify_cost_per_token``); t_d: the drafter's measured decode step;
alpha: the per-token acceptance rate measured on this pair (a prior before it has run). k is the argmin over
1..k_max. Pure functions, no I/O: the simulator can price pairs with the same code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from engine.spec.draft_length import expected_tokens


@dataclass(frozen=True, slots=True)
class PairPrediction:
    """What one (verifier, drafter) pair is predicted to give; ``num_spec_tokens`` is the best k."""

    tpot_plain_s: float
    tpot_paired_s: float
    num_spec_tokens: int
    expected_tokens: float  # tokens per verification round at that k
    alpha: float

    @property
    def speedup(self) -> float:
        return self.tpot_plain_s / self.tpot_paired_s if self.tpot_paired_s > 0 else 0.0


def round_time_s(k: int, verify_step_s: float, draft_step_s: float, hop_s: float, c: float) -> float:
    """One speculative round with k drafts: k draft steps, the hop, one verification step (c: a draft's
    verification cost relative to a decode step)."""
    return k * draft_step_s + hop_s + verify_step_s * (1.0 + c * k)


def predict_pair_tpot(
    verify_step_s: float,
    draft_step_s: float,
    hop_s: float,
    alpha: float,
    k_max: int,
    verify_cost_per_token: float = 0.05,
) -> PairPrediction:
    """TPOT without the pair (``verify_step_s``) and with it at its best k in 1..k_max."""
    if verify_step_s <= 0 or draft_step_s < 0 or hop_s < 0:
        raise ValueError(f"step times must be > 0 (verify) and >= 0, got {verify_step_s}, {draft_step_s}, {hop_s}")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    if k_max < 1:
        raise ValueError(f"k_max must be >= 1, got {k_max}")
    k, tpot, tokens = best_k(
        lambda k: round_time_s(k, verify_step_s, draft_step_s, hop_s, verify_cost_per_token), alpha, k_max
    )
    return PairPrediction(verify_step_s, tpot, k, tokens, alpha)


def best_k(round_time_of_k: Callable[[int], float], alpha: float, k_max: int) -> tuple[int, float, float]:
    """(k, time per token, tokens per round) at the k in 1..k_max whose round yields tokens the fastest, given
    any round-time model (the linear one above; the simulator's per-operator one: sim/spec_pairs.py); the
    smallest such k on ties."""
    best: tuple[int, float, float] | None = None
    for k in range(1, k_max + 1):
        tokens = expected_tokens(alpha, k)
        per_token = round_time_of_k(k) / tokens
        if best is None or per_token < best[1] * (1.0 - 1e-9):
            best = (k, per_token, tokens)
    return best
