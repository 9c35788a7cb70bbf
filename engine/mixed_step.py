"""Mixed steps: the pure decode rows of a step applied in bulk, the other rows through the scheduler.

The fleet simulator's second fast path (after engine/multi_step.py's decode runs): a step that admits a new
request, or carries a prompt chunk, cannot be part of a decode run, yet most of its rows are still running
requests that decode one token each. Scheduled the plain way every such row costs a ``ScheduledRequest`` (its
block table copied, its token sliced), a runner row, a ``RequestUpdate`` and a ``RequestOutput``. Here the
leading rows of the running set that are *pure decode rows*::

    one known token left, >= 1 generated, no drafts, no adapter       (1 token each, sampled)
    every block from the one it writes onwards is its own            (no copy-on-write)
    the blocks they open this step fit in the free device blocks     (no KV-pressure preemption among them)

are taken as a one-step ``DecodeRun`` (its ``requests``, ``starts``, ``table_lens``, ``kv_read``): the scheduler
allocates their new blocks in running order and charges their tokens to the budget (``allocate_decode_rows``),
then schedules everything after them — the rest of the running set, swapped and waiting requests — with its own
code (``Scheduler.schedule(decode=...)``); the runner prices the step with those rows counted in
(``execute_with_decode_rows``: the same sums its per-row loop makes); and ``commit_decode_rows`` applies them
after the step exactly as ``update_from_output`` would, before the scheduled rows, in running order: token,
counters, prefix-cache registration, stop check, finish.

The rows it leaves to the scheduler are the ones the plain step schedules after these (it walks the running
set in order, and a preemption victim is always taken from the tail, never before the row being scheduled),
so the step is the same step. Conditions it checks besides the rows': nobody swapped out, no pinned
copy-on-write source, no priority preemption pending. ``tests/engine/test_mixed_step.py`` checks it against
plain steps.
"""

from __future__ import annotations

from operator import is_not
from typing import Any

from engine.multi_step import DecodeRun, rows_after
from engine.request import RequestStatus

_RUNNING = RequestStatus.RUNNING

# The functions below work on an engine.scheduler.Scheduler (typed Any: the scheduler imports this module).


def plan_decode_rows(scheduler: Any, token_id: int) -> DecodeRun | None:
    """The leading pure decode rows of the next step as a one-step run (None: there are none, or the step has
    to be planned the plain way). Changes nothing (it takes the rows the last decode run or mixed step planned
    ahead, ``multi_step.rows_after``, and reads the rows after them)."""
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
    ahead, scheduler._rows_after = scheduler._rows_after, None
    if (
        ahead is not None
        and ahead.step_id == scheduler._next_step_id
        and ahead.token_id == token_id
        and len(ahead.requests) <= len(running)
        and len(ahead.requests) <= budget
        and not any(map(is_not, running, ahead.requests))
    ):  # the leading rows, planned by the step that left the scheduler here
        requests, starts, table_lens = ahead.requests, ahead.starts, ahead.table_lens
        opening, stop_rows, lefts, kv_read = ahead.opening, ahead.stop_rows, ahead.lefts, ahead.kv_read
        lagging = ahead.lagging
        rest = running[len(requests) :] if len(requests) < budget else ()
    else:
        requests, starts, table_lens, opening, stop_rows, lefts, lagging, kv_read = [], [], [], [], [], [], [], 0
        rest = running
    num_cached = manager._num_cached_blocks if manager.enable_prefix_caching else None
    max_model_len = config.max_model_len
    max_device_tokens = scheduler._max_device_tokens
    block_size = manager.block_size
    tables = manager._device_tables
    ref_counts = manager._device._ref_counts
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
        elif first == table_len:
            opening.append(len(requests))
        else:
            break
        # the step whose token ends it by length (_check_stop: output count, context, device capacity); it may
        # finish this step by that, or by a stop token (the other rows' _check_stop is False)
        params = request.sampling_params
        left = params.max_tokens - len(output)
        if max_model_len - num_tokens < left:
            left = max_model_len - num_tokens
        if max_device_tokens + 1 - num_tokens < left:
            left = max_device_tokens + 1 - num_tokens
        if (
            left <= 1
            or (token_id == request.eos_token_id and not params.ignore_eos)
            or token_id in params.stop_token_ids
        ):
            stop_rows.append(len(requests))
        if num_cached is not None and num_cached.get(request.req_id, 0) < start // block_size:
            lagging.append(len(requests))  # its registrations lag behind its computed blocks (none, after a step)
        requests.append(request)
        starts.append(start)
        table_lens.append(table_len)
        lefts.append(left)
        kv_read += start
        if len(requests) == budget:
            break
    if not requests or len(opening) > manager.num_free_device_blocks:
        return None
    return DecodeRun(
        requests, token_id, 1, kv_read, starts, table_lens, stop_rows, opening, lefts=lefts, lagging=lagging
    )


def allocate_decode_rows(scheduler: Any, run: DecodeRun) -> None:
    """Schedule the rows (``Scheduler.schedule(decode=run)``): a fresh block for each that opens one, in
    running order, as ``_schedule_running``'s ``try_allocate_slots`` would."""
    try_allocate_slots = scheduler.kv_cache_manager.try_allocate_slots
    requests = run.requests
    block_size = scheduler.kv_cache_manager.block_size
    opening = run.opening
    if opening is None:
        opening = [i for i, (s, n) in enumerate(zip(run.starts, run.table_lens)) if s == n * block_size]
    for i in opening:
        if try_allocate_slots(requests[i], 1) != []:
            raise RuntimeError(f"{requests[i].req_id}: the decode row's block allocation did not go as planned")


def commit_decode_rows(scheduler: Any, run: DecodeRun) -> list[Any]:
    """Apply the rows after their step, as ``update_from_output`` applies them (before the step's scheduled
    rows); the requests that finished, in running order."""
    token_id = run.token_id
    running = scheduler._running
    manager = scheduler.kv_cache_manager
    cache_computed_blocks = manager.cache_computed_blocks
    # a row registers a block when it fills one, or when its registrations lag (never, after a step: every
    # step registers its rows' computed blocks) — the cases where cache_computed_blocks would do anything
    caching = manager.enable_prefix_caching
    block_size = manager.block_size
    num_cached = manager._num_cached_blocks
    check_stop = scheduler._check_stop
    finished = []
    num_live = 0
    stop_rows = run.stop_rows if run.stop_rows is not None else range(len(run.requests))
    lagging = None if run.lagging is None else set(run.lagging)  # else each row is looked up
    next_stop = stop_rows[0] if stop_rows else -1
    num_stop_rows_seen = 0
    # the rows that go on, as the next step's leading decode rows (multi_step.rows_after)
    lefts = run.lefts if run.lefts is not None else [2] * len(run.requests)  # unknown: no plan ahead (below)
    on_requests: list[Any] = []
    on_starts: list[int] = []
    on_table_lens: list[int] = []
    on_lefts: list[int] = []
    for i, (request, start, table_len, left) in enumerate(zip(run.requests, run.starts, run.table_lens, lefts)):
        may_stop = i == next_stop
        if may_stop:
            num_stop_rows_seen += 1
            next_stop = stop_rows[num_stop_rows_seen] if num_stop_rows_seen < len(stop_rows) else -1
        if request.status is not _RUNNING:
            continue  # aborted since the step was scheduled: skipped, as update_from_output skips it
        num_live += 1
        end = start + 1
        request.num_computed_tokens = end
        request.output_token_ids.append(token_id)
        request._all_token_ids.append(token_id)
        stops = may_stop and check_stop(request, token_id)  # plan_decode_rows: False for the others
        if caching and (
            end % block_size == 0
            or (i in lagging if lagging is not None else num_cached.get(request.req_id, 0) < start // block_size)
        ):
            cache_computed_blocks(request)  # before a finish frees them
        if stops:
            running.remove(request)
            scheduler._release_finished(request)
            finished.append(request)
        else:
            on_requests.append(request)
            on_starts.append(end)
            on_table_lens.append(table_len + 1 if start == table_len * block_size else table_len)
            on_lefts.append(left - 1)
    scheduler._counters.num_generation_tokens_total += num_live
    scheduler._rows_after = (
        rows_after(scheduler, token_id, on_requests, on_starts, on_table_lens, on_lefts)
        if run.lefts is not None
        else None
    )
    return finished
