"""Mixed steps (engine/mixed_step.py): a step whose leading pure decode rows are taken in bulk leaves the engine
exactly as the plain step does — tokens, counters, block tables, free lists, prefix cache, step records, metrics,
step times, finishes — whatever the rest of the step does (admissions, prompt chunks, preemption, prefix hits)."""

from __future__ import annotations

from engine.request import FinishReason
from engine.sampling_params import SamplingParams
from tests.engine.test_multi_step import _engine, _state

PARAMS = SamplingParams(max_tokens=200, ignore_eos=True)


def _pair(**engine_kwargs):
    """Twin engines: the first takes decode rows in bulk, the second steps plainly."""
    pair = [_engine(**engine_kwargs) for _ in range(2)]
    pair[0][0].bulk_decode_rows = True
    return pair


def _add(pair, req_id, prompt, params=PARAMS):
    for engine, _ in pair:
        engine.add_request(prompt, params, req_id=req_id)


def _step(pair) -> bool:
    """One step on both; asserts the same state and the same outputs (the bulk one gives none for a decode row
    that did not finish: its tokens are counted in the state); whether the bulk engine took a mixed step."""
    (fast, fast_clock), (plain, plain_clock) = pair
    fast_pending, plain_pending = fast.start_step(), plain.start_step()
    if plain_pending is None:  # nothing left to run
        assert fast_pending is None
        return False
    assert fast_pending.step_time_s == plain_pending.step_time_s  # priced bit for bit
    fast_clock.now_s += fast_pending.step_time_s
    plain_clock.now_s += plain_pending.step_time_s
    fast_out, plain_out = fast.finish_step(fast_pending), plain.finish_step(plain_pending)
    rows = {r.req_id for r in fast_pending.decode.requests} if fast_pending.decode is not None else set()
    expected = [o for o in plain_out if o.finished or o.req_id not in rows]
    key = [(o.req_id, o.new_token_ids, o.num_output_tokens, o.finished, o.finish_reason) for o in fast_out]
    assert key == [(o.req_id, o.new_token_ids, o.num_output_tokens, o.finished, o.finish_reason) for o in expected]
    assert _state(fast) == _state(plain)
    return fast_pending.decode is not None


def _prompt(i: int, n: int) -> list[int]:
    return [10 + (i * 7 + j) % 500 for j in range(n)]


def test_admissions_between_decode_rows_match_plain_steps():
    pair = _pair()
    for i, n in enumerate([5, 16, 31, 40]):
        _add(pair, f"r{i}", _prompt(i, n))
    mixed = 0
    for step in range(60):
        if step % 7 == 3:  # a newcomer now and then: its prompt rides with the others' decode rows
            _add(pair, f"n{step}", _prompt(step, 20 + step))
        mixed += _step(pair)
    assert mixed > 30


def test_finishes_in_the_decode_rows_match_plain_steps():
    pair = _pair()
    for i, n in enumerate([3, 9, 14, 20, 2]):
        _add(pair, f"r{i}", _prompt(i, 17 + i), SamplingParams(max_tokens=n, ignore_eos=True))
    for step in range(25):
        if step in (2, 5):
            _add(pair, f"n{step}", _prompt(step, 30), SamplingParams(max_tokens=4, ignore_eos=True))
        _step(pair)
    assert not pair[0][0].has_unfinished_requests()


def test_chunked_prompts_behind_decode_rows_match_plain_steps():
    pair = _pair(max_num_batched_tokens=24)  # a 100-token prompt goes in chunks next to the decode rows
    for i in range(3):
        _add(pair, f"r{i}", _prompt(i, 10))
    for step in range(40):
        if step % 10 == 4:
            _add(pair, f"long{step}", _prompt(step, 100))
        _step(pair)


def test_preemption_and_prefix_hits_behind_decode_rows_match_plain_steps():
    pair = _pair(num_blocks=24)
    shared = _prompt(0, 48)
    for i in range(4):
        _add(pair, f"r{i}", shared + _prompt(i + 1, 5))  # the first three blocks shared through the prefix cache
    for step in range(120):
        if step % 9 == 0:
            _add(pair, f"n{step}", shared + _prompt(step, 30))
        _step(pair)
    assert pair[0][0].make_stats().num_preemptions_total > 0
    assert pair[0][0].make_stats().prefix_cache_hits_total > 0


def test_no_bulk_rows_without_a_runner_that_prices_them_or_with_text():
    engine, clock = _engine(detokenize=True)
    engine.bulk_decode_rows = True
    engine.add_request(_prompt(0, 20), PARAMS, req_id="a")
    for _ in range(3):
        pending = engine.start_step()
        assert pending.decode is None  # text is read token by token
        clock.now_s += pending.step_time_s
        engine.finish_step(pending)


def _fields(run):
    return ([r.req_id for r in run.requests], run.token_id, run.max_steps, run.kv_read, run.first_step)


def _rows(cohort):
    """Each row of the cohort as of its step: what a fresh join gives it (engine/decode_cohort.py)."""
    if cohort is None:
        return []
    stops = {id(row): step for step, _, row in cohort.stops if row.alive}
    return [
        (row.request.req_id, row.origin + cohort.step, row.table_len, row.open_step, row.fill_step, stops[id(row)])
        for row in cohort.rows
    ]


def _check_rows_ahead(engine) -> tuple[bool, bool]:
    """The rows the scheduler holds lazily from the last decode run or mixed step, read on by a mixed step's plan
    and by a decode run's: the same rows, events and plans as a fresh cohort reading every row finds (which stays
    in place); whether there were any, and whether a run could be planned on them."""
    scheduler = engine.scheduler
    if scheduler._cohort is None or not len(scheduler._cohort):
        return False, False
    token_id = engine.runner.decode_token_id
    found = []
    for fresh in (False, True):
        if fresh:
            scheduler.sync_decode_rows(drop=True)
        run = scheduler.plan_decode_run(token_id, 1024)
        rows = scheduler.plan_decode_rows(token_id)
        cohort = scheduler._cohort
        catch_up = [] if cohort is None else [r.request.req_id for r in cohort.catch_up]
        found.append(
            (None if run is None else _fields(run), None if rows is None else _fields(rows), _rows(cohort), catch_up)
        )
    assert found[0] == found[1]
    return found[0][1] is not None, found[0][0] is not None


def test_rows_planned_ahead_are_the_rows_a_fresh_plan_finds():
    """A decode run (cut short by an arrival, the simulator's common case, or ended by a finish) and a mixed step
    leave their rows to the next step, held lazily (engine/decode_cohort.py): the same rows, stops and block
    events a fresh cohort finds reading every row, and the steps taken with them leave the engine as plain steps
    do."""
    from tests.engine.test_multi_step import _plain_step, _twins

    prompts = [_prompt(i, n) for i, n in enumerate([5, 16, 31, 40, 47, 12])]
    max_tokens = [200, 7, 200, 9, 8, 60]  # some stop right after the cut, by their output count
    num_cuts = num_checked = num_runs_planned = 0
    for num_steps in (1, 2, 3, 4, 5, 6, None):
        pair = _twins(prompts, max_tokens)
        (fast, fast_clock), (plain, plain_clock) = pair
        fast.bulk_decode_rows = True
        plan = fast.plan_decode_steps(fast_clock.now(), float("inf"))
        if num_steps is not None:
            if num_steps >= plan.num_steps:
                continue
            num_cuts += 1
            plan.truncate(num_steps)
        fast_clock.now_s = plan.end_s
        fast.finish_decode_steps(plan, finished_only=True)
        for _ in range(plan.num_steps):
            _plain_step(plain, plain_clock)
        assert _check_rows_ahead(fast)[0]
        _add(pair, f"new{num_steps}", _prompt(99, 40))  # the arrival: its prompt rides with the rows
        for step in range(300):
            if step % 3 == 0:  # (between the checks the rows stay lazy over several steps)
                checked, run_planned = _check_rows_ahead(fast)
                num_checked += checked
                num_runs_planned += run_planned
            if step % 11 == 5:
                _add(pair, f"more{num_steps}-{step}", _prompt(step, 20 + step % 30))
            if not _step(pair) and not plain.has_unfinished_requests():
                break
        assert _state(fast) == _state(plain)
    assert num_cuts >= 4 and num_checked > 30 and num_runs_planned > 3


def test_an_aborted_row_leaves_the_rows_held_and_keeps_its_tokens():
    pair = _pair()
    for i, n in enumerate([20, 33]):
        _add(pair, f"r{i}", _prompt(i, n))
    (fast, clock), _ = pair
    while (plan := fast.plan_decode_steps(clock.now(), float("inf"))) is None:
        _step(pair)
    plan.truncate(2)
    before = fast.scheduler.get_request("r0").num_output_tokens
    clock.now_s = plan.end_s
    fast.finish_decode_steps(plan, finished_only=True)
    cohort = fast.scheduler._cohort
    assert [r.req_id for r in cohort.requests] == ["r0", "r1"] and cohort.step == fast.scheduler._next_step_id
    fast.scheduler.finish_requests(["r0"], FinishReason.ABORT)  # the running set changed
    assert [r.req_id for r in cohort.requests] == ["r1"] and "r0" not in cohort.rows_by_id
    fresh = fast.scheduler.plan_decode_rows(plan.run.token_id)
    assert [r.req_id for r in fresh.requests] == ["r1"]
    r0 = fast.scheduler.get_request("r0")  # its tokens up to the abort: the run's two steps
    assert r0.num_output_tokens == before + 2 and r0.is_finished


def _lag(pair, req_id):
    """Make ``req_id``'s prefix-cache registrations lag behind its computed blocks on both engines (as if a step
    had not registered them): the next step registers them, plain or bulk."""
    for engine, _ in pair:
        kv = engine.scheduler.kv_cache_manager
        assert kv._num_cached_blocks.get(req_id, 0) >= 2
        kv._num_cached_blocks[req_id] = 0
        engine.scheduler.sync_decode_rows(drop=True)  # the rows joined before the lag was made


def test_lagging_registrations_are_caught_up_as_plain_steps_do():
    from tests.engine.test_multi_step import _compare_run, _twins

    prompts = [_prompt(i, n) for i, n in enumerate([40, 47, 35])]
    pair = _twins(prompts, [200] * 3)
    # (each lagging row fills no block in the step that catches it up: only the catching up registers)
    (fast, _), (plain, _) = pair

    def registered():
        return [engine.scheduler.kv_cache_manager._num_cached_blocks for engine in (fast, plain)]

    _lag(pair, "r0")  # at 40 computed tokens
    _compare_run(pair, num_steps=7)  # a decode run: registered after its first step
    assert registered() == [{"r0": 2, "r1": 3, "r2": 2}] * 2
    _lag(pair, "r2")  # at 42
    _compare_run(pair, num_steps=1)  # a one-step run: registered at its end
    assert registered() == [{"r0": 3, "r1": 3, "r2": 2}] * 2
    fast.bulk_decode_rows = True
    _lag(pair, "r1")  # at 55
    _add(pair, "new", _prompt(9, 30))
    assert _step(pair)  # a mixed step: registered with the row's token
    assert registered()[0]["r1"] == registered()[1]["r1"] == 3
