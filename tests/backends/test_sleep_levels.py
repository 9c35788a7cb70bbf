"""Sleep mode's shared rules (backends/sleep_levels.py): level and tag validation, and the SleepVerbs state machine
as the two tensor-free runners (trivial, simulated) run it."""

from __future__ import annotations

import pytest

from backends.fake.trivial_runner import TrivialRunner
from backends.sim.cost_model import NodeHardware
from backends.sim.model_shapes import sim_model, weight_bytes
from backends.sim.runner import SimModelRunner
from backends.sleep_levels import SLEEP_LEVELS, WAKE_TAGS, check_sleep, check_tags
from engine.batch import SchedulerOutput
from engine.model_runner import KVCacheSpec

SPEC = KVCacheSpec(num_device_blocks=100, num_host_blocks=0, block_size=16)


def test_constants():
    assert SLEEP_LEVELS == (1, 2)
    assert WAKE_TAGS == ("weights", "kv_cache")


@pytest.mark.parametrize("level", [0, 3, -1, True, 1.0, "1", None])
def test_check_sleep_rejects_other_levels(level):
    with pytest.raises(ValueError, match="sleep level must be 1 or 2"):
        check_sleep(level)


def test_check_sleep_same_or_deeper_only():
    check_sleep(1)
    check_sleep(2)
    check_sleep(1, current=1)
    check_sleep(2, current=1)
    check_sleep(2, current=2)
    with pytest.raises(ValueError, match="already asleep at level 2"):
        check_sleep(1, current=2)


def test_check_tags_orders_weights_first():
    assert check_tags(("kv_cache", "weights")) == WAKE_TAGS
    assert check_tags(["kv_cache"]) == ("kv_cache",)
    assert check_tags(()) == check_tags(None) == WAKE_TAGS  # none named: every one, as vLLM's tags=None


@pytest.mark.parametrize("tags", [("weights", "kv"), ("all",), "weights"])
def test_check_tags_rejects_unknown_and_bare_strings(tags):
    with pytest.raises(ValueError, match=r"unknown wake_up tag|not the string"):
        check_tags(tags)


def _sim() -> SimModelRunner:
    runner = SimModelRunner(sim_model("llama-3-8b"), NodeHardware("a100-80gb"))
    runner.initialize_kv_cache(SPEC)
    return runner


def _trivial() -> TrivialRunner:
    runner = TrivialRunner()
    runner.initialize_kv_cache(SPEC)
    return runner


@pytest.mark.parametrize("make", [_sim, _trivial])
def test_levels_and_partial_wake(make):
    runner = make()
    assert runner.sleep_level == 0
    runner.sleep(1)
    assert runner.sleep_level == 1
    with pytest.raises(RuntimeError, match="asleep"):
        runner.execute(SchedulerOutput(step_id=0, requests=[]))
    with pytest.raises(ValueError, match="needs the weights awake"):
        runner.wake_up(("kv_cache",))
    runner.sleep(2)  # deeper: allowed
    with pytest.raises(ValueError, match="already asleep at level 2"):
        runner.sleep(1)
    runner.wake_up(("weights",))
    assert runner.sleep_level == 2  # until both are back
    runner.wake_up(("weights",))  # awake already: no-op
    runner.wake_up(("kv_cache",))
    assert runner.sleep_level == 0
    runner.wake_up()  # all awake: no-op
    runner.execute(SchedulerOutput(step_id=1, requests=[]))


@pytest.mark.parametrize("make", [_sim, _trivial])
def test_bad_level_and_tag_leave_the_runner_as_it_was(make):
    runner = make()
    with pytest.raises(ValueError):
        runner.sleep(3)
    assert runner.sleep_level == 0
    runner.sleep(1)
    with pytest.raises(ValueError, match="unknown wake_up tag"):
        runner.wake_up(("weights", "lora"))
    assert runner.sleep_level == 1
    runner.wake_up()
    assert runner.sleep_level == 0


def test_sim_frees_kv_and_weights_once():
    runner = _sim()
    kv = runner.kv_bytes_per_block(SPEC.block_size) * SPEC.num_device_blocks
    weights = int(weight_bytes(runner.model, 2))
    assert runner.sleep(1) == kv + weights  # the weights leave the (simulated) GPUs for host RAM
    assert runner.sleep(2) == 0  # nothing left on the GPUs to free
    runner.wake_up(("weights",))
    assert runner.sleep(2) == weights  # the reloaded weights again; the KV cache was still asleep
    runner.wake_up()
    assert runner.sleep(2) == kv + weights


def test_trivial_frees_nothing():
    assert _trivial().sleep(2) == 0
