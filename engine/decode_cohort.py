"""The leading pure decode rows of a running set, held lazily across steps (the fleet simulator's fast paths).

A *pure decode row* (engine/multi_step.py, engine/mixed_step.py) computes one token per step, samples the runner's
fixed token, and writes into a block of its own. Its state after step ``s`` (the scheduler's step ids) is a
function of ``s`` alone::

    num_computed_tokens = origin + s + 1         origin = its num_computed_tokens when it joined, less that step
    output / all tokens  = as at joining, plus one ``token_id`` per step since
    device blocks        = as at joining, plus one fresh block each time it writes the first position of one

so nothing needs doing for it in a step unless one of its *events* falls there:

    opening  before step s    its position origin + s is the first of a block past its table: allocate one
    filling  after step s     origin + s + 1 fills a block: register it in the prefix cache
    catch-up after its first  its prefix-cache registrations lagged when it joined: register them
    stop     after step s     a length limit (or a stop token) ends it there: stop check, blocks freed

A ``DecodeCohort`` keeps these rows (a prefix of the scheduler's running list, in its order) with their events
bucketed by step, and applies a step (a mixed step's leading rows) or a run of steps (a decode run) in
O(events) instead of O(rows x steps): the allocations of a step in running order, then its registrations and
finishes in running order, exactly as the plain step's ``_schedule_running`` and ``update_from_output`` order
them. A row's own fields (its tokens, ``num_computed_tokens``, and its metrics' token count and last token time)
are brought up to date (*synced*) when something reads them: an event of its own, its finish, or the
scheduler's ``sync_decode_rows`` (every reader outside these fast paths: ``running_requests``, ``get_request``,
aborts, a plain step, which also ends the cohort).
"""

from __future__ import annotations

import heapq
from operator import is_not
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from engine.request import Request


class CohortRow:
    """One pure decode row of a cohort (module docstring)."""

    __slots__ = (
        "alive", "base", "fill_step", "msynced", "open_step", "origin", "rank", "request", "synced", "table_len",
    )  # fmt: skip

    def __init__(self, request: Request, origin: int, step: int, table_len: int, rank: int) -> None:
        self.request = request
        self.origin = origin  # num_computed_tokens before step s is origin + s
        self.base = origin + step + 1  # its tokens when it joined: every position from here on holds the fixed token
        self.synced = step  # the request's tokens and num_computed_tokens are as before this step
        self.msynced = step  # its metrics count the tokens of the steps before this one
        self.table_len = table_len  # device blocks it holds
        self.rank = rank  # running order (ascending)
        self.open_step = -1  # the step before which it next appends a block
        self.fill_step = -1  # the step after which it next fills a block
        self.alive = True


def _rank(row: CohortRow) -> int:
    return row.rank


class DecodeCohort:
    """The leading pure decode rows of a scheduler's running set (module docstring), valid while the scheduler's
    step id is ``step`` (the next step to run) and its running list begins with ``requests``."""

    def __init__(self, token_id: int, block_size: int, step: int, last_end_s: float) -> None:
        self.token_id = token_id
        self.block_size = block_size
        self.step = step
        self.last_end_s = last_end_s  # when the last step applied to the rows ended (their last token's time)
        self.rows: list[CohortRow] = []
        self.requests: list[Request] = []  # the rows' requests, in the same order
        self.rows_by_id: dict[str, CohortRow] = {}
        self.origin_sum = 0
        self._next_rank = 0
        self.opening: dict[int, list[CohortRow]] = {}
        self.filling: dict[int, list[CohortRow]] = {}
        self.stops: list[tuple[int, int, CohortRow]] = []  # heap of (stop step, rank, row)
        self.catch_up: list[CohortRow] = []  # rows to register after step ``self.step`` (joined lagging)

    def __len__(self) -> int:
        return len(self.rows)

    @property
    def kv_read(self) -> int:
        """Context tokens the next step reads over the rows (the sum of their num_computed_tokens)."""
        return self.origin_sum + len(self.rows) * self.step

    def join(self, request: Request, start: int, table_len: int, left: int, lagging: bool) -> None:
        """Take ``request`` (the running row after the cohort's last; ``start`` computed tokens, ``table_len``
        device blocks, ending by a limit or a stop token in its ``left``-th step from now) at the current step."""
        step, block_size = self.step, self.block_size
        row = CohortRow(request, start - step, step, table_len, self._next_rank)
        self._next_rank += 1
        row.open_step = table_len * block_size - row.origin
        row.fill_step = step + (-(start + 1)) % block_size
        self.opening.setdefault(row.open_step, []).append(row)
        self.filling.setdefault(row.fill_step, []).append(row)
        heapq.heappush(self.stops, (step + left - 1, row.rank, row))
        if lagging:
            self.catch_up.append(row)
        self.rows.append(row)
        self.requests.append(request)
        self.rows_by_id[request.req_id] = row
        self.origin_sum += row.origin

    def first_stop_step(self) -> int | None:
        """The earliest step in which a row may finish (None: no rows)."""
        stops = self.stops
        while stops and not stops[0][2].alive:
            heapq.heappop(stops)
        return stops[0][0] if stops else None

    def num_opening(self, step: int) -> int:
        return len(self.opening.get(step, ()))

    def blocks_needed(self, num_steps: int) -> int:
        """Fresh blocks the rows append over the next ``num_steps`` steps."""
        step, block_size, opening = self.step, self.block_size, self.opening
        total = 0
        for j in range(min(num_steps, block_size)):
            rows = opening.get(step + j)
            if rows:
                total += len(rows) * (1 + (num_steps - 1 - j) // block_size)
        return total

    # -- bringing a row's fields up to date -----------------------------------------------------

    def sync_tokens(self, row: CohortRow, step: int) -> None:
        """The row's tokens and num_computed_tokens as before ``step``."""
        request = row.request
        n = step - row.synced
        if n > 0:
            tokens = [self.token_id] * n
            request.output_token_ids.extend(tokens)
            request._all_token_ids.extend(tokens)
            row.synced = step
        request.num_computed_tokens = row.origin + step

    def sync_metrics(self, row: CohortRow, step: int) -> None:
        """The row's metrics as after the steps before ``step`` (each the time of the last applied step)."""
        n = step - row.msynced
        if n > 0:
            metrics = row.request.metrics
            if metrics is not None:
                metrics.num_output_tokens += n
                metrics.last_token_time_s = self.last_end_s
            row.msynced = step

    def sync_all(self) -> None:
        """Every row's fields as of now (the cohort stays)."""
        step = self.step
        for row in self.rows:
            self.sync_tokens(row, step)
            self.sync_metrics(row, step)

    def leave(self, row: CohortRow) -> None:
        """Take the row out (it finished or is aborted; its fields are synced by the caller)."""
        row.alive = False
        self.rows.remove(row)
        self.requests.remove(row.request)
        del self.rows_by_id[row.request.req_id]
        self.origin_sum -= row.origin
        for buckets, key in ((self.opening, row.open_step), (self.filling, row.fill_step)):
            bucket = buckets.get(key)
            if bucket is not None:
                bucket.remove(row)
                if not bucket:
                    del buckets[key]
        if row in self.catch_up:
            self.catch_up.remove(row)

    # -- applying steps ---------------------------------------------------------------------------

    def allocate(self, scheduler: Any, step: int) -> None:
        """Before ``step``: a fresh block for each row that opens one, in running order."""
        rows = self.opening.pop(step, None)
        if not rows:
            return
        if len(rows) > 1:
            rows.sort(key=_rank)
        # one pool call for the step: each row's next token lands past its table, a fresh private block each (what
        # try_allocate_slots does for each in turn, which reads nothing else of the row: its tokens stay lazy); the
        # plans checked they fit (else NoFreeBlocksError, nothing changed)
        scheduler.kv_cache_manager.append_fresh_blocks([row.request.req_id for row in rows])
        opening, block_size = self.opening, self.block_size
        for row in rows:
            row.table_len += 1
            row.open_step += block_size
            opening.setdefault(row.open_step, []).append(row)

    def after_step(self, scheduler: Any, step: int, stopping: bool, first_step: int) -> list[Request]:
        """After ``step``: registrations and (``stopping``: the last step of what is applied, where rows may
        finish) finishes, in running order; the requests that finished (their tokens synced to the end of
        ``step``, their metrics to ``first_step``, the first step applied: the caller reports the rest)."""
        registering = self.filling.pop(step, None) or []
        catching_up = self.catch_up if self.catch_up and step == first_step else None
        stopping_rows: list[CohortRow] = []
        if stopping:
            stops = self.stops
            while stops and (stops[0][0] <= step or not stops[0][2].alive):
                stop_step, _, row = heapq.heappop(stops)
                if row.alive:
                    if stop_step < step:
                        raise RuntimeError(f"{row.request.req_id}: a decode row was left past its last step")
                    stopping_rows.append(row)
        if not registering and not catching_up and not stopping_rows:
            return []
        if catching_up is not None:
            self.catch_up = []
        rows = registering + (catching_up or []) + stopping_rows
        if len(rows) > 1:
            rows = sorted(set(rows), key=_rank)
        fills = set(map(id, registering))
        catches = set(map(id, catching_up or ()))
        stops_here = set(map(id, stopping_rows))
        manager = scheduler.kv_cache_manager
        cache_computed_blocks, cache_repeated_block = manager.cache_computed_blocks, manager.cache_repeated_block
        check_stop = scheduler._check_stop
        token_id, block_size, filling = self.token_id, self.block_size, self.filling
        finished: list[Request] = []
        for row in rows:
            key = id(row)
            request = row.request
            if key in fills or key in catches:
                # before a finish frees them; a block of the fixed token alone is named without syncing the row
                block = (row.origin + step + 1) // block_size - 1  # the block that filled (fills: its only one)
                if (
                    key in catches
                    or block * block_size < row.base
                    or not cache_repeated_block(request, block, token_id)
                ):
                    self.sync_tokens(row, step + 1)
                    cache_computed_blocks(request)
                if key in fills:
                    row.fill_step += block_size
                    filling.setdefault(row.fill_step, []).append(row)
            if key in stops_here:
                self.sync_metrics(row, first_step)
                self.sync_tokens(row, step + 1)
                if check_stop(request, token_id):
                    row.msynced = step + 1  # the caller's update carries the tokens of the steps applied
                    scheduler._running.remove(request)
                    scheduler._release_finished(request)
                    self.leave(row)
                    finished.append(request)
                else:  # not at a limit after all (never, by the plan): its next possible stop, anew
                    heapq.heappush(self.stops, (step + steps_left(scheduler, request, token_id), row.rank, row))
        return finished


def steps_left(scheduler: Any, request: Request, token_id: int) -> int:
    """The step (1: the next) in which a decode row sampling ``token_id`` ends: the first, where that is a stop
    token for it, else where a length limit of ``_check_stop`` does (output count, context, device capacity)."""
    params = request.sampling_params
    if (token_id == request.eos_token_id and not params.ignore_eos) or token_id in params.stop_token_ids:
        return 1
    num_tokens = len(request._all_token_ids)
    left = params.max_tokens - len(request.output_token_ids)
    left = min(
        left, scheduler.scheduler_config.max_model_len - num_tokens, scheduler._max_device_tokens + 1 - num_tokens
    )
    return max(left, 1)


def current_cohort(scheduler: Any, token_id: int) -> DecodeCohort:
    """The scheduler's cohort where it still leads the running set at this step (else its rows are synced and
    it is replaced by an empty one)."""
    cohort = scheduler._cohort
    step = scheduler._next_step_id
    if cohort is not None:
        running = scheduler._running
        requests = cohort.requests
        if (
            cohort.step == step
            and cohort.token_id == token_id
            and len(requests) <= len(running)
            and not any(map(is_not, running, requests))
        ):
            return cohort
        scheduler.sync_decode_rows(drop=True)
    cohort = DecodeCohort(token_id, scheduler.kv_cache_manager.block_size, step, scheduler._clock.now())
    scheduler._cohort = cohort
    return cohort


def sync_cohort(scheduler: Any, drop: bool) -> None:
    """``Scheduler.sync_decode_rows``: every row of the cohort up to date; drop: and the cohort ended."""
    cohort = scheduler._cohort
    if cohort is not None:
        cohort.sync_all()
        if drop:
            scheduler._cohort = None


def sync_cohort_row(scheduler: Any, req_id: str, leave: bool = False) -> None:
    """``Scheduler.sync_request``: the request up to date if the cohort holds it; leave: and out of it (an
    abort: its blocks are freed by the caller)."""
    cohort = scheduler._cohort
    if cohort is not None:
        row = cohort.rows_by_id.get(req_id)
        if row is not None:
            cohort.sync_tokens(row, cohort.step)
            cohort.sync_metrics(row, cohort.step)
            if leave:
                cohort.leave(row)
