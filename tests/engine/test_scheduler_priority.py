"""Priority inside one engine (engine/scheduler.py, "Priorities"): a higher-priority waiting request swaps a
lower-priority running one out — never kills it — and the swapped request later finishes with exactly the
output it would have had alone (the PagedKVRunner reads every token back through the block tables)."""

from __future__ import annotations

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from engine.request import FinishReason, RequestStatus
from engine.scheduler_stats import SchedulerEventKind

VIP, STANDARD, BATCH = 2, 1, 0


def _with_priority(request, priority: int):
    request.priority = priority
    return request


def _step(scheduler, runner):
    output = scheduler.schedule()
    scheduler.update_from_output(output, runner.execute(output))
    return output


def test_vip_swaps_out_a_batch_request_when_the_kv_cache_is_full(make_scheduler, make_request, kv_runner_cls, run):
    # 8 blocks of 4 tokens: two batch requests of 12 prompt tokens hold 6 blocks and grow into the rest
    scheduler = make_scheduler(num_device_blocks=8, num_host_blocks=32, max_num_batched_tokens=64)
    runner = kv_runner_cls.for_scheduler(scheduler)
    for i in range(2):
        scheduler.add_request(_with_priority(make_request(f"b{i}", prompt=12, max_tokens=8), BATCH))
    for _ in range(3):
        _step(scheduler, runner)
    assert all(scheduler.get_request(f"b{i}").status is RequestStatus.RUNNING for i in range(2))
    scheduler.take_events()

    scheduler.add_request(_with_priority(make_request("vip", prompt=12, max_tokens=4, arrival_time_s=1.0), VIP))
    output = _step(scheduler, runner)

    assert "vip" in [r.req_id for r in output.requests]  # admitted in the very step it outranked them
    assert output.blocks_to_swap_out  # by swapping, never recomputing or aborting
    preempted = [e for e in scheduler.take_events() if e.kind is SchedulerEventKind.PREEMPTED]
    assert [e.req_id for e in preempted] == ["b1"]  # the most recent of the lowest priority
    assert preempted[0].details["mode"] == "swap"
    assert scheduler.get_request("b1").status is RequestStatus.SWAPPED

    result = run(scheduler, runner)
    assert result.finish_reasons == {"vip": FinishReason.LENGTH, "b0": FinishReason.LENGTH, "b1": FinishReason.LENGTH}


def test_vip_takes_a_seat_from_a_batch_request_at_max_num_seqs(make_scheduler, make_request, kv_runner_cls):
    scheduler = make_scheduler(num_device_blocks=64, max_num_seqs=2)
    runner = kv_runner_cls.for_scheduler(scheduler)
    for i in range(2):
        scheduler.add_request(_with_priority(make_request(f"b{i}", prompt=4, max_tokens=20), BATCH))
    _step(scheduler, runner)
    scheduler.add_request(_with_priority(make_request("s", prompt=4, max_tokens=4, arrival_time_s=1.0), STANDARD))
    output = _step(scheduler, runner)
    assert {r.req_id for r in output.requests} == {"b0", "s"}
    assert scheduler.get_request("b1").status is RequestStatus.SWAPPED


def test_equal_priorities_never_preempt_for_a_newcomer(make_scheduler, make_request, kv_runner_cls):
    scheduler = make_scheduler(num_device_blocks=64, max_num_seqs=2)
    runner = kv_runner_cls.for_scheduler(scheduler)
    for i in range(2):
        scheduler.add_request(_with_priority(make_request(f"v{i}", prompt=4, max_tokens=20), VIP))
    _step(scheduler, runner)
    scheduler.add_request(_with_priority(make_request("v2", prompt=4, max_tokens=4, arrival_time_s=1.0), VIP))
    output = _step(scheduler, runner)
    assert {r.req_id for r in output.requests} == {"v0", "v1"}
    assert scheduler.get_request("v2").status is RequestStatus.WAITING
    assert scheduler.make_stats().num_preemptions_total == 0


def test_waiting_queue_is_fcfs_within_a_priority(make_scheduler, make_request, kv_runner_cls):
    scheduler = make_scheduler(num_device_blocks=64, max_num_seqs=1)
    runner = kv_runner_cls.for_scheduler(scheduler)
    order = [("b0", BATCH), ("v0", VIP), ("b1", BATCH), ("v1", VIP), ("s0", STANDARD)]
    for t, (req_id, priority) in enumerate(order):
        scheduler.add_request(_with_priority(make_request(req_id, prompt=4, max_tokens=1, arrival_time_s=t), priority))
    started = []
    while scheduler.has_unfinished_requests():
        started += [r.req_id for r in _step(scheduler, runner).requests if r.req_id not in started]
    assert started == ["v0", "v1", "s0", "b0", "b1"]


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(1, 14), st.integers(1, 12), st.integers(0, 2), st.integers(0, 6)),
        min_size=2,
        max_size=9,
    ),
    st.integers(6, 12),
)
def test_priority_never_changes_an_output_and_victims_rank_lowest(
    make_scheduler, make_request, kv_runner_cls, run, specs, num_device_blocks
):
    """Random prompts, lengths, priorities and arrival steps on a small cache: every request finishes with
    the output it has alone on a huge cache (swapped, never killed), and in every step each preempted
    request ranks no higher than any request the step schedules."""
    # a request longer than the whole small cache is capped at its capacity (finished early, by design): only
    # requests that fit alone are compared with the huge cache's outputs (block_size 4; the last token needs no KV)
    assume(all(p + m - 1 <= num_device_blocks * 4 for p, m, _, _ in specs))

    def requests():
        return [
            _with_priority(make_request(f"r{i}", prompt=p, max_tokens=m, arrival_time_s=float(t)), prio)
            for i, (p, m, prio, t) in enumerate(specs)
        ]

    reference = make_scheduler(num_device_blocks=1024, num_host_blocks=0, max_num_batched_tokens=1024)
    for request in requests():
        reference.add_request(request)
    expected = run(reference, kv_runner_cls.for_scheduler(reference)).outputs

    scheduler = make_scheduler(num_device_blocks=num_device_blocks, num_host_blocks=256, max_num_batched_tokens=16)
    pending = sorted(requests(), key=lambda r: r.arrival_time_s)
    step = [0]

    def arrive(s):
        while pending and pending[0].arrival_time_s <= step[0]:
            s.add_request(pending.pop(0))
        step[0] += 1

    def check(s, output):
        victims = [s.get_request(e.req_id) for e in s.take_events() if e.kind is SchedulerEventKind.PREEMPTED]
        scheduled = [s.get_request(r.req_id) for r in output.requests]
        for victim in victims:
            assert all(victim.priority <= r.priority for r in scheduled if r is not victim)

    result = run(
        scheduler,
        kv_runner_cls.for_scheduler(scheduler),
        before_step=arrive,
        check=check,
        more_coming=lambda: bool(pending),
    )
    assert result.outputs == expected
    assert set(result.finish_reasons.values()) == {FinishReason.LENGTH}
    assert scheduler.make_stats().num_recomputed_tokens_total == 0
