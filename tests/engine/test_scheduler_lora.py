"""The scheduler keeps at most ``max_loras`` distinct adapters running; a request waiting for a slot is
stepped over (keeping its place), and every request still finishes."""

from __future__ import annotations

from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.scheduler import Scheduler


def test_at_most_max_loras_adapters_run_and_none_blocks_the_queue(make_request, constant_runner_cls, run):
    scheduler = Scheduler(
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16, max_model_len=256, max_loras=2),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=0),
        ManualClock(),
    )
    loras = {"a": 1, "b": 2, "c": 3, "d": None, "e": 1, "f": 3}
    for req_id, lora_id in loras.items():
        scheduler.add_request(make_request(req_id, prompt=4, max_tokens=3 if req_id in "ab" else 2, lora_id=lora_id))
    steps: list[list[str]] = []

    def check(s, out):
        assert len({r.lora_id for r in out.requests} - {None}) <= 2
        assert len(s.running_lora_ids()) <= 2
        steps.append([r.req_id for r in out.requests])

    result = run(scheduler, constant_runner_cls(), check=check)
    assert sorted(result.outputs) == sorted(loras)
    # step 1: c and f (adapter 3) wait for a slot; d (base) and e (adapter 1, running) go past them
    assert steps[0] == ["a", "b", "d", "e"]
    # adapter 3 runs once a slot frees, c before f (their order kept)
    first_c = next(i for i, s in enumerate(steps) if "c" in s)
    assert first_c > 0 and "f" in steps[first_c]
    assert scheduler.waiting_lora_ids() == set()


def test_no_limit_without_max_loras(make_request, constant_runner_cls, run):
    scheduler = Scheduler(
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=16, max_model_len=256),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=0),
        ManualClock(),
    )
    for i in range(5):
        scheduler.add_request(make_request(f"r{i}", prompt=4, max_tokens=2, lora_id=i + 1))
    first = scheduler.schedule()
    assert len({r.lora_id for r in first.requests}) == 5
