"""Iteration-level continuous batching over the paged KV cache. Sans-IO: time comes from the clock.

One step, in priority order, under a token budget (``max_num_batched_tokens``) and a cap on admitted
requests (``max_num_seqs``)::

    1. running   oldest first; each gets num_tokens - num_computed_tokens tokens (one decode token,
                 or the rest of its prompt, cut to the budget when chunked prefill is on), plus its
                 speculative drafts if they fit. No block for it -> preempt the most recently
                 arrived running request (possibly itself): swap it to host RAM, or, when host RAM
                 is short or preemption_mode is RECOMPUTE, drop its KV and requeue it at the front.
    2. swapped   oldest first, swapped back in — unless this step preempted anyone.
    3. waiting   FCFS, with a prefix-cache lookup — only when nobody is left swapped out and this
                 step preempted no one. The head of the queue blocks the rest (no overtaking).

Priorities (``Request.priority``, higher first: a traffic class's rank, e.g. vip 2 > standard 1 > batch 0).
With equal priorities everything above holds unchanged. Otherwise "oldest first" reads "highest priority,
then oldest": the running and swapped lists sort by (-priority, arrival), so the preemption victim is the
lowest-priority, most recently arrived request; the waiting queue is FCFS within a priority; a waiting
request outranking every swapped one is admitted before they are swapped back in. And before anything is
scheduled, a waiting head that does not fit (no KV room for its first chunk, or ``max_num_seqs`` reached)
swaps out running requests of lower priority, lowest first, until it fits (0. below) — swapped, never
killed: they resume when room comes back (recompute only when host RAM is full, as for any preemption)::

    0. priority  waiting head outranks running[-1] and does not fit -> preempt running[-1], repeat

LoRA: with ``max_loras`` set, a swapped or waiting request whose adapter is not among the running ones is not
admitted while the running set already holds ``max_loras`` adapters (the runner's device slots); such a waiting
request is stepped over, keeping its place, so the ones behind it are not blocked (as in vLLM's scheduler).

Counter model: ``num_computed_tokens`` advances in ``update_from_output`` (once the runner has written
the KV), never in ``schedule``; a prefix hit is the exception, applied at admission. So between
``schedule`` and ``update_from_output`` a request's counters still describe the state *before* the step,
and exactly one ``update_from_output`` must follow each ``schedule`` that scheduled requests.
"""

from __future__ import annotations

import bisect
import itertools
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from engine.batch import RunnerOutput, ScheduledRequest, SchedulerOutput, TokenLogprob
from engine.clock import Clock
from engine.config import CacheConfig, PreemptionMode, SchedulerConfig
from engine.decode_cohort import DecodeCohort, sync_cohort, sync_cohort_row
from engine.kv import KVCacheManager
from engine.mixed_step import allocate_decode_rows, commit_decode_rows, plan_decode_rows
from engine.multi_step import DecodeRun, commit_decode_run, kv_step_limit, plan_decode_run
from engine.prompt import check_prompt_length
from engine.request import FinishReason, Request, RequestStatus
from engine.scheduler_remote import RemoteSwapMixin
from engine.scheduler_stats import SchedulerCounters, SchedulerEvent, SchedulerEventKind, SchedulerStats
from engine.stall_free import StallFreeBudget

MAX_PENDING_EVENTS = 100_000  # oldest events are dropped when nobody drains them

# Enum member lookups (``RequestStatus.RUNNING``) cost a descriptor call each; the per-step paths use these.
_RUNNING = RequestStatus.RUNNING
_FINISHED_STOPPED = RequestStatus.FINISHED_STOPPED
_FINISHED_LENGTH = RequestStatus.FINISHED_LENGTH
_STOP = FinishReason.STOP
_LENGTH = FinishReason.LENGTH


@dataclass(slots=True)
class RequestUpdate:
    """What one step did to one request: tokens appended (possibly several for a verification step)
    and whether it finished. Emitted only for requests that got tokens or finished."""

    req_id: str
    new_token_ids: list[int]
    new_logprobs: list[TokenLogprob] = field(default_factory=list)
    finished: bool = False
    finish_reason: FinishReason | None = None
    stop_reason: int | str | None = None


class Scheduler(RemoteSwapMixin):
    def __init__(self, scheduler_config: SchedulerConfig, cache_config: CacheConfig, clock: Clock) -> None:
        self.scheduler_config = scheduler_config
        self.cache_config = cache_config
        self._clock = clock
        self.kv_cache_manager = KVCacheManager.from_config(cache_config)
        # the most tokens the device cache can hold for one request
        self._max_device_tokens = cache_config.num_device_blocks * cache_config.block_size

        self._requests: dict[str, Request] = {}  # unfinished, plus finished until the next schedule()
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []  # sorted by priority: oldest first, the preemption victim last
        self._swapped: list[Request] = []  # sorted by priority: resumed oldest first
        self._admission_order: dict[str, int] = {}  # breaks ties between equal arrival times
        self._next_admission_order = itertools.count()
        self._finished_req_ids: list[str] = []  # reported in the next SchedulerOutput
        self._next_step_id = 0
        self._cohort: DecodeCohort | None = None  # the leading decode rows, held lazily (engine/decode_cohort.py)
        self._counters = SchedulerCounters()
        self._events: deque[SchedulerEvent] = deque(maxlen=MAX_PENDING_EVENTS)
        factor = scheduler_config.stall_factor  # stall-free batching: LLMEngine feeds its step-time fit
        self.stall_free = StallFreeBudget(factor) if factor and scheduler_config.enable_chunked_prefill else None

    # -- requests --------------------------------------------------------------------------------

    def add_request(self, request: Request) -> None:
        """Queue a new request (status WAITING). Raises ValueError, queuing nothing, when it can never run."""
        num_prompt_tokens = request.num_prompt_tokens
        check_prompt_length(num_prompt_tokens, self.scheduler_config.max_model_len)
        existing = self._requests.get(request.req_id)
        if existing is not None and not existing.is_finished:  # a finished one not yet reported may be reused
            raise ValueError(f"request id {request.req_id!r} is already in use")
        num_blocks = self.kv_cache_manager.num_blocks_for_tokens(num_prompt_tokens)
        if num_blocks > self.cache_config.num_device_blocks:
            message = f"prompt needs {num_blocks} KV blocks, the device holds {self.cache_config.num_device_blocks}"
            raise ValueError(f"request {request.req_id!r}: {message}")
        if request.status is not RequestStatus.WAITING or request.num_computed_tokens or request.output_token_ids:
            raise ValueError(f"request {request.req_id!r}: must be a fresh request")
        self._requests[request.req_id] = request
        self._admission_order[request.req_id] = next(self._next_admission_order)
        self._queue_waiting(request, front=False)
        self._emit(SchedulerEventKind.QUEUED, request, num_prompt_tokens=num_prompt_tokens)

    def finish_requests(
        self, req_ids: Iterable[str], reason: FinishReason, stop_reason: int | str | None = None
    ) -> None:
        """Finish requests from outside (abort, a stop string); frees their blocks in every tier.
        Unknown or already finished ids are ignored."""
        reason = FinishReason(reason)
        for req_id in req_ids:
            request = self._requests.get(req_id)
            if request is None or request.is_finished:
                continue
            sync_cohort_row(self, req_id, leave=True)
            if request.status is RequestStatus.RUNNING:
                self._running.remove(request)
            elif request.status is RequestStatus.SWAPPED:
                self._swapped.remove(request)
            else:
                self._waiting.remove(request)
            request.status = reason.status
            request.finish_reason = reason
            request.stop_reason = stop_reason
            self._release_finished(request)

    def has_unfinished_requests(self) -> bool:
        return bool(self._running or self._waiting or self._swapped)

    def running_requests(self) -> list[Request]:
        """The running requests, oldest first (a copy; the speculator sets their drafts)."""
        self.sync_decode_rows()
        return list(self._running)

    def get_request(self, req_id: str) -> Request | None:
        """Unfinished requests, and finished ones until the next ``schedule()``."""
        self.sync_request(req_id)
        return self._requests.get(req_id)

    def sync_decode_rows(self, drop: bool = False) -> None:
        """Bring every row the cohort holds up to date (tokens, computed tokens, metrics); drop: and end it."""
        sync_cohort(self, drop)

    def sync_request(self, req_id: str) -> None:
        """Bring one request up to date, if the cohort holds it (for its readers outside the scheduler)."""
        sync_cohort_row(self, req_id)

    # -- one step --------------------------------------------------------------------------------

    def schedule(self, decode: DecodeRun | None = None) -> SchedulerOutput:
        """decode: the step's leading pure decode rows, planned by ``plan_decode_rows`` just before: they are
        scheduled in bulk and left out of the output (engine/mixed_step.py); the rest is scheduled as usual."""
        if decode is None:  # a plain step: the rows held lazily (engine/decode_cohort.py) catch up and are let go
            sync_cohort(self, drop=True)
        output = SchedulerOutput(step_id=self._next_step_id, finished_req_ids=self._begin_schedule())
        self._next_step_id += 1

        budget = self.scheduler_config.max_num_batched_tokens
        if self.stall_free is not None:
            budget = self.stall_free.step_budget(self._running, budget)
        self._preempt_for_priority(output, budget)
        first = 0
        if decode is not None:
            allocate_decode_rows(self, decode)
            first = len(decode.requests)
            budget -= first
        budget, preempted = self._schedule_running(output, budget, first)
        if not preempted:
            if self.kv_cache_manager.remote:
                self._plan_remote_fetches(output)
            budget = self._schedule_swapped(output, budget)
            if not self._swapped or self._outranked_by_waiting(self._swapped[0]):
                self._schedule_waiting(output, budget)
        return output

    def _begin_schedule(self) -> list[str]:
        """What every step does first: forget the requests finished since the last step (returned: the runner may
        drop their state) and unpin the last step's copy-on-write sources."""
        finished_req_ids = self._finished_req_ids
        for req_id in finished_req_ids:
            request = self._requests.get(req_id)
            if request is not None and not request.is_finished:
                continue  # the id was reused (a request migrated away and back): the new one stays
            self._requests.pop(req_id, None)
            self._admission_order.pop(req_id, None)
        self._finished_req_ids = []
        self.kv_cache_manager.begin_step()
        return finished_req_ids

    # -- several pure decode steps at once (engine/multi_step.py) ---------------------------------

    def plan_decode_run(self, token_id: int, max_steps: int) -> DecodeRun | None:
        """The pure decode steps (each request sampling ``token_id``) that may run from now; changes nothing."""
        return plan_decode_run(self, token_id, max_steps)

    def kv_step_limit(self, run: DecodeRun, num_steps: int) -> int:
        return kv_step_limit(self, run, num_steps)

    def begin_decode_run(self) -> list[str]:
        """A planned run is taken: its first step begins now (as ``schedule`` would)."""
        return self._begin_schedule()

    def commit_decode_run(self, run: DecodeRun, num_steps: int, finished_only: bool = False) -> list[RequestUpdate]:
        """Apply ``num_steps`` of a run begun with ``begin_decode_run``; the updates, each with all its tokens (only
        those of the requests that finished with ``finished_only``: the others each got ``num_steps`` tokens)."""
        return [
            RequestUpdate(r.req_id, tokens.copy(), [], finished, r.finish_reason, r.stop_reason)
            for r, tokens, finished in commit_decode_run(self, run, num_steps, finished_only)
        ]

    def plan_decode_rows(self, token_id: int) -> DecodeRun | None:
        """The next step's leading pure decode rows (engine/mixed_step.py); changes nothing."""
        return plan_decode_rows(self, token_id)

    def commit_decode_rows(self, run: DecodeRun) -> list[RequestUpdate]:
        """Apply a mixed step's decode rows (before ``update_from_output``); the updates of those that finished
        (each of the others got ``run.token_id``)."""
        token_id = run.token_id
        return [
            RequestUpdate(r.req_id, [token_id], [], True, r.finish_reason, r.stop_reason)
            for r in commit_decode_rows(self, run)
        ]

    def _outranked_by_waiting(self, request: Request) -> bool:
        return bool(self._waiting) and self._waiting[0].priority > request.priority

    def _preempt_for_priority(self, output: SchedulerOutput, budget: int) -> None:
        """Swap out lower-priority running requests, lowest first, while the waiting head outranks them and
        does not fit (module docstring, 0.). Runs before anything is scheduled this step, so no scheduled
        request is ever taken back; does not count as this step's KV-pressure preemption."""
        running, waiting = self._running, self._waiting
        if not waiting or not running or running[-1].priority >= waiting[0].priority:
            return
        head = waiting[0]
        manager = self.kv_cache_manager
        max_num_seqs = self.scheduler_config.max_num_seqs
        while running and running[-1].priority < head.priority:
            prefix_hit = manager.get_computed_blocks(head)  # again after each swap-out: it may free cached blocks
            num_new_tokens = self._num_new_tokens(head, budget, num_computed_tokens=prefix_hit.num_tokens)
            if len(running) < max_num_seqs and manager.can_allocate(head, num_new_tokens, prefix_hit):
                return
            self._preempt(running[-1], output)

    def _schedule_running(self, output: SchedulerOutput, budget: int, first: int = 0) -> tuple[int, bool]:
        """first: running[:first] are scheduled already (decode rows in bulk, engine/mixed_step.py)."""
        try_allocate_slots = self.kv_cache_manager.try_allocate_slots
        chunked = self.scheduler_config.enable_chunked_prefill
        running = self._running
        scheduled = output.requests
        preempted = False
        i = first
        # victims are taken from the tail, so running[:i] (already scheduled) is never touched
        while i < len(running) and budget > 0:
            request = running[i]
            num_new_tokens = request.num_tokens - request.num_computed_tokens  # as _num_new_tokens
            if num_new_tokens > budget:
                num_new_tokens = budget if chunked else 0
            if num_new_tokens == 0:  # chunked prefill off and the rest does not fit this step
                i += 1
                continue
            num_spec_tokens = self._num_spec_tokens(request, num_new_tokens, budget) if request.spec_token_ids else 0
            while (copies := try_allocate_slots(request, num_new_tokens + num_spec_tokens)) is None:
                if num_spec_tokens:
                    num_spec_tokens = 0
                    continue
                victim = running[-1]
                self._preempt(victim, output)
                preempted = True
                if victim is request:
                    break
            if copies is None:
                break  # it was the last one standing and preempted itself
            if copies:
                output.blocks_to_copy.extend(copies)
            scheduled.append(self._make_scheduled(request, num_new_tokens, num_spec_tokens))
            budget -= num_new_tokens + num_spec_tokens
            i += 1
        return budget, preempted

    def _schedule_swapped(self, output: SchedulerOutput, budget: int) -> int:
        manager = self.kv_cache_manager
        i = 0  # swapped[:i]: remote requests whose KV is not back yet (engine/scheduler_remote.py), skipped
        while i < len(self._swapped) and budget > 0 and len(self._running) < self.scheduler_config.max_num_seqs:
            request = self._swapped[i]
            if self._outranked_by_waiting(request):
                break  # a higher-priority waiting request takes the room first
            if manager.remote and self._remote_blocked(request):
                i += 1
                continue
            if not self._lora_fits(request):
                break
            num_new_tokens = self._num_new_tokens(request, budget)
            if num_new_tokens == 0:
                break
            if request.req_id in manager.remote:
                if not self._swap_in_remote(request, num_new_tokens, output):
                    break
            elif not manager.can_swap_in(request, num_new_tokens):
                break
            else:
                pairs = manager.swap_in(request)
                output.blocks_to_swap_in.extend(pairs)
                self._counters.num_swapped_in_blocks_total += len(pairs)
                self._emit(SchedulerEventKind.SWAPPED_IN, request, num_blocks=len(pairs))
            del self._swapped[i]
            output.blocks_to_copy.extend(manager.allocate_slots(request, num_new_tokens))
            request.status = RequestStatus.RUNNING
            self._insort(self._running, request)
            output.requests.append(self._make_scheduled(request, num_new_tokens, 0))
            budget -= num_new_tokens
        return budget

    def _schedule_waiting(self, output: SchedulerOutput, budget: int) -> None:
        manager = self.kv_cache_manager
        running_loras = self.running_lora_ids() if self.scheduler_config.max_loras else None
        skipped: list[Request] = []  # waiting for an adapter slot: the requests behind them may go first
        while self._waiting and budget > 0 and len(self._running) < self.scheduler_config.max_num_seqs:
            request = self._waiting[0]
            if self._swapped and self._swapped[0].priority >= request.priority:
                break  # swapped requests of its priority or higher resume first
            if running_loras is not None and request.lora_id is not None:
                if request.lora_id not in running_loras and len(running_loras) >= self.scheduler_config.max_loras:
                    skipped.append(self._waiting.popleft())
                    continue
                running_loras.add(request.lora_id)  # if it is not admitted, the loop ends here anyway
            prefix_hit = manager.get_computed_blocks(request)
            num_new_tokens = self._num_new_tokens(request, budget, num_computed_tokens=prefix_hit.num_tokens)
            if num_new_tokens == 0 or not manager.can_allocate(request, num_new_tokens, prefix_hit):
                break
            self._waiting.popleft()
            output.blocks_to_copy.extend(manager.allocate_slots(request, num_new_tokens, prefix_hit))
            request.num_computed_tokens = prefix_hit.num_tokens
            request.status = RequestStatus.RUNNING
            self._insort(self._running, request)
            self._counters.prefix_cache_queries_total += request.num_tokens
            self._counters.prefix_cache_hits_total += prefix_hit.num_tokens
            if request.first_scheduled_time_s is None:
                request.first_scheduled_time_s = self._clock.now()
                request.num_cached_prompt_tokens = prefix_hit.num_tokens
                self._counters.num_prompt_tokens_total += request.num_prompt_tokens
                self._counters.num_cached_prompt_tokens_total += prefix_hit.num_tokens
                self._emit(
                    SchedulerEventKind.SCHEDULED,
                    request,
                    queue_time_s=request.first_scheduled_time_s - request.arrival_time_s,
                    num_cached_tokens=prefix_hit.num_tokens,
                )
            output.requests.append(self._make_scheduled(request, num_new_tokens, 0))
            budget -= num_new_tokens
        self._waiting.extendleft(reversed(skipped))  # back at the front, in their order

    def _lora_fits(self, request: Request) -> bool:
        """Running ``request`` keeps the running set within ``max_loras`` distinct adapters."""
        max_loras = self.scheduler_config.max_loras
        if request.lora_id is None or not max_loras:
            return True
        running = {r.lora_id for r in self._running}
        running.discard(None)
        return request.lora_id in running or len(running) < max_loras

    def running_lora_ids(self) -> set[int]:
        return {r.lora_id for r in self._running if r.lora_id is not None}

    def waiting_lora_ids(self) -> set[int]:
        """Adapters of requests waiting or swapped out."""
        return {r.lora_id for r in (*self._waiting, *self._swapped) if r.lora_id is not None}

    def _num_new_tokens(self, request: Request, budget: int, num_computed_tokens: int | None = None) -> int:
        """Known tokens to compute this step: all that are left, or a chunk that fits ``budget``
        (0 when chunked prefill is off and they do not fit)."""
        computed = request.num_computed_tokens if num_computed_tokens is None else num_computed_tokens
        num_left = request.num_tokens - computed
        if num_left <= budget:
            return num_left
        return budget if self.scheduler_config.enable_chunked_prefill else 0

    def _num_spec_tokens(self, request: Request, num_new_tokens: int, budget: int) -> int:
        """Drafts to verify after the known tokens: only when the chunk reaches the last known token,
        within the budget, and never past max_model_len or the device capacity."""
        if not request.spec_token_ids or request.num_computed_tokens + num_new_tokens != request.num_tokens:
            return 0
        room = min(self.scheduler_config.max_model_len, self._max_device_tokens) - request.num_tokens
        return max(0, min(len(request.spec_token_ids), budget - num_new_tokens, room))

    def _make_scheduled(self, request: Request, num_new_tokens: int, num_spec_tokens: int) -> ScheduledRequest:
        start, all_token_ids = request.num_computed_tokens, request.all_token_ids
        end = start + num_new_tokens
        return ScheduledRequest(
            req_id=request.req_id,
            token_ids=all_token_ids[start:end],
            start_pos=start,
            block_ids=self.kv_cache_manager.get_block_ids(request.req_id),
            sample=end == len(all_token_ids),
            sampling_params=request.sampling_params,
            num_output_tokens=len(request.output_token_ids),
            spec_token_ids=request.spec_token_ids[:num_spec_tokens] if num_spec_tokens else [],
            lora_id=request.lora_id,
            spec_draft_probs=request.spec_draft_probs if num_spec_tokens else None,
            logits_inputs=request.logits_inputs(),
            prompt_targets=request.prompt_targets(start, end),
        )

    def _preempt(self, victim: Request, output: SchedulerOutput) -> None:
        manager = self.kv_cache_manager
        self._running.remove(victim)
        victim.num_preemptions += 1
        self._counters.num_preemptions_total += 1
        if self._swap_out(victim, output):  # host RAM or a peer (engine/scheduler_remote.py)
            victim.status = RequestStatus.SWAPPED
            self._insort(self._swapped, victim)
            self._emit(SchedulerEventKind.PREEMPTED, victim, mode=PreemptionMode.SWAP.value)
            return
        manager.free(victim)
        self._counters.num_recomputed_tokens_total += victim.num_computed_tokens
        victim.num_computed_tokens = 0
        victim.status = RequestStatus.WAITING
        self._queue_waiting(victim, front=True)
        self._emit(SchedulerEventKind.PREEMPTED, victim, mode=PreemptionMode.RECOMPUTE.value)

    # -- after the runner ------------------------------------------------------------------------

    def update_from_output(self, scheduler_output: SchedulerOutput, runner_output: RunnerOutput) -> list[RequestUpdate]:
        """Commit a step: advance counters, append sampled tokens, finish and free requests.

        For a request scheduled with ``sample=True`` the runner returns 1 + (accepted drafts) tokens;
        ``num_computed_tokens`` advances by the scheduled known tokens plus the accepted drafts only
        (a rejected draft's KV slot is overwritten later). Requests finished or aborted since the step
        was scheduled are skipped.
        """
        requests = self._requests
        sampled_token_ids = runner_output.sampled_token_ids
        live = []
        for scheduled in scheduler_output.requests:
            request = requests.get(scheduled.req_id)
            if request is None or request.status is not _RUNNING:
                continue
            if request.num_computed_tokens != scheduled.start_pos:
                raise ValueError(f"request {scheduled.req_id!r}: output of a stale step (updated twice?)")
            if scheduled.sample and not sampled_token_ids.get(scheduled.req_id):
                raise ValueError(f"request {scheduled.req_id!r}: the runner sampled no token")
            live.append((scheduled, request))

        cache_computed_blocks = self.kv_cache_manager.cache_computed_blocks
        updates = []
        num_generation_tokens = 0
        for scheduled, request in live:
            if not scheduled.sample:
                request.num_computed_tokens += len(scheduled.token_ids)
                cache_computed_blocks(request)
                continue
            update = self._append_sampled(request, scheduled, runner_output)
            num_generation_tokens += len(update.new_token_ids)
            updates.append(update)
        self._counters.num_generation_tokens_total += num_generation_tokens
        return updates

    def _append_sampled(
        self, request: Request, scheduled: ScheduledRequest, runner_output: RunnerOutput
    ) -> RequestUpdate:
        req_id = request.req_id
        sampled = runner_output.sampled_token_ids[req_id]
        num_spec_tokens = len(scheduled.spec_token_ids)
        num_accepted = min(len(sampled) - 1, num_spec_tokens) if num_spec_tokens else 0
        request.num_computed_tokens += len(scheduled.token_ids) + num_accepted
        if request.spec_token_ids:
            request.spec_token_ids = []
            request.spec_draft_probs = None
        if num_spec_tokens:
            self.kv_cache_manager.rollback_slots(request)  # the rejected drafts' slots
        if num_accepted == 0:  # the common case: one token, no drafts
            token_id = sampled[0]
            request.append_output_token_ids(token_id)
            new_token_ids = [token_id]
            finished = self._check_stop(request, token_id)
        else:
            new_token_ids = []
            finished = False
            for token_id in sampled[: num_accepted + 1]:
                request.append_output_token_ids(token_id)
                new_token_ids.append(token_id)
                if self._check_stop(request, token_id):
                    finished = True
                    break
        if request.first_token_time_s is None:
            request.first_token_time_s = self._clock.now()
        self.kv_cache_manager.cache_computed_blocks(request)  # before a finish frees them
        if finished:
            self._running.remove(request)
            self._release_finished(request)
        logprobs = runner_output.logprobs.get(req_id)
        return RequestUpdate(
            req_id,
            new_token_ids,
            list(logprobs[: len(new_token_ids)]) if logprobs else [],
            finished,
            request.finish_reason,
            request.stop_reason,
        )

    def _check_stop(self, request: Request, token_id: int) -> bool:
        """Finish the request if ``token_id`` (just appended) ends it. A stop token wins over a length limit."""
        params = request.sampling_params
        if (token_id == request.eos_token_id and not params.ignore_eos) or token_id in params.stop_token_ids:
            request.status = _FINISHED_STOPPED
            request.finish_reason = _STOP
            request.stop_reason = token_id
            return True
        num_tokens = request.num_tokens
        if (
            request.num_output_tokens >= params.max_tokens
            or num_tokens >= self.scheduler_config.max_model_len
            # the next step would compute all num_tokens positions: more than the device holds
            or num_tokens > self._max_device_tokens
        ):
            request.status = _FINISHED_LENGTH
            request.finish_reason = _LENGTH
            return True
        return False

    def _release_finished(self, request: Request) -> None:
        """Free a finished request's blocks (not yet removed from any queue) and report it next step."""
        self.kv_cache_manager.free(request)
        self._finished_req_ids.append(request.req_id)
        reason = request.finish_reason.value if request.finish_reason else None
        self._emit(SchedulerEventKind.FINISHED, request, reason=reason, num_output_tokens=request.num_output_tokens)

    # -- observability ---------------------------------------------------------------------------

    def make_stats(self) -> SchedulerStats:
        manager = self.kv_cache_manager
        c = self._counters
        return SchedulerStats(
            num_running=len(self._running),
            num_waiting=len(self._waiting),
            num_swapped=len(self._swapped),
            kv_usage=manager.device_usage,
            num_free_device_blocks=manager.num_free_device_blocks,
            num_free_host_blocks=manager.num_free_host_blocks,
            num_preemptions_total=c.num_preemptions_total,
            num_swapped_out_blocks_total=c.num_swapped_out_blocks_total,
            num_swapped_in_blocks_total=c.num_swapped_in_blocks_total,
            num_recomputed_tokens_total=c.num_recomputed_tokens_total,
            prefix_cache_queries_total=c.prefix_cache_queries_total,
            prefix_cache_hits_total=c.prefix_cache_hits_total,
            num_prompt_tokens_total=c.num_prompt_tokens_total,
            num_generation_tokens_total=c.num_generation_tokens_total,
            num_cached_prompt_tokens_total=c.num_cached_prompt_tokens_total,
        )

    def reset_counters(self) -> None:
        """Start the totals and the event stream afresh (after a node's start-up profile, which is no traffic)."""
        self._counters = SchedulerCounters()
        self._events.clear()

    def take_events(self) -> list[SchedulerEvent]:
        events = list(self._events)
        self._events.clear()
        return events

    def _emit(self, kind: SchedulerEventKind, request: Request, **details: object) -> None:
        self._events.append(SchedulerEvent(kind, request.req_id, self._clock.now(), details))

    def _insort(self, queue: list[Request], request: Request) -> None:
        bisect.insort(queue, request, key=self._priority)

    def _priority(self, request: Request) -> tuple[int, float, int]:
        """Lower sorts first: higher priority, then earlier arrival, then earlier add_request."""
        return -request.priority, request.arrival_time_s, self._admission_order[request.req_id]

    def _queue_waiting(self, request: Request, *, front: bool) -> None:
        """FCFS within a priority: at the back (a new request) or the front (a preempted one) of its
        priority's group. With one priority everywhere: append / appendleft."""
        waiting, priority = self._waiting, request.priority
        if front:
            i = 0
            while i < len(waiting) and waiting[i].priority > priority:
                i += 1
        else:
            i = len(waiting)
            while i > 0 and waiting[i - 1].priority < priority:
                i -= 1
        waiting.insert(i, request)
