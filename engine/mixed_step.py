"""Mixed steps: the pure decode rows of a step applied in bulk, the other rows through the scheduler.

The fleet simulator's second fast path (after engine/multi_step.py's decode runs): a step that admits a new
request, or carries a prompt chunk, cannot be part of a decode run, yet most of its rows are still running
requests that decode one token each. Scheduled the plain way every such row costs a ``ScheduledRequest`` (its
block table copied, its token sliced), a runner row, a ``RequestUpdate`` and a ``RequestOutput``. Here the
leading rows of the running set that are *pure decode rows*::

    one known token left, >= 1 generated, no drafts, no adapter       (1 token each, sampled)
    every block from the one it writes onwards is its own            (no copy-on-write)
    the blocks they open this step fit in the free device blocks     (no KV-pressure preemption among them)

are the scheduler's ``DecodeCohort`` (engine/decode_cohort.py: held across steps, with their events bucketed by
step; a plan reads only the running rows it does not hold yet), taken as a one-step ``DecodeRun``: the scheduler
allocates their new blocks in running order and charges their tokens to the budget (``allocate_decode_rows``),
then schedules everything after them — the rest of the running set, swapped and waiting requests — with its own
code (``Scheduler.schedule(decode=...)``); the runner prices the step with those rows counted in
(``execute_with_decode_rows``: the same sums its per-row loop makes); and ``commit_decode_rows`` applies them
after the step exactly as ``update_from_output`` would, before the scheduled rows, in running order: counters,
prefix-cache registration, stop check, finish (each row's token is added when its fields are next read).

The rows it leaves to the scheduler are the ones the plain step schedules after these (it walks the running
set in order, and a preemption victim is always taken from the tail, never before the row being scheduled),
so the step is the same step. Conditions it checks besides the rows': nobody swapped out, no pinned
copy-on-write source, no priority preemption pending. ``tests/engine/test_mixed_step.py`` checks it against
plain steps.
"""

from __future__ import annotations

from typing import Any

from engine.decode_cohort import current_cohort, steps_left
from engine.multi_step import DecodeRun

# The functions below work on an engine.scheduler.Scheduler (typed Any: the scheduler imports this module).


def plan_decode_rows(scheduler: Any, token_id: int) -> DecodeRun | None:
    """The leading pure decode rows of the next step as a one-step run (None: there are none, or the step has
    to be planned the plain way). Changes nothing but the cohort's extent (the rows after it that it reads join
    it: a lazy form of the same state)."""
    running = scheduler._running
    if not running or scheduler._swapped:
        return None
    waiting = scheduler._waiting
    if waiting and running[-1].priority < waiting[0].priority:
        return None  # the step may begin by swapping running requests out for the waiting head
    manager = scheduler.kv_cache_manager
    if manager._pinned_block_ids:
        return None
    config = scheduler.scheduler_config
    budget = config.max_num_batched_tokens
    cohort = current_cohort(scheduler, token_id)
    if len(cohort) > budget:  # (never: a run takes at most the budget's rows)
        scheduler.sync_decode_rows(drop=True)
        return None
    rest = running[len(cohort) :] if len(cohort) < budget else ()
    num_cached = manager._num_cached_blocks if manager.enable_prefix_caching else None
    block_size = manager.block_size
    tables = manager._device_tables
    ref_counts = manager._device._ref_counts
    join = cohort.join
    for request in rest:
        start = request.num_computed_tokens
        num_tokens = len(request._all_token_ids)
        output = request.output_token_ids
        if num_tokens - start != 1 or not output or request.spec_token_ids or request.lora_id is not None:
            break
        table = tables.get(request.req_id)
        if not table:
            break
        table_len = len(table)
        first = start // block_size
        if first < table_len:
            if ref_counts[table[first]] > 1:
                break  # its next token lands in a shared block: a copy-on-write
            # blocks after ``first`` are never written this step: only the written one matters
        elif first != table_len:
            break
        # its registrations lag behind its computed blocks (none, after a step): caught up after this step
        lagging = num_cached is not None and num_cached.get(request.req_id, 0) < first
        join(request, start, table_len, steps_left(scheduler, request, token_id), lagging)
        if len(cohort) == budget:
            break
    if not len(cohort) or cohort.num_opening(cohort.step) > manager.num_free_device_blocks:
        return None
    return DecodeRun(list(cohort.requests), token_id, 1, cohort.kv_read, cohort, cohort.step)


def allocate_decode_rows(scheduler: Any, run: DecodeRun) -> None:
    """Schedule the rows (``Scheduler.schedule(decode=run)``): a fresh block for each that opens one, in
    running order, as ``_schedule_running``'s ``try_allocate_slots`` would."""
    run.cohort.allocate(scheduler, run.first_step)


def commit_decode_rows(scheduler: Any, run: DecodeRun) -> list[Any]:
    """Apply the rows after their step, as ``update_from_output`` applies them (before the step's scheduled
    rows); the requests that finished, in running order (an aborted row left the cohort when it was aborted)."""
    cohort = run.cohort
    if scheduler._cohort is not cohort or cohort.step != run.first_step:
        raise RuntimeError("the decode rows changed since their step was scheduled")
    num_live = len(cohort)
    finished = cohort.after_step(scheduler, run.first_step, True, run.first_step)
    cohort.step = run.first_step + 1
    cohort.last_end_s = scheduler._clock.now()
    scheduler._counters.num_generation_tokens_total += num_live
    return finished
