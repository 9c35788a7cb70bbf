"""How many drafts each request gets: k from its measured acceptance rate.

With a per-token acceptance rate alpha and k drafts, a verification step yields on average
``(1 - alpha**(k+1)) / (1 - alpha)`` tokens (Leviathan, Kalman, Matias, "Fast Inference from Transformers
via Speculative Decoding", ICML 2023, eq. 1) and costs ``1 + c*k`` target decode steps, where c is a draft
token's cost plus a verified token's extra cost (their Theorem 3.8 uses the draft cost alone; on a CPU the
verifier's per-token cost is not negligible). The speed-up over plain decoding is the ratio; k is the
argmax over 0..k_max (k = 0: plain decode). alpha is a per-token Bernoulli rate from discounted
counts: a verification that accepted a of k drafts was a trials with a successes when all were
accepted, a + 1 trials when draft a was rejected (drafts after the first rejection were never tried);
both counts decay by DECAY per verification and start from a prior worth PRIOR_TRIALS trials. A
request at k = 0 probes with k = 1 after PROBE_INTERVAL steps, so a rate that recovers is noticed; each
probe that does not turn speculation back on doubles the wait (up to MAX_PROBE_INTERVAL), so an expensive
drafter costs little while it is off.
"""

from __future__ import annotations

from dataclasses import dataclass

DECAY = 0.8  # weight of the counts so far at each new verification
PRIOR_TRIALS = 2.0
PROBE_INTERVAL = 8
MAX_PROBE_INTERVAL = 128


def expected_tokens(alpha: float, k: int) -> float:
    """Tokens one verification step yields on average with k drafts (1 when k = 0)."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def best_num_spec_tokens(alpha: float, cost_per_token: float, k_max: int) -> int:
    """The k in [0, k_max] that maximises expected tokens per unit of cost."""
    best_k, best_rate = 0, 1.0
    for k in range(1, k_max + 1):
        rate = expected_tokens(alpha, k) / (1.0 + cost_per_token * k)
        if rate > best_rate * (1.0 + 1e-9):
            best_k, best_rate = k, rate
    return best_k


@dataclass(slots=True)
class _State:
    successes: float
    trials: float
    steps_at_zero: int = 0

    @property
    def alpha(self) -> float:
        return self.successes / self.trials


class DraftLengthController:
    """Per-request k. ``adaptive=False`` always answers ``k_max``."""

    def __init__(self, k_max: int, cost_per_token: float, initial_acceptance: float, adaptive: bool = True) -> None:
        self.k_max = k_max
        self.cost_per_token = cost_per_token
        self.initial_acceptance = initial_acceptance
        self.adaptive = adaptive
        self._states: dict[str, _State] = {}
        self._batch_steps_at_zero = 0
        self._batch_probe_interval = PROBE_INTERVAL

    def num_spec_tokens(self, req_id: str) -> int:
        if not self.adaptive:
            return self.k_max
        state = self._state(req_id)
        k = best_num_spec_tokens(state.alpha, self.cost_per_token, self.k_max)
        if k:
            state.steps_at_zero = 0
            return k
        state.steps_at_zero += 1
        if state.steps_at_zero >= PROBE_INTERVAL:
            state.steps_at_zero = 0
            return 1
        return 0

    def num_spec_tokens_for_batch(self, req_ids: list[str]) -> int:
        """One k for a step's requests: the argmax of the tokens all of them yield per unit of step cost.

        A batched verification step costs what its longest draft costs (a draft model's k sequential
        steps), so each request picking its own k would make the others pay for the longest; the batch's
        k maximises ``sum_i E(alpha_i, k) / (1 + c*k)``, each alpha_i still measured per request.
        """
        if not self.adaptive:
            return self.k_max
        alphas = [self._state(r).alpha for r in req_ids]
        best_k, best_rate = 0, float(len(alphas))
        for k in range(1, self.k_max + 1):
            rate = sum(expected_tokens(a, k) for a in alphas) / (1.0 + self.cost_per_token * k)
            if rate > best_rate * (1.0 + 1e-9):
                best_k, best_rate = k, rate
        if best_k:
            self._batch_steps_at_zero = 0
            self._batch_probe_interval = PROBE_INTERVAL
            return best_k
        self._batch_steps_at_zero += 1
        if self._batch_steps_at_zero >= self._batch_probe_interval:
            self._batch_steps_at_zero = 0
            self._batch_probe_interval = min(2 * self._batch_probe_interval, MAX_PROBE_INTERVAL)
            return 1
        return 0

    def observe(self, req_id: str, num_proposed: int, num_accepted: int) -> None:
        """A verification step of ``num_proposed`` drafts accepted ``num_accepted`` of them."""
        if num_proposed <= 0:
            return
        state = self._state(req_id)
        trials = num_accepted + (1 if num_accepted < num_proposed else 0)
        state.successes = DECAY * state.successes + num_accepted
        state.trials = DECAY * state.trials + trials

    def acceptance(self, req_id: str) -> float:
        return self._state(req_id).alpha

    def drop(self, req_id: str) -> None:
        self._states.pop(req_id, None)

    def _state(self, req_id: str) -> _State:
        state = self._states.get(req_id)
        if state is None:
            state = self._states[req_id] = _State(self.initial_acceptance * PRIOR_TRIALS, PRIOR_TRIALS)
        return state
