"""vLLM's sleep mode on one engine (engine/sleep_mode.py): refused while a request is in the engine, the prefix cache
forgotten with the KV bytes it named, the runner asked to free and restore; levels, modes and tags checked by name."""

from __future__ import annotations

import pytest

from backends.fake import build_trivial_engine
from engine.kv.block_pool import Tier
from engine.kv.kv_events import AllBlocksCleared
from engine.sampling_params import SamplingParams
from engine.sleep_mode import SleepModeError, check_level, check_tags, put_to_sleep, sleep_level, sleeps, wake

PROMPT = list(range(10, 74))  # four full blocks of 16


def test_it_sleeps_once_the_engine_is_empty_forgetting_the_prefix_cache(run_batch):
    engine = build_trivial_engine(num_device_blocks=64)
    engine.enable_kv_events()
    run_batch(engine, [(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True))], "finish_reason")
    pool = engine.scheduler.kv_cache_manager.pool(Tier.DEVICE)
    assert pool.num_cached_blocks >= 4
    engine.take_kv_events()
    engine.add_request(PROMPT, SamplingParams(max_tokens=1000, ignore_eos=True), req_id="running")
    with pytest.raises(SleepModeError, match="requests are in flight"):
        put_to_sleep(engine, 1)
    assert sleep_level(engine) == 0
    engine.abort(["running"])
    put_to_sleep(engine, 1)
    assert sleep_level(engine) == 1 and pool.num_cached_blocks == 0  # the KV it named is gone: so is the index
    assert any(isinstance(event, AllBlocksCleared) for event in engine.take_kv_events())  # told to the KV indexes
    assert put_to_sleep(engine, 1) == 0  # asleep at that level already: nothing done
    assert wake(engine, ()) == 0 and sleep_level(engine) == 0
    ((_, cached, _),) = run_batch(engine, [(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True))], "finish_reason")
    assert cached == 0  # it serves again, every prompt computed anew


def test_a_wake_in_two_parts_is_asleep_until_both_are_back():
    engine = build_trivial_engine(num_device_blocks=64)
    put_to_sleep(engine, 2)
    assert sleep_level(engine) == 2
    assert wake(engine, ["weights"]) == 2  # woken in part: still reported at its level
    slept = []
    engine.runner.sleep = lambda level, sleep=engine.runner.sleep: slept.append(level) or sleep(level)
    put_to_sleep(engine, 2)  # at its level already: the runner frees again what the partial wake brought back
    assert slept == [2] and sleep_level(engine) == 2
    assert wake(engine, ["weights"]) == 2
    assert wake(engine, ["kv_cache"]) == 0


def test_levels_and_tags_are_checked_by_name():
    for bad in (0, 3, "1", 1.0, True, None):
        with pytest.raises(SleepModeError, match="sleep level must be 1 or 2"):
            check_level(bad)
    assert check_tags([]) == ("weights", "kv_cache") and check_tags(["kv_cache", "weights"]) == ("weights", "kv_cache")
    with pytest.raises(SleepModeError, match="unknown wake_up tag 'gpu'"):
        check_tags(["gpu"])


def test_a_backend_without_a_sleep_mode_says_so():
    engine = build_trivial_engine(num_device_blocks=64)

    class Plain:  # a runner with no sleep mode
        def __getattr__(self, name):
            if name in ("sleep", "wake_up", "sleep_level"):
                raise AttributeError(name)
            return getattr(runner, name)

    runner, engine.runner = engine.runner, Plain()
    assert not sleeps(engine.runner) and sleep_level(engine) == 0
    with pytest.raises(SleepModeError, match="has no sleep mode"):
        put_to_sleep(engine, 1)
    with pytest.raises(SleepModeError, match="has no sleep mode"):
        wake(engine, ())
