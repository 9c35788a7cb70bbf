"""Multi-step decode: apply several pure decode steps at once where nothing can happen in between.

The fleet simulator's fast path (sim/des.py, through ``LLMEngine.plan_decode_steps``). A run of steps is
*provably identical in shape* — each schedules exactly the same requests, one token each — when:

    nobody waits or is swapped out         no admission, resume or priority preemption can happen
    every running request decodes          one known token left, >= 1 generated, no drafts, no adapter
    all of them fit the token budget       one token each
    the blocks the run appends fit         in the free device blocks: no KV-pressure preemption, and no
                                           block written is shared (no copy-on-write)
    the runner's token is known            it samples a fixed token (the simulated runner's placeholder)

and the run ends at the first step in which a request can finish (its length limits and the stop tokens are
known in advance). Whoever drives the engine adds the conditions outside it: no arrival, no load report
within the run (the simulator cuts the run at the step in flight when a request arrives).

The rows are held by the scheduler's ``DecodeCohort`` (engine/decode_cohort.py), across runs and mixed steps
(engine/mixed_step.py): a plan reads only the running rows the cohort does not hold yet, and
``commit_decode_run`` applies k of the planned steps as k rounds of ``schedule()`` / runner /
``update_from_output`` would, in the same order — block allocations (step by step, running order), prefix-cache
registrations after each step, the finishes of the last step (stop check, blocks freed, the request reported
finished), step ids and token counters — in O(events + steps): a row's k tokens are added when its fields are
next read. ``tests/engine/test_multi_step.py`` checks it against plain steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import is_not
from typing import TYPE_CHECKING, Any

from engine.decode_cohort import DecodeCohort, current_cohort, steps_left

if TYPE_CHECKING:
    from engine.request import Request

# The functions below work on an engine.scheduler.Scheduler (typed Any: the scheduler imports this module).


@dataclass(slots=True)
class DecodeRun:
    """Up to ``max_steps`` pure decode steps of the cohort's rows (``plan_decode_run``), or a mixed step's leading
    rows (one step; engine/mixed_step.py)."""

    requests: list[Request]  # the rows, in running order (each step schedules them in this order)
    token_id: int  # what the runner samples for each of them, every step
    max_steps: int  # the last step that may run: a request finishes in it, or a caller's cap
    kv_read: int  # context tokens the first step reads (sum of num_computed_tokens)
    cohort: DecodeCohort  # the scheduler's rows (engine/decode_cohort.py)
    first_step: int  # the scheduler's step id of the first step


def plan_decode_run(scheduler: Any, token_id: int, max_steps: int) -> DecodeRun | None:
    """The pure decode steps the scheduler's state allows from now (None: the next step is no pure decode).
    Changes nothing but the cohort's extent (the running rows it reads join it: a lazy form of the same state);
    ``kv_step_limit`` bounds the run by the free blocks."""
    running = scheduler._running
    if not running or scheduler._swapped or max_steps < 1:
        return None
    config = scheduler.scheduler_config
    newest = running[-1]  # the likeliest to be still computing its prompt: a cheap early refusal
    if len(running) > config.max_num_batched_tokens or newest.num_tokens - newest.num_computed_tokens != 1:
        return None
    if scheduler._waiting and not _waiting_head_stays(scheduler, token_id):
        return None
    manager = scheduler.kv_cache_manager
    decode_extent = manager.decode_extent
    block_size = manager.block_size
    tables = manager._device_tables
    ref_counts = manager._device._ref_counts
    cohort = current_cohort(scheduler, token_id)
    num_cached = manager._num_cached_blocks if manager.enable_prefix_caching else None
    joining = []
    for request in running[len(cohort) :]:
        num_tokens = len(request._all_token_ids)
        start = request.num_computed_tokens
        output = request.output_token_ids
        if num_tokens - start != 1 or not output or request.spec_token_ids or request.lora_id is not None:
            return None
        # manager.decode_extent, inlined for its common case: the block written next is the table's last
        table = tables.get(request.req_id)
        if not table:
            return None
        table_len = len(table)
        first = start // block_size
        if first == table_len - 1:
            if ref_counts[table[first]] > 1:
                return None
        elif (first != table_len or start != first * block_size) and decode_extent(request) is None:
            return None
        lagging = num_cached is not None and num_cached.get(request.req_id, 0) < start // block_size
        joining.append((request, start, table_len, steps_left(scheduler, request, token_id), lagging))
    for row in joining:
        cohort.join(*row)
    limit = max_steps
    first_stop = cohort.first_stop_step()
    if first_stop is not None and first_stop - cohort.step + 1 < limit:
        limit = max(first_stop - cohort.step + 1, 1)
    return DecodeRun(list(cohort.requests), token_id, limit, cohort.kv_read, cohort, cohort.step)


def _waiting_head_stays(scheduler: Any, token_id: int) -> bool:
    """The waiting head cannot be admitted now and provably not before the run ends, so each of its steps
    tries and fails exactly as now (``Scheduler._schedule_waiting``; nothing behind the head overtakes it).

    During a run nothing is freed (finishes come at its end) and blocks are only taken, so the free blocks only
    shrink; the running count and the budget left by the decoders stay. What could still let the head in is its
    prefix hit: it cannot shrink when every hit block is in use (none evictable), and it grows only if the
    block after the hit gets registered, and every block a run registers ends with an output (the run's) token.
    """
    config = scheduler.scheduler_config
    running, head = scheduler._running, scheduler._waiting[0]
    if config.max_loras or running[-1].priority < head.priority:
        return False  # adapter slots let the queue be overtaken; a higher priority head preempts
    if len(running) >= config.max_num_seqs:
        return True
    budget = config.max_num_batched_tokens - len(running)
    if budget <= 0:
        return True
    manager = scheduler.kv_cache_manager
    if manager.pinned_block_ids:  # freed by the next step's begin_step: more room than now
        return False
    hit = manager.get_computed_blocks(head)  # as the step's own lookup (it only extends the head's hash chain)
    num_new_tokens = scheduler._num_new_tokens(head, budget, num_computed_tokens=hit.num_tokens)
    if num_new_tokens == 0:
        return True
    if manager.can_allocate(head, num_new_tokens, hit):
        return False
    device = manager.pool_ref_count
    if any(device(b) == 0 for b in hit.block_ids):
        return False  # an evictable hit block may be evicted by the run, changing what the head needs
    block_size = manager.block_size
    num_hit = len(hit.block_ids)
    # False where the run might register the head's next block
    last_of_next = (num_hit + 1) * block_size - 1
    return num_hit >= (head.num_tokens - 1) // block_size or head.all_token_ids[last_of_next] != token_id


def kv_step_limit(scheduler: Any, run: DecodeRun, num_steps: int) -> int:
    """The most steps (<= num_steps) whose new blocks fit in the free device blocks."""
    free = scheduler.kv_cache_manager.num_free_device_blocks
    blocks_needed = run.cohort.blocks_needed
    if blocks_needed(num_steps) <= free:
        return num_steps
    lo, hi = 0, num_steps  # blocks_needed(lo) fits (0 always does), blocks_needed(hi) does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if blocks_needed(mid) <= free:
            lo = mid
        else:
            hi = mid
    return lo


def commit_decode_run(
    scheduler: Any, run: DecodeRun, num_steps: int, finished_only: bool = False
) -> list[tuple[Request, list[int], bool]]:
    """Apply the first ``num_steps`` steps of ``run`` (module docstring); per request, in running order: the
    tokens it got (all ``num_steps`` of them) and whether it finished (finished_only: only the requests that
    finished; each of the others got the ``num_steps`` tokens, added to its fields and metrics when they are
    next read). The scheduler must be as ``plan_decode_run`` left it."""
    requests = run.requests
    running = scheduler._running
    cohort = run.cohort
    if not 1 <= num_steps <= run.max_steps or len(running) != len(requests):
        raise ValueError(f"cannot commit {num_steps} of a {run.max_steps}-step decode run now")
    if any(map(is_not, running, requests)) or scheduler._cohort is not cohort or cohort.step != run.first_step:
        raise ValueError("the running set changed since the decode run was planned")
    first, k = run.first_step, num_steps
    if not finished_only:  # the updates below carry the run's tokens: the metrics count those before it now
        for row in cohort.rows:
            cohort.sync_metrics(row, first)
    num_rows = len(cohort)
    last = first + k - 1
    may_finish = k == run.max_steps  # before step max_steps nobody stops (plan_decode_run's limit)
    finished: list[Request] = []
    allocate, after_step = cohort.allocate, cohort.after_step
    for step in range(first, first + k):
        allocate(scheduler, step)
        done = after_step(scheduler, step, may_finish and step == last, first)
        if done:
            finished.extend(done)
    cohort.step = first + k
    cohort.last_end_s = scheduler._clock.now()
    scheduler._next_step_id += k
    scheduler._counters.num_generation_tokens_total += k * num_rows
    tokens = [run.token_id] * k  # one token list for all: the caller copies what it keeps
    if finished_only:
        return [(request, tokens, True) for request in finished]
    for row in cohort.rows:  # their tokens now; their metrics through the updates
        cohort.sync_tokens(row, first + k)
        row.msynced = first + k
    ended = set(map(id, finished))
    return [(request, tokens, id(request) in ended) for request in requests]


@dataclass(slots=True)
class DecodeSteps:
    """A planned decode run with its predicted step times (``LLMEngine.plan_decode_steps``)."""

    run: DecodeRun
    step_times_s: list[float]
    end_times_s: list[float]  # engine clock at the end of each step

    @property
    def num_steps(self) -> int:
        return len(self.step_times_s)

    @property
    def end_s(self) -> float:
        return self.end_times_s[-1]

    def truncate(self, num_steps: int) -> None:
        """Keep the first ``num_steps`` (>= 1) steps."""
        if not 1 <= num_steps <= len(self.step_times_s):
            raise ValueError(f"num_steps must be in 1..{len(self.step_times_s)}, got {num_steps}")
        del self.step_times_s[num_steps:]
        del self.end_times_s[num_steps:]
