"""The key property: preemption (swap or recompute), prefix caching, chunked prefill and speculative
drafts never change what a request generates. A ``PagedKVRunner`` reads every token's context back
through the block tables, so any bookkeeping slip (wrong block, slot, move, order or counter) changes
the output; each run under KV pressure is compared with an uninterrupted run on a huge cache."""

from __future__ import annotations

import zlib

from hypothesis import event, given, settings
from hypothesis import strategies as st

from engine.clock import ManualClock
from engine.config import PreemptionMode
from engine.request import FinishReason, RequestStatus
from engine.scheduler_stats import SchedulerEventKind

SHARED_PREFIX = list(range(500, 509))  # 2 full blocks of 4, plus one token


def _workload(make_request):
    """Eight requests, some sharing a prefix, that need far more KV than the small cache holds."""
    requests = []
    for i in range(8):
        prompt = [*SHARED_PREFIX, 40 + i] if i % 3 == 0 else [10 * i + j for j in range(4 + i)]
        requests.append(make_request(f"r{i}", prompt=prompt, max_tokens=14 + i, arrival_time_s=float(i)))
    return requests


def _reference(make_scheduler, make_request, kv_runner_cls, run, requests_factory):
    scheduler = make_scheduler(num_device_blocks=1024, num_host_blocks=0, max_num_batched_tokens=1024)
    for request in requests_factory(make_request):
        scheduler.add_request(request)
    result = run(scheduler, kv_runner_cls.for_scheduler(scheduler))
    assert scheduler.make_stats().num_preemptions_total == 0
    return result


def _check_step(scheduler, scheduler_output):
    """Per-step contract: budget, seat cap, block tables long enough, no block written by two requests."""
    config = scheduler.scheduler_config
    assert scheduler_output.num_batched_tokens <= config.max_num_batched_tokens
    assert len(scheduler_output.requests) <= config.max_num_seqs
    block_size = scheduler.cache_config.block_size
    written: set[int] = set()
    for r in scheduler_output.requests:
        end = r.start_pos + r.num_scheduled_tokens
        assert len(r.block_ids) * block_size >= end
        blocks = {r.block_ids[p // block_size] for p in range(r.start_pos, end)}
        assert not blocks & written
        written |= blocks
    host_dsts = [h for _, h in scheduler_output.blocks_to_swap_out]
    assert len(set(host_dsts)) == len(host_dsts)


def test_swap_preemption_preserves_every_output(make_scheduler, make_request, kv_runner_cls, run):
    reference = _reference(make_scheduler, make_request, kv_runner_cls, run, _workload)
    scheduler = make_scheduler(num_device_blocks=10, num_host_blocks=64, max_num_batched_tokens=16)
    for request in _workload(make_request):
        scheduler.add_request(request)
    result = run(scheduler, kv_runner_cls.for_scheduler(scheduler), check=_check_step)

    assert result.outputs == reference.outputs
    assert set(result.finish_reasons.values()) == {FinishReason.LENGTH}
    stats = scheduler.make_stats()
    assert stats.num_preemptions_total > 0
    assert stats.num_swapped_out_blocks_total > 0
    assert stats.num_swapped_in_blocks_total == stats.num_swapped_out_blocks_total
    assert stats.num_recomputed_tokens_total == 0
    assert stats.prefix_cache_hits_total > 0
    kinds = [e.kind for e in scheduler.take_events()]
    assert SchedulerEventKind.SWAPPED_OUT in kinds and SchedulerEventKind.SWAPPED_IN in kinds
    assert stats.num_free_device_blocks == 10 and stats.num_free_host_blocks == 64


def test_recompute_preemption_preserves_every_output(make_scheduler, make_request, kv_runner_cls, run):
    reference = _reference(make_scheduler, make_request, kv_runner_cls, run, _workload)
    scheduler = make_scheduler(
        num_device_blocks=10, num_host_blocks=64, max_num_batched_tokens=16, preemption_mode=PreemptionMode.RECOMPUTE
    )
    for request in _workload(make_request):
        scheduler.add_request(request)
    result = run(scheduler, kv_runner_cls.for_scheduler(scheduler), check=_check_step)

    assert result.outputs == reference.outputs
    stats = scheduler.make_stats()
    assert stats.num_preemptions_total > 0 and stats.num_recomputed_tokens_total > 0
    assert stats.num_swapped_out_blocks_total == 0
    preempted = [e for e in scheduler.take_events() if e.kind is SchedulerEventKind.PREEMPTED]
    assert preempted and all(e.details["mode"] == "recompute" for e in preempted)


def test_swap_falls_back_to_recompute_when_host_ram_is_short(make_scheduler, make_request, kv_runner_cls, run):
    reference = _reference(make_scheduler, make_request, kv_runner_cls, run, _workload)
    scheduler = make_scheduler(num_device_blocks=10, num_host_blocks=3, max_num_batched_tokens=16)
    for request in _workload(make_request):
        scheduler.add_request(request)
    result = run(scheduler, kv_runner_cls.for_scheduler(scheduler), check=_check_step)

    assert result.outputs == reference.outputs
    modes = {e.details["mode"] for e in scheduler.take_events() if e.kind is SchedulerEventKind.PREEMPTED}
    assert modes == {"swap", "recompute"}


def test_victim_is_the_most_recent_arrival_and_resumes_before_new_admissions(
    make_scheduler, make_request, kv_runner_cls
):
    scheduler = make_scheduler(num_device_blocks=4, num_host_blocks=8)
    runner = kv_runner_cls.for_scheduler(scheduler)
    scheduler.add_request(make_request("old", prompt=8, max_tokens=10, arrival_time_s=0.0))
    scheduler.add_request(make_request("new", prompt=8, max_tokens=10, arrival_time_s=1.0))

    def step():
        out = scheduler.schedule()
        scheduler.update_from_output(out, runner.execute(out))
        return out

    step()  # both prefill: 2 blocks each, device full
    scheduler.add_request(make_request("late", prompt=2, max_tokens=1, arrival_time_s=2.0))
    out = step()  # old decodes into position 8: needs a 3rd block -> new is swapped out
    assert [r.req_id for r in out.requests] == ["old"]
    assert [d for d, _ in out.blocks_to_swap_out] and scheduler.get_request("new").num_preemptions == 1
    # new stays swapped while old holds the device, and "late" may not overtake it
    while True:
        out = step()
        if scheduler.get_request("new").status is not RequestStatus.SWAPPED:
            break
        assert "late" not in [r.req_id for r in out.requests]
    assert out.blocks_to_swap_in
    assert [r.req_id for r in out.requests][-2:] == ["new", "late"]  # resumed first, then admitted


def test_the_newest_request_preempts_itself_when_it_cannot_grow(make_scheduler, make_request, kv_runner_cls, run):
    scheduler = make_scheduler(num_device_blocks=3, num_host_blocks=0)
    runner = kv_runner_cls.for_scheduler(scheduler)
    scheduler.add_request(make_request("a", prompt=4, max_tokens=6, arrival_time_s=0.0))
    scheduler.add_request(make_request("b", prompt=4, max_tokens=6, arrival_time_s=1.0))
    out = scheduler.schedule()
    scheduler.update_from_output(out, runner.execute(out))  # 1 block each; both need a 2nd to decode
    out = scheduler.schedule()  # a takes the last free block; b is the newest, so b is the victim
    assert [r.req_id for r in out.requests] == ["a"]
    assert scheduler.get_request("b").status is RequestStatus.WAITING
    scheduler.update_from_output(out, runner.execute(out))
    result = run(scheduler, runner, max_steps=100)
    # both reach max_tokens=6: a sampled 2 tokens and b 1 before ``run`` took over
    assert len(result.outputs["a"]) == 4 and len(result.outputs["b"]) == 5
    assert scheduler.make_stats().num_preemptions_total >= 1


def _oracle_drafts(reference_outputs, num_drafts: int):
    """A proposer that knows the reference continuation but corrupts some drafts deterministically."""

    def propose(scheduler):
        for req_id, ref in reference_outputs.items():
            request = scheduler.get_request(req_id)
            if request is None or request.is_finished:
                continue
            k = request.num_output_tokens
            drafts = list(ref[k : k + num_drafts])
            for j in range(len(drafts)):
                if zlib.crc32(f"{req_id}/{k}/{j}".encode()) % 4 == 0:
                    drafts[j] = (drafts[j] + 1) % 97
            request.spec_token_ids = drafts

    return propose


def test_speculative_drafts_keep_outputs_exact_under_preemption(make_scheduler, make_request, kv_runner_cls, run):
    reference = _reference(make_scheduler, make_request, kv_runner_cls, run, _workload)
    for mode in PreemptionMode:
        scheduler = make_scheduler(
            num_device_blocks=12, num_host_blocks=64, max_num_batched_tokens=24, preemption_mode=mode
        )
        for request in _workload(make_request):
            scheduler.add_request(request)
        runner = kv_runner_cls.for_scheduler(scheduler)
        result = run(scheduler, runner, before_step=_oracle_drafts(reference.outputs, 3), check=_check_step)
        assert result.outputs == reference.outputs
        assert scheduler.make_stats().num_preemptions_total > 0
        assert result.num_steps < reference.num_steps * 2  # drafts were accepted (fewer decode steps)


@st.composite
def _scenarios(draw):
    """A few requests whose combined KV is several times what the small device cache holds."""
    block_size = draw(st.sampled_from([1, 2, 4, 8]))
    num_device_blocks = -(-draw(st.integers(12, 40)) // block_size)
    capacity = num_device_blocks * block_size
    chunked = draw(st.booleans())
    max_model_len = 64
    budget = draw(st.integers(8, 64)) if chunked else draw(st.integers(64, 96))
    specs = []
    for _ in range(draw(st.integers(2, 6))):
        prompt_len = draw(st.integers(1, min(capacity - 1, 20)))
        share = draw(st.booleans())
        max_tokens = draw(st.integers(1, min(24, capacity - prompt_len)))
        arrival_step = draw(st.integers(0, 4))
        specs.append((prompt_len, share, max_tokens, arrival_step))
    return dict(
        config=dict(
            block_size=block_size,
            num_device_blocks=num_device_blocks,
            num_host_blocks=draw(st.sampled_from([0, 3, 64, 64])),
            enable_prefix_caching=draw(st.booleans()),
            max_num_batched_tokens=budget,
            max_num_seqs=draw(st.integers(2, 6)),
            max_model_len=max_model_len,
            enable_chunked_prefill=chunked,
            preemption_mode=draw(st.sampled_from([PreemptionMode.SWAP, PreemptionMode.SWAP, PreemptionMode.RECOMPUTE])),
        ),
        specs=specs,
        num_drafts=draw(st.sampled_from([0, 0, 2])),
    )


@settings(max_examples=100, deadline=None)
@given(_scenarios())
def test_random_workloads_match_an_uninterrupted_run(make_scheduler, make_request, kv_runner_cls, run, scenario):
    def requests_factory(make):
        out = []
        for i, (prompt_len, share, max_tokens, _) in enumerate(scenario["specs"]):
            prompt = (
                [(7 * j) % 13 for j in range(prompt_len)] if share else [100 + 20 * i + j for j in range(prompt_len)]
            )
            out.append(make(f"r{i}", prompt=prompt, max_tokens=max_tokens, arrival_time_s=float(i)))
        return out

    reference = _reference(make_scheduler, make_request, kv_runner_cls, run, requests_factory)

    clock = ManualClock()
    scheduler = make_scheduler(clock=clock, **scenario["config"])
    pending = [(request, spec[3]) for request, spec in zip(requests_factory(make_request), scenario["specs"])]
    propose = _oracle_drafts(reference.outputs, scenario["num_drafts"]) if scenario["num_drafts"] else None
    step = 0

    def before_step(s):
        nonlocal step
        for item in [p for p in pending if p[1] <= step]:
            s.add_request(item[0])
            pending.remove(item)
        if propose is not None:
            propose(s)
        step += 1

    result = run(
        scheduler,
        kv_runner_cls.for_scheduler(scheduler),
        clock,
        max_steps=5_000,
        before_step=before_step,
        check=_check_step,
        more_coming=lambda: bool(pending),
    )
    assert result.outputs == reference.outputs
    assert result.finish_reasons == reference.finish_reasons
    stats = scheduler.make_stats()
    event(f"swapped out: {stats.num_swapped_out_blocks_total > 0}")
    event(f"recomputed: {stats.num_recomputed_tokens_total > 0}")
    event(f"prefix hits: {stats.prefix_cache_hits_total > 0}")
    assert stats.num_free_device_blocks == scenario["config"]["num_device_blocks"]
    assert stats.num_free_host_blocks == scenario["config"]["num_host_blocks"]


def test_abort_of_a_swapped_request_frees_its_host_blocks(make_scheduler, make_request, kv_runner_cls):
    scheduler = make_scheduler(num_device_blocks=4, num_host_blocks=8)
    runner = kv_runner_cls.for_scheduler(scheduler)
    scheduler.add_request(make_request("old", prompt=8, max_tokens=10, arrival_time_s=0.0))
    scheduler.add_request(make_request("new", prompt=8, max_tokens=10, arrival_time_s=1.0))
    for _ in range(2):
        out = scheduler.schedule()
        scheduler.update_from_output(out, runner.execute(out))
    assert scheduler.get_request("new").status is RequestStatus.SWAPPED
    assert scheduler.make_stats().num_free_host_blocks == 6
    scheduler.finish_requests(["new"], FinishReason.ABORT)
    stats = scheduler.make_stats()
    assert stats.num_swapped == 0 and stats.num_free_host_blocks == 8
    assert "new" in scheduler.schedule().finished_req_ids
