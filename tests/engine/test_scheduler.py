from __future__ import annotations

import pytest

from engine.batch import RunnerOutput, TokenLogprob
from engine.clock import ManualClock
from engine.request import FinishReason, RequestStatus
from engine.scheduler_stats import SchedulerEventKind


def _step(scheduler, runner):
    scheduler_output = scheduler.schedule()
    return scheduler_output, scheduler.update_from_output(scheduler_output, runner.execute(scheduler_output))


# -- admission -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "match"),
    [([], "empty"), (list(range(256)), "max_model_len"), (list(range(200)), "KV blocks")],
)
def test_add_request_rejects_requests_that_can_never_run(make_scheduler, make_request, prompt, match):
    scheduler = make_scheduler(num_device_blocks=16, max_model_len=256)  # 64 token slots
    with pytest.raises(ValueError, match=match):
        scheduler.add_request(make_request("a", prompt))
    assert not scheduler.has_unfinished_requests()


def test_add_request_rejects_a_duplicate_id(make_scheduler, make_request):
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a"))
    with pytest.raises(ValueError, match="already in use"):
        scheduler.add_request(make_request("a"))


def test_first_step_prefills_whole_prompt_and_samples(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler()
    request = make_request("a", prompt=list(range(10, 16)), max_tokens=3)
    scheduler.add_request(request)
    scheduler_output, updates = _step(scheduler, constant_runner_cls(7))
    (scheduled,) = scheduler_output.requests
    assert scheduled.token_ids == list(range(10, 16)) and scheduled.start_pos == 0 and scheduled.sample
    assert len(scheduled.block_ids) == 2  # 6 tokens, block_size 4
    assert [u.new_token_ids for u in updates] == [[7]]
    assert request.num_computed_tokens == 6 and request.output_token_ids == [7]
    scheduler_output, _ = _step(scheduler, constant_runner_cls(8))
    (scheduled,) = scheduler_output.requests
    assert scheduled.token_ids == [7] and scheduled.start_pos == 6 and scheduled.is_decode


def test_token_budget_is_respected_and_chunked_prefill_splits_a_long_prompt(
    make_scheduler, make_request, constant_runner_cls
):
    scheduler = make_scheduler(max_num_batched_tokens=8)
    request = make_request("a", prompt=list(range(20)), max_tokens=2)
    scheduler.add_request(request)
    runner = constant_runner_cls()
    chunks = []
    while scheduler.has_unfinished_requests():
        scheduler_output, _ = _step(scheduler, runner)
        assert scheduler_output.num_batched_tokens <= 8
        chunks.append((scheduler_output.requests[0].start_pos, len(scheduler_output.requests[0].token_ids)))
        assert scheduler_output.requests[0].sample == (chunks[-1] == (16, 4) or chunks[-1][0] >= 20)
    assert chunks == [(0, 8), (8, 8), (16, 4), (20, 1)]
    assert request.output_token_ids == [7, 7]


def test_decodes_go_first_and_prefill_takes_the_remaining_budget(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler(max_num_batched_tokens=8)
    runner = constant_runner_cls()
    scheduler.add_request(make_request("a", prompt=4, max_tokens=10))
    _step(scheduler, runner)
    scheduler.add_request(make_request("b", prompt=12, max_tokens=10))
    scheduler_output, _ = _step(scheduler, runner)
    assert [(r.req_id, len(r.token_ids)) for r in scheduler_output.requests] == [("a", 1), ("b", 7)]


def test_without_chunked_prefill_a_prompt_waits_for_a_step_with_room(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler(max_num_batched_tokens=16, max_model_len=16, enable_chunked_prefill=False)
    runner = constant_runner_cls()
    scheduler.add_request(make_request("a1", prompt=4, max_tokens=3))
    scheduler.add_request(make_request("a2", prompt=4, max_tokens=3))
    _step(scheduler, runner)
    scheduler.add_request(make_request("b", prompt=15, max_tokens=1))
    scheduler_output, _ = _step(scheduler, runner)
    assert [r.req_id for r in scheduler_output.requests] == ["a1", "a2"]  # 2 + 15 > 16
    assert scheduler.get_request("b").status is RequestStatus.WAITING
    _step(scheduler, runner)  # a1, a2 finish
    scheduler_output, _ = _step(scheduler, runner)
    assert [(r.req_id, len(r.token_ids)) for r in scheduler_output.requests] == [("b", 15)]


def test_max_num_seqs_caps_running_requests(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler(max_num_seqs=2)
    for i in range(4):
        scheduler.add_request(make_request(f"r{i}", prompt=3, max_tokens=2))
    runner = constant_runner_cls()
    scheduler_output, _ = _step(scheduler, runner)
    assert [r.req_id for r in scheduler_output.requests] == ["r0", "r1"]
    assert scheduler.make_stats().num_running == 2 and scheduler.make_stats().num_waiting == 2
    scheduler_output, _ = _step(scheduler, runner)  # r0, r1 finish here
    assert [r.req_id for r in scheduler_output.requests] == ["r0", "r1"]
    scheduler_output, _ = _step(scheduler, runner)
    assert [r.req_id for r in scheduler_output.requests] == ["r2", "r3"]
    assert scheduler_output.finished_req_ids == ["r0", "r1"]


def test_admission_waits_for_free_blocks_fcfs(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler(num_device_blocks=4, enable_prefix_caching=False)
    runner = constant_runner_cls()
    scheduler.add_request(make_request("a", prompt=12, max_tokens=2))  # 3 blocks
    scheduler.add_request(make_request("b", prompt=8, max_tokens=1))  # 2 blocks: must wait
    scheduler.add_request(make_request("c", prompt=2, max_tokens=1))  # would fit, but no overtaking
    scheduler_output, _ = _step(scheduler, runner)
    assert [r.req_id for r in scheduler_output.requests] == ["a"]
    scheduler_output, _ = _step(scheduler, runner)  # a decodes its last token and finishes
    assert [r.req_id for r in scheduler_output.requests] == ["a"]
    scheduler_output, _ = _step(scheduler, runner)
    assert [r.req_id for r in scheduler_output.requests] == ["b", "c"]


# -- prefix cache ----------------------------------------------------------------------------------


def test_prefix_cache_hit_skips_prefill_of_cached_blocks(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler()
    runner = constant_runner_cls()
    shared = list(range(100, 112))  # 3 full blocks
    scheduler.add_request(make_request("a", prompt=[*shared, 1, 2], max_tokens=1))
    first, _ = _step(scheduler, runner)
    assert first.num_batched_tokens == 14
    scheduler.add_request(make_request("b", prompt=[*shared, 3, 4, 5], max_tokens=1))
    second, _ = _step(scheduler, runner)
    (scheduled,) = second.requests
    assert scheduled.start_pos == 12 and scheduled.token_ids == [3, 4, 5]
    assert scheduled.block_ids[:3] == first.requests[0].block_ids[:3]  # a's blocks, kept in the cache
    assert scheduler.get_request("b").num_cached_prompt_tokens == 12
    stats = scheduler.make_stats()
    assert stats.prefix_cache_queries_total == 14 + 15 and stats.prefix_cache_hits_total == 12
    assert stats.num_cached_prompt_tokens_total == 12  # vLLM's prompt_tokens_cached: b's 12, a's none


def test_prefix_hit_leaves_the_last_prompt_token_to_compute(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler()
    runner = constant_runner_cls()
    prompt = list(range(100, 108))  # exactly 2 blocks
    scheduler.add_request(make_request("a", prompt=prompt, max_tokens=1))
    _step(scheduler, runner)
    scheduler.add_request(make_request("b", prompt=prompt, max_tokens=1))
    scheduler_output, updates = _step(scheduler, runner)
    (scheduled,) = scheduler_output.requests
    assert scheduled.start_pos == 4 and scheduled.token_ids == prompt[4:] and scheduled.sample
    assert updates[0].new_token_ids == [7]


def test_prefix_cache_off_means_no_hits(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler(enable_prefix_caching=False)
    runner = constant_runner_cls()
    for req_id in ("a", "b"):
        scheduler.add_request(make_request(req_id, prompt=list(range(100, 112)), max_tokens=1))
        scheduler_output, _ = _step(scheduler, runner)
        assert scheduler_output.num_batched_tokens == 12


# -- finishing -------------------------------------------------------------------------------------


def test_stop_token_and_eos_finish_with_the_token_appended(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler()
    scheduler.add_request(make_request("eos", max_tokens=10, eos_token_id=7))
    scheduler.add_request(make_request("stop", max_tokens=10, stop_token_ids=[7]))
    scheduler.add_request(make_request("ignored", max_tokens=3, eos_token_id=7, ignore_eos=True))
    result = {}
    runner = constant_runner_cls(7)
    while scheduler.has_unfinished_requests():
        for u in _step(scheduler, runner)[1]:
            if u.finished:
                result[u.req_id] = (u.finish_reason, u.stop_reason, scheduler.get_request(u.req_id).output_token_ids)
    assert result == {
        "eos": (FinishReason.STOP, 7, [7]),
        "stop": (FinishReason.STOP, 7, [7]),
        "ignored": (FinishReason.LENGTH, None, [7, 7, 7]),
    }


def test_max_model_len_finishes_with_length(make_scheduler, make_request, constant_runner_cls, run):
    scheduler = make_scheduler(max_model_len=12)
    scheduler.add_request(make_request("a", prompt=10, max_tokens=100))
    result = run(scheduler, constant_runner_cls())
    assert result.outputs["a"] == [7, 7] and result.finish_reasons["a"] is FinishReason.LENGTH


def test_device_capacity_finishes_with_length_instead_of_livelock(make_scheduler, make_request, kv_runner_cls, run):
    scheduler = make_scheduler(num_device_blocks=3, max_model_len=256)  # 12 token slots
    scheduler.add_request(make_request("a", prompt=10, max_tokens=100))
    result = run(scheduler, kv_runner_cls.for_scheduler(scheduler))
    # 12 positions computed: the prompt and 2 outputs; the 3rd output would need a 13th slot
    assert len(result.outputs["a"]) == 3 and result.finish_reasons["a"] is FinishReason.LENGTH


def test_finished_ids_reach_the_runner_in_the_next_step_and_blocks_are_freed(
    make_scheduler, make_request, constant_runner_cls
):
    scheduler = make_scheduler(num_device_blocks=8)
    runner = constant_runner_cls()
    scheduler.add_request(make_request("a", prompt=6, max_tokens=1))
    _, updates = _step(scheduler, runner)
    assert updates[0].finished
    assert scheduler.make_stats().num_free_device_blocks == 8
    assert scheduler.get_request("a").status is RequestStatus.FINISHED_LENGTH  # until the next schedule()
    assert scheduler.schedule().finished_req_ids == ["a"]
    assert scheduler.get_request("a") is None
    assert scheduler.schedule().finished_req_ids == []


def test_abort_frees_blocks_in_every_state(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler(num_device_blocks=8, num_host_blocks=8)
    runner = constant_runner_cls()
    scheduler.add_request(make_request("running", prompt=6, max_tokens=10))
    _step(scheduler, runner)
    scheduler.add_request(make_request("waiting", prompt=6, max_tokens=10))
    assert scheduler.make_stats().num_free_device_blocks < 8
    scheduler.finish_requests(["running", "waiting", "unknown"], FinishReason.ABORT)
    stats = scheduler.make_stats()
    assert stats.num_free_device_blocks == 8 and stats.num_running == stats.num_waiting == 0
    assert scheduler.get_request("running").status is RequestStatus.FINISHED_ABORTED
    assert not scheduler.has_unfinished_requests()
    assert sorted(scheduler.schedule().finished_req_ids) == ["running", "waiting"]


def test_abort_between_schedule_and_update_drops_the_output(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler()
    runner = constant_runner_cls()
    scheduler.add_request(make_request("a", max_tokens=5))
    scheduler_output = scheduler.schedule()
    scheduler.finish_requests(["a"], FinishReason.ABORT)
    assert scheduler.update_from_output(scheduler_output, runner.execute(scheduler_output)) == []


def test_stop_string_finish_from_the_engine_keeps_the_reason(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", max_tokens=5))
    _step(scheduler, constant_runner_cls())
    scheduler.finish_requests(["a"], FinishReason.STOP, stop_reason="\n\n")
    request = scheduler.get_request("a")
    assert request.status is RequestStatus.FINISHED_STOPPED and request.stop_reason == "\n\n"
    scheduler.finish_requests(["a"], FinishReason.ABORT)  # already finished: ignored
    assert request.finish_reason is FinishReason.STOP


def test_runner_that_skips_a_sample_is_rejected(make_scheduler, make_request):
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a"))
    scheduler_output = scheduler.schedule()
    with pytest.raises(ValueError, match="sampled no token"):
        scheduler.update_from_output(scheduler_output, RunnerOutput())


def test_logprobs_travel_with_their_tokens(make_scheduler, make_request):
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", max_tokens=1, logprobs=0))
    scheduler_output = scheduler.schedule()
    logprob = TokenLogprob(5, -0.5)
    (update,) = scheduler.update_from_output(
        scheduler_output, RunnerOutput(sampled_token_ids={"a": [5]}, logprobs={"a": [logprob]})
    )
    assert update.new_logprobs == [logprob] and update.finished


# -- speculative decoding bookkeeping -----------------------------------------------------------------


def test_spec_tokens_are_scheduled_after_the_known_tokens_and_only_accepted_ones_count(make_scheduler, make_request):
    scheduler = make_scheduler()
    request = make_request("a", prompt=5, max_tokens=10)
    scheduler.add_request(request)
    scheduler_output = scheduler.schedule()
    scheduler.update_from_output(scheduler_output, RunnerOutput(sampled_token_ids={"a": [1]}))
    request.spec_token_ids = [2, 3, 4]
    scheduler_output = scheduler.schedule()
    (scheduled,) = scheduler_output.requests
    assert scheduled.token_ids == [1] and scheduled.spec_token_ids == [2, 3, 4] and scheduled.num_scheduled_tokens == 4
    assert len(scheduled.block_ids) * 4 >= 5 + 4
    # drafts 2, 3 accepted, 4 rejected; 9 is the bonus token
    (update,) = scheduler.update_from_output(scheduler_output, RunnerOutput(sampled_token_ids={"a": [2, 3, 9]}))
    assert update.new_token_ids == [2, 3, 9]
    assert request.output_token_ids == [1, 2, 3, 9]
    assert request.num_computed_tokens == 5 + 1 + 2 and request.num_tokens == 9
    assert request.spec_token_ids == []


def test_spec_tokens_past_max_tokens_are_cut(make_scheduler, make_request):
    scheduler = make_scheduler()
    request = make_request("a", prompt=5, max_tokens=3)
    scheduler.add_request(request)
    scheduler_output = scheduler.schedule()
    scheduler.update_from_output(scheduler_output, RunnerOutput(sampled_token_ids={"a": [1]}))
    request.spec_token_ids = [2, 3, 4]
    scheduler_output = scheduler.schedule()
    (update,) = scheduler.update_from_output(scheduler_output, RunnerOutput(sampled_token_ids={"a": [2, 3, 4, 5]}))
    assert update.new_token_ids == [2, 3] and update.finish_reason is FinishReason.LENGTH


# -- observability ---------------------------------------------------------------------------------


def test_events_use_the_injected_clock(make_scheduler, make_request, constant_runner_cls):
    clock = ManualClock(100.0)
    scheduler = make_scheduler(clock=clock)
    scheduler.add_request(make_request("a", max_tokens=1, arrival_time_s=100.0))
    clock.advance(2.5)
    _step(scheduler, constant_runner_cls())
    events = scheduler.take_events()
    assert [e.kind for e in events] == [
        SchedulerEventKind.QUEUED,
        SchedulerEventKind.SCHEDULED,
        SchedulerEventKind.FINISHED,
    ]
    assert events[0].time_s == 100.0 and events[1].time_s == 102.5
    assert events[1].details["queue_time_s"] == 2.5
    assert events[2].details["reason"] == "length"
    assert scheduler.get_request("a").first_scheduled_time_s == 102.5
    assert scheduler.get_request("a").first_token_time_s == 102.5
    assert scheduler.take_events() == []


def test_stats_count_prompt_and_generation_tokens(make_scheduler, make_request, constant_runner_cls, run):
    scheduler = make_scheduler()
    scheduler.add_request(make_request("a", prompt=6, max_tokens=3))
    scheduler.add_request(make_request("b", prompt=5, max_tokens=2))
    run(scheduler, constant_runner_cls())
    stats = scheduler.make_stats()
    assert stats.num_prompt_tokens_total == 11 and stats.num_generation_tokens_total == 5
    assert stats.num_running == stats.num_waiting == stats.num_swapped == 0 and stats.kv_usage == 0.0
