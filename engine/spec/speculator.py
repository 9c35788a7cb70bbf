"""Speculator: puts a proposer's drafts on running requests before each step and learns from the verdict.

Driven by ``LLMEngine`` (engine/llm_engine.py)::

    start_step:   speculator.propose(scheduler.running_requests())   drafts -> request.spec_token_ids
                  scheduler.schedule()  ->  runner.execute()         target verifies, returns 1 + accepted
    finish_step:  speculator.observe(batch, runner_output)           acceptance -> k per request, counters
                  speculator.drop(batch.finished_req_ids)            the proposer forgets finished requests

Only requests in decode (every known token but the last computed) get drafts: one k for the step from
their measured acceptance rates (engine/spec/draft_length.py), never more than ``max_tokens`` leaves
room for, and none at all in a step whose batch is larger than ``SpecDecodeConfig.max_batch_size``.
Requests whose sampling params process the logits (penalties, logit_bias, min_tokens, min_p) get none: they
decode one token a step in the same batch, processed by their sampler (backends/logits_adjust.py). A request with a
predicted output (``prediction_token_ids``) drafts from it instead of the proposer, up to the config's k (the
client's guess, not a model's: engine/spec/prediction_drafts.py), counted apart from the proposer's acceptance.
Sans-IO; the counters follow vLLM's spec-decode metrics.

Costs are measured, not assumed (the config's values are only the prior). With t_B the EWMA step time
of plain decode steps of B requests (the runner's step_time_s), a verification step of B requests with
at most k drafts each that took t gives the verifier's cost per drafted position ``(t - t_B) / (k * t_B)``
(it includes a draft model's time when the runner's step does, as a simulated one's does); the
proposer's time (engine clock) per drafted position, over t_B, gives the draft cost. Their sum prices k in
engine/spec/draft_length.py, so a busy or compute-bound verifier (the per-token cost rises with the
batch) turns speculation down by itself, before ``max_batch_size`` turns it off. To have t_B, an
adaptive speculator leaves a step of B decoding requests plain when it has no t_B yet, and one in
RECALIBRATE_STEPS afterwards (the machine's load changes).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.batch import RunnerOutput, SchedulerOutput
from engine.clock import Clock, MonotonicClock
from engine.request import Request
from engine.spec.draft_length import DraftLengthController
from engine.spec.prediction_drafts import PredictionDrafts
from engine.spec.proposer import DraftRequest, Proposer
from engine.spec.spec_config import SpecDecodeConfig


@dataclass(slots=True)
class SpecDecodeStats:
    """Totals since start (vLLM: vllm:spec_decode_num_drafts / _num_draft_tokens / _num_accepted_tokens /
    _num_accepted_tokens_per_pos)."""

    num_drafts_total: int = 0  # verification steps of one request with >= 1 draft
    num_draft_tokens_total: int = 0
    num_accepted_tokens_total: int = 0
    num_accepted_tokens_per_pos: list[int] = field(default_factory=list)  # [k_max]: accepted at draft index i
    num_steps_spec_off_total: int = 0  # steps where the batch was too large to speculate
    # drafted from requests' predicted outputs (OpenAI's prediction), and of them accepted: apart from the above, whose
    # acceptance is the proposer's (what the draft length, the cost model and the control plane read)
    num_prediction_draft_tokens_total: int = 0
    num_prediction_accepted_tokens_total: int = 0

    @property
    def acceptance_rate(self) -> float:
        return self.num_accepted_tokens_total / self.num_draft_tokens_total if self.num_draft_tokens_total else 0.0

    @property
    def mean_accepted_tokens(self) -> float:
        """Tokens a verification step yields on average: 1 (the target's own) + accepted drafts."""
        return 1.0 + self.num_accepted_tokens_total / self.num_drafts_total if self.num_drafts_total else 0.0

    def copy(self) -> SpecDecodeStats:
        return SpecDecodeStats(
            self.num_drafts_total,
            self.num_draft_tokens_total,
            self.num_accepted_tokens_total,
            list(self.num_accepted_tokens_per_pos),
            self.num_steps_spec_off_total,
            self.num_prediction_draft_tokens_total,
            self.num_prediction_accepted_tokens_total,
        )


COST_EWMA_WEIGHT = 0.2  # weight of the newest measurement in the cost estimates
RECALIBRATE_STEPS = 64  # an adaptive speculator's steps between two plain (measuring) decode steps


def _ewma(old: float | None, new: float) -> float:
    return new if old is None else (1 - COST_EWMA_WEIGHT) * old + COST_EWMA_WEIGHT * new


class Speculator:
    def __init__(self, proposer: Proposer, config: SpecDecodeConfig, clock: Clock | None = None) -> None:
        self.proposer = proposer
        self.config = config
        self.clock = clock or MonotonicClock()
        self.draft_cost = config.draft_cost  # per draft token, in target decode steps (measured)
        self.verify_cost = config.verify_cost_per_token  # per verified draft token, likewise
        self._decode_step_s: dict[int, float] = {}  # batch size -> EWMA plain decode step time
        self._last_draft_s_per_pos: float | None = None  # the last propose() time per drafted position
        self._steps_since_plain: dict[int, int] = {}  # batch size -> speculative steps since a plain one
        self.controller = DraftLengthController(
            config.num_spec_tokens,
            config.draft_cost + config.verify_cost_per_token,
            config.initial_acceptance,
            adaptive=config.adaptive,
        )
        self._stats = SpecDecodeStats(num_accepted_tokens_per_pos=[0] * config.num_spec_tokens)
        self.predictions = PredictionDrafts()  # requests with a predicted output draft from it (prediction_drafts.py)
        self._predicted: dict[str, Request] = {}  # the requests drafted from their prediction this step

    def propose(self, running: list[Request]) -> None:
        """Set (or clear) the drafts of every running request for the step about to be scheduled."""
        self._predicted.clear()
        for request in running:
            if request.spec_token_ids:
                request.spec_token_ids = []
                request.spec_draft_probs = None
        max_batch_size = self.config.max_batch_size
        if max_batch_size and len(running) > max_batch_size:
            self._stats.num_steps_spec_off_total += 1
            return
        decoding = [r for r in running if r.num_computed_tokens == r.num_tokens - 1]
        if self.config.adaptive and decoding and len(decoding) == len(running):
            size = len(running)
            since = self._steps_since_plain.get(size)
            if since is None or since >= RECALIBRATE_STEPS:
                self._steps_since_plain[size] = 0
                return  # a plain step: measures t_B
            self._steps_since_plain[size] = since + 1
        if not decoding:
            return
        k_batch = self.controller.num_spec_tokens_for_batch([r.req_id for r in decoding])
        wants: list[DraftRequest] = []
        for request in decoding:  # still prefilling: drafts only follow a fully computed context
            params = request.sampling_params
            if params.processes_logits:
                continue  # penalties, a bias, min_p: each draft position would need its own (backends/logits_adjust.py)
            room = params.max_tokens - request.num_output_tokens - 1
            if params.prediction_token_ids:  # its own drafts, as many as the config allows (the client's guess)
                drafts = self.predictions.drafts(
                    request.req_id,
                    params.prediction_token_ids,
                    request.output_token_ids,
                    min(self.config.num_spec_tokens, room),
                )
                if drafts:
                    request.spec_token_ids, request.spec_draft_probs = drafts, None
                    self._predicted[request.req_id] = request
                    continue  # else (the output departed from it, not yet found again): the proposer's drafts
            k = min(k_batch, room)
            if k > 0:
                wants.append(DraftRequest(request.req_id, request.all_token_ids, k, params))
        if not wants:
            return
        t0 = self.clock.now()
        drafts = self.proposer.propose(wants)
        self._last_draft_s_per_pos = (self.clock.now() - t0) / max(w.num_spec_tokens for w in wants)
        if not any(d.token_ids for d in drafts.values()):
            self._price_empty_round(len(running))
        by_id = {r.req_id: r for r in running}
        for want in wants:
            draft = drafts.get(want.req_id)
            if draft is None or not draft.token_ids:
                continue
            request = by_id[want.req_id]
            request.spec_token_ids = list(draft.token_ids[: want.num_spec_tokens])
            request.spec_draft_probs = draft.probs

    def observe(self, batch: SchedulerOutput, output: RunnerOutput) -> None:
        """Count each verification's accepted drafts and feed the per-request k controller."""
        self._measure_costs(batch, output)
        stats = self._stats
        per_pos = stats.num_accepted_tokens_per_pos
        for scheduled in batch.requests:
            num_proposed = len(scheduled.spec_token_ids)
            if not num_proposed or (scheduled.logits_inputs and scheduled.logits_inputs.grammar is not None):
                continue  # none, or a grammar's forced tokens (engine/spec/grammar_drafts.py): not the proposer's
            sampled = output.sampled_token_ids.get(scheduled.req_id)
            if not sampled:
                continue
            num_accepted = min(len(sampled) - 1, num_proposed)
            predicted = self._predicted.get(scheduled.req_id)
            if predicted is not None:  # the client's prediction, not the proposer's: counted apart
                predicted.num_prediction_accepted += num_accepted
                stats.num_prediction_draft_tokens_total += num_proposed
                stats.num_prediction_accepted_tokens_total += num_accepted
                continue
            stats.num_drafts_total += 1
            stats.num_draft_tokens_total += num_proposed
            stats.num_accepted_tokens_total += num_accepted
            for i in range(num_accepted):
                per_pos[i] += 1
            self.controller.observe(scheduled.req_id, num_proposed, num_accepted)

    def _measure_costs(self, batch: SchedulerOutput, output: RunnerOutput) -> None:
        requests = batch.requests
        if not requests or output.step_time_s <= 0:
            return
        max_k = 0
        for r in requests:
            if len(r.token_ids) != 1 or r.start_pos == 0:
                return  # a prefill chunk in the step: its time says nothing about decoding
            max_k = max(max_k, len(r.spec_token_ids))
        size = len(requests)
        if not max_k:
            self._decode_step_s[size] = _ewma(self._decode_step_s.get(size), output.step_time_s)
            return
        decode_s = self._decode_step_s.get(size)
        if decode_s is None:
            return
        # per drafted position: the draft's k sequential steps and the verifier's extra rows both grow with k
        self.verify_cost = _ewma(self.verify_cost, max(0.0, output.step_time_s - decode_s) / (max_k * decode_s))
        if self._last_draft_s_per_pos is not None:
            self.draft_cost = _ewma(self.draft_cost, self._last_draft_s_per_pos / decode_s)
            self._last_draft_s_per_pos = None
        self.controller.cost_per_token = self.draft_cost + self.verify_cost

    def _price_empty_round(self, batch_size: int) -> None:
        """A round that brought no drafts (no n-gram match, a drafter past its deadline) still cost its
        time: it counts as draft cost, so a slow drafter turns k down instead of stalling every step."""
        decode_s = self._decode_step_s.get(batch_size)
        if decode_s and self._last_draft_s_per_pos is not None:
            self.draft_cost = _ewma(self.draft_cost, self._last_draft_s_per_pos / decode_s)
            self.controller.cost_per_token = self.draft_cost + self.verify_cost
        self._last_draft_s_per_pos = None

    def drop(self, req_ids: Iterable[str]) -> None:
        ids = list(req_ids)
        if not ids:
            return
        self.proposer.drop(ids)
        self.predictions.drop(ids)
        for req_id in ids:
            self.controller.drop(req_id)

    def make_stats(self) -> SpecDecodeStats:
        return self._stats.copy()

    def continue_counts(self, stats: SpecDecodeStats) -> None:
        """Count on from ``stats`` (another speculator's totals: the node switched proposer, e.g. to a fleet
        drafter), so the node's spec-decode counters never go back."""
        carried = stats.copy()
        per_pos = carried.num_accepted_tokens_per_pos
        per_pos.extend([0] * (self.config.num_spec_tokens - len(per_pos)))
        self._stats = carried
