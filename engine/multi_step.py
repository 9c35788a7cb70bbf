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

``commit_decode_run`` then applies k of the planned steps as k rounds of ``schedule()`` / runner /
``update_from_output`` would, in the same order: block allocations (step by step, running order), prefix-cache
registrations after each step, the k tokens of every request, the finishes of the last step (stop check,
blocks freed, the request reported finished), step ids and token counters. It is O(requests + blocks
crossed), not O(requests x steps). ``tests/engine/test_multi_step.py`` checks it against plain steps.

Rows planned ahead (``rows_after``): the rows a decode run or a mixed step (engine/mixed_step.py) applied and
that go on are the next step's leading pure decode rows, and the pass that applied them knows their computed
tokens, device blocks and length limits afterwards. It leaves them on the scheduler (``_rows_after``, tagged
with the step id), and the next plan — a mixed step's or a run's — takes them as they are while they still
lead the running set unchanged, reading only the rows after them: one pass over the running rows per step
instead of two. Only the rows that can stop in a step are stop-checked (``stop_rows``), only those that open a
block allocate (``opening``). ``tests/engine/test_mixed_step.py`` checks them against fresh plans.
"""

from __future__ import annotations

from dataclasses import dataclass
from operator import is_not
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.request import Request

# The functions below work on an engine.scheduler.Scheduler (typed Any: the scheduler imports this module).


@dataclass(slots=True)
class DecodeRun:
    """Up to ``max_steps`` pure decode steps of the running set (``plan_decode_run``)."""

    requests: list[Request]  # the running requests, in running order (each step schedules them in this order)
    token_id: int  # what the runner samples for each of them, every step
    max_steps: int  # the last step that may run: a request finishes in it, or a caller's cap
    kv_read: int  # context tokens the first step reads (sum of num_computed_tokens)
    starts: list[int]  # num_computed_tokens of each request before the run
    table_lens: list[int]  # device blocks each request holds before the run
    # the rows (indices, ascending) that may finish in the run's last possible step (``max_steps``): a stop token,
    # or a length limit reached there; None: any row may (then every row's stop is checked)
    stop_rows: list[int] | None = None
    opening: list[int] | None = None  # a one-step run's rows that open a block (engine/mixed_step.py)
    lefts: list[int] | None = None  # per row: the step (1: the first) in which a length limit ends it
    # the rows whose prefix-cache registrations lag behind their computed blocks (none after a bulk step, which
    # registers every block it fills); None: not known (each row is looked up)
    lagging: list[int] | None = None
    step_id: int = -1  # a next step's rows planned ahead (``rows_after``): valid while the scheduler is at this step


def plan_decode_run(scheduler: Any, token_id: int, max_steps: int) -> DecodeRun | None:
    """The pure decode steps the scheduler's state allows from now (None: the next step is no pure decode).
    Changes nothing; ``kv_step_limit`` bounds the run by the free blocks."""
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
    max_model_len = config.max_model_len
    max_device_tokens = scheduler._max_device_tokens
    limit = max_steps
    ahead = _rows_ahead(scheduler, token_id)
    if ahead is not None:  # the leading rows, as the last step left them (rows_after): read only those after them
        starts, table_lens, lefts = list(ahead.starts), list(ahead.table_lens), list(ahead.lefts)
        kv_read = ahead.kv_read
        if lefts:
            least = min(lefts)
            if least < limit:
                limit = least if least > 1 else 1
        near = [(index, left) for index, left in enumerate(lefts) if left <= limit]
        first_index = len(starts)
        rest = running[first_index:]
    else:
        starts, table_lens, lefts, kv_read, near, first_index, rest = [], [], [], 0, [], 0, running
    num_cached = manager._num_cached_blocks if manager.enable_prefix_caching else None
    lagging: list[int] = []  # among the rows read here (those planned ahead are caught up)
    append_start, append_table_len, append_left = starts.append, table_lens.append, lefts.append
    # near: (row, steps it has left) of the rows within the limit when read
    for index, request in enumerate(rest, first_index):
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
        params = request.sampling_params
        if (token_id == request.eos_token_id and not params.ignore_eos) or token_id in params.stop_token_ids:
            limit = 1  # it stops at the first step
            near.append((index, 1))
        # the step after which _check_stop ends it by length (output count, context, device capacity)
        steps_left = params.max_tokens - len(output)
        if max_model_len - num_tokens < steps_left:
            steps_left = max_model_len - num_tokens
        if max_device_tokens + 1 - num_tokens < steps_left:
            steps_left = max_device_tokens + 1 - num_tokens
        if steps_left <= limit:
            near.append((index, steps_left))
            if steps_left < limit:
                limit = steps_left if steps_left > 1 else 1
        if num_cached is not None and num_cached.get(request.req_id, 0) < start // block_size:
            lagging.append(index)
        kv_read += start
        append_start(start)
        append_table_len(table_len)
        append_left(steps_left)
    # before step ``limit`` nobody stops; in it, at most the rows whose own stop falls there (the limit only fell
    # while reading, so a row read above it then is above it now)
    stop_rows = sorted({index for index, steps in near if steps <= limit})
    return DecodeRun(
        list(running), token_id, limit, kv_read, starts, table_lens, stop_rows, lefts=lefts, lagging=lagging
    )


def _rows_ahead(scheduler: Any, token_id: int) -> DecodeRun | None:
    """The rows the last step planned ahead (``rows_after``) where they still lead the running set as that step
    left them, each writing its table's last block or opening one (else None: read every row). Left in place."""
    ahead = scheduler._rows_after
    if (
        ahead is None
        or ahead.step_id != scheduler._next_step_id
        or ahead.token_id != token_id
        or ahead.lefts is None
        or len(ahead.requests) > len(scheduler._running)
        or any(map(is_not, scheduler._running, ahead.requests))
    ):
        return None
    block_size = scheduler.kv_cache_manager.block_size
    if any(start // block_size < n - 1 for start, n in zip(ahead.starts, ahead.table_lens)):
        return None  # blocks reserved past the one written: the plain reading checks them (decode_extent)
    return ahead


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
    manager = scheduler.kv_cache_manager
    block_size = manager.block_size
    free = manager.num_free_device_blocks
    starts, table_lens = run.starts, run.table_lens

    def blocks_needed(k: int) -> int:
        total = 0
        for start, table_len in zip(starts, table_lens):
            extra = -(-(start + k) // block_size) - table_len
            if extra > 0:
                total += extra
        return total

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
    finished; each of the others got the ``num_steps`` tokens). The scheduler must be as ``plan_decode_run``
    left it."""
    requests = run.requests
    running = scheduler._running
    if not 1 <= num_steps <= run.max_steps or len(running) != len(requests):
        raise ValueError(f"cannot commit {num_steps} of a {run.max_steps}-step decode run now")
    if any(map(is_not, running, requests)):
        raise ValueError("the running set changed since the decode run was planned")
    manager = scheduler.kv_cache_manager
    block_size = manager.block_size
    caching = manager.enable_prefix_caching
    k = num_steps
    token_id = run.token_id
    tokens = [token_id] * k
    # (step, phase, index): allocations while scheduling step j (phase 0), registrations after it (phase 1)
    events: list[tuple[int, int, int]] = []
    append_event = events.append
    num_cached = manager._num_cached_blocks
    lagging = run.lagging  # known at plan time (else looked up per row below)
    at_end: list[int] = []  # rows that fill a block in the last step (registered then)
    stepped: list[int] = []  # rows whose num_computed_tokens the events below move through the steps
    new_table_lens: list[int] = []  # each row's device blocks after the run: they cover its positions < stop
    for i, (request, start, table_len) in enumerate(zip(requests, run.starts, run.table_lens)):
        stop = start + k
        request.num_computed_tokens = stop  # where the run leaves it (the events below pass through earlier steps)
        covering = -(-stop // block_size)
        new_table_lens.append(covering if covering > table_len else table_len)
        if caching and stop % block_size == 0:
            at_end.append(i)
        # step j writes position start + j - 1; it appends a block when that position opens one past the table
        first = -(-start // block_size)
        if first < table_len:
            first = table_len
        first *= block_size
        num_events = len(events)
        if first < stop:
            for position in range(first, stop, block_size):
                append_event((position - start + 1, 0, i))
        if caching:  # a block fills (and is registered) after step j when start + j is a multiple of block_size
            first_end = -(-(start + 1) // block_size) * block_size
            if lagging is None and num_cached.get(request.req_id, 0) < start // block_size:
                # lagging registrations (none, after a step): the plain step's registration after step 1 catches up
                if k == 1:
                    at_end.append(i)
                elif first_end != start + 1:
                    append_event((1, 1, i))
            if first_end < stop:
                for end in range(first_end, stop, block_size):
                    append_event((end - start, 1, i))
        if len(events) != num_events:
            stepped.append(i)
        request.output_token_ids.extend(tokens)  # append_output_token_ids, inlined
        request._all_token_ids.extend(tokens)
    if caching and lagging:  # as in the loop above, for the rows planned lagging
        for i in lagging:
            start = run.starts[i]
            if k == 1:
                at_end.append(i)
            elif -(-(start + 1) // block_size) * block_size != start + 1:
                append_event((1, 1, i))
                stepped.append(i)
    events.sort()
    try_allocate_slots = manager.try_allocate_slots
    cache_computed_blocks = manager.cache_computed_blocks
    for step, phase, i in events:
        request = requests[i]
        if phase == 0:
            request.num_computed_tokens = run.starts[i] + step - 1
            if try_allocate_slots(request, 1) != []:  # a fresh private block: no copy, never None (planned)
                raise RuntimeError(f"{request.req_id}: the decode run's block allocation did not go as planned")
        else:
            request.num_computed_tokens = run.starts[i] + step
            cache_computed_blocks(request)
    starts = run.starts
    for i in stepped:
        requests[i].num_computed_tokens = starts[i] + k
    # the last step's update, in running order, of the rows it changes anything for: those that fill a block then
    # (or catch up lagging registrations: k == 1), and those that may finish (before step ``max_steps`` nobody
    # does: plan_decode_run's limit; in it, only its ``stop_rows`` can: _check_stop is False for the others)
    may_finish = k == run.max_steps
    stop_rows = (run.stop_rows if run.stop_rows is not None else range(len(requests))) if may_finish else ()
    registering = set(at_end)
    check_stop = scheduler._check_stop
    finished: set[int] = set()
    for i in sorted(registering.union(stop_rows)):
        request = requests[i]
        if i in registering:
            cache_computed_blocks(request)
        if may_finish and check_stop(request, token_id):
            running.remove(request)
            scheduler._release_finished(request)
            finished.add(i)
    scheduler._next_step_id += k
    scheduler._counters.num_generation_tokens_total += k * len(requests)
    starts_after = [start + k for start in starts]
    lefts_after = None if run.lefts is None else [left - k for left in run.lefts]
    if finished:
        keep = [i for i in range(len(requests)) if i not in finished]
        scheduler._rows_after = rows_after(
            scheduler,
            token_id,
            [requests[i] for i in keep],
            [starts_after[i] for i in keep],
            [new_table_lens[i] for i in keep],
            None if lefts_after is None else [lefts_after[i] for i in keep],
        )
    else:
        on = list(requests)
        scheduler._rows_after = rows_after(scheduler, token_id, on, starts_after, new_table_lens, lefts_after)
    if finished_only:
        return [(requests[i], tokens, True) for i in sorted(finished)]
    # one token list for all: the caller copies what it keeps
    return [(request, tokens, i in finished) for i, request in enumerate(requests)]


def rows_after(
    scheduler: Any,
    token_id: int,
    requests: list[Request],
    starts: list[int],
    table_lens: list[int],
    lefts: list[int] | None,
) -> DecodeRun | None:
    """The leading decode rows of the next step, planned ahead by a decode run or a mixed step just applied (the
    rows it stepped that go on, in running order; their num_computed_tokens, device blocks and length limits
    after it): each is still a pure decode row (one token left, the block it writes next its own: nothing
    registers a block before it is full, so nothing can share it), so ``mixed_step.plan_decode_rows`` takes them
    as they are, up to the token budget, and reads only the rows after them. Made at the cost of the pass that
    applied the step; valid while the scheduler is where that step left it (``step_id``). None: no rows, or
    their length limits are unknown."""
    if not requests or lefts is None:
        return None
    budget = scheduler.scheduler_config.max_num_batched_tokens
    if len(requests) > budget:
        requests, starts, table_lens, lefts = requests[:budget], starts[:budget], table_lens[:budget], lefts[:budget]
    block_size = scheduler.kv_cache_manager.block_size
    opening = [i for i, (start, n) in enumerate(zip(starts, table_lens)) if start == n * block_size]
    stop_rows = [i for i, left in enumerate(lefts) if left <= 1]  # a stop token would have ended it already
    return DecodeRun(
        requests,
        token_id,
        1,
        sum(starts),
        starts,
        table_lens,
        stop_rows,
        opening,
        lefts=lefts,
        lagging=[],  # the step that planned them registered every block they filled
        step_id=scheduler._next_step_id,
    )


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
