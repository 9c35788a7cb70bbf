"""JaxModelRunner's sleep mode (backends/sleep_levels.py): what each level drops, and that a woken runner generates
the same greedy tokens as before it slept, without compiling anything again."""

from __future__ import annotations

import weakref

import jax
import pytest

from backends.jax import JaxModelRunner
from backends.runner_driver import drive_greedy
from engine.model_runner import KVCacheSpec

SPEC = KVCacheSpec(num_device_blocks=32, num_host_blocks=4, block_size=4)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41], [3, 14, 15, 92, 65]]


def _greedy(runner, kit, tag: str, num_new: int = 5) -> list[list[int]]:
    """Prefill ``PROMPTS`` in one step, then decode greedily, on the runner's current KV cache (fresh request ids
    per call: the sampler keeps nothing from an earlier call)."""
    blocks = SPEC.num_device_blocks
    return drive_greedy(runner, PROMPTS, num_new, SPEC.block_size, blocks, initialize=False, tag=tag)[0]


def _runner(tiny, kit, **kw) -> JaxModelRunner:
    config, sd, _model = tiny
    runner = JaxModelRunner(config, "float32", state_dict=sd, buckets=kit.TINY_BUCKETS, progress=False, **kw)
    runner.initialize_kv_cache(SPEC)
    return runner


def _kv_bytes(runner) -> int:
    return runner.kv_bytes_per_block(SPEC.block_size) * (SPEC.num_device_blocks + 1)  # + the scratch block


def _weight_bytes(runner) -> int:
    leaves = jax.tree_util.tree_leaves((runner.params, runner.kernel_params))
    return sum({id(leaf): leaf.nbytes for leaf in leaves}.values())  # a tied head once


def test_level_1_on_cpu_frees_kv_keeps_weights(tiny, kit):
    runner = _runner(tiny, kit)
    before, params = _greedy(runner, kit, "a"), runner.params
    compiles = runner.num_compilations
    assert runner.sleep(1) == _kv_bytes(runner)  # the weights are in host RAM already: they stay
    assert runner.sleep_level == 1
    assert runner.kv_cache is None and runner.params is params
    with pytest.raises(RuntimeError, match="asleep"):
        _greedy(runner, kit, "b")
    runner.wake_up()
    assert runner.sleep_level == 0
    assert _greedy(runner, kit, "c") == before
    assert runner.num_compilations == compiles  # the same shapes: every program was cached


@pytest.mark.parametrize("kernel", [True, False], ids=["cpu-kernel", "xla"])
def test_level_2_drops_weights_and_reloads_them(tiny, kit, kernel):
    runner = _runner(tiny, kit, cpu_decode_kernel=kernel)
    before, kernels, compiles = _greedy(runner, kit, "a"), runner.kernels, runner.num_compilations
    expected = _kv_bytes(runner) + _weight_bytes(runner)
    kv = weakref.ref(runner.kv_cache)
    assert runner.sleep(2) == expected
    assert runner.sleep_level == 2
    assert runner.params is None and runner.kernel_params is None and kv() is None
    runner.wake_up()
    assert runner.sleep_level == 0
    assert runner.kernels == kernels  # the same decode path and pages as __init__ left them
    assert _greedy(runner, kit, "b") == before
    assert runner.num_compilations == compiles


def test_level_2_reloads_random_weights_from_the_seed(tiny, kit):
    config, _sd, _model = tiny
    runner = JaxModelRunner(config, "float32", seed=7, buckets=kit.TINY_BUCKETS)
    runner.initialize_kv_cache(SPEC)
    before = _greedy(runner, kit, "a")
    runner.sleep(2)
    runner.wake_up()
    assert _greedy(runner, kit, "b") == before


def test_wake_in_two_steps(tiny, kit):
    runner = _runner(tiny, kit)
    before = _greedy(runner, kit, "a")
    runner.sleep(2)
    with pytest.raises(ValueError, match="needs the weights awake"):
        runner.wake_up(("kv_cache",))
    runner.wake_up(("weights",))
    assert runner.params is not None and runner.kv_cache is None
    assert runner.sleep_level == 2  # until the KV cache is back too
    runner.wake_up(("kv_cache",))
    assert runner.sleep_level == 0
    assert _greedy(runner, kit, "b") == before


def test_deeper_sleep_bad_level_and_tags(tiny, kit):
    runner = _runner(tiny, kit)
    with pytest.raises(ValueError, match="sleep level"):
        runner.sleep(3)
    runner.sleep(1)
    weights = _weight_bytes(runner)
    assert runner.sleep(2) == weights  # on a CPU the weights were still in (device) memory
    with pytest.raises(ValueError, match="already asleep at level 2"):
        runner.sleep(1)
    with pytest.raises(ValueError, match="unknown wake_up tag"):
        runner.wake_up(("weights", "kv"))
    assert runner.sleep_level == 2 and runner.params is None


def _gpu_devices() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:  # no GPU backend in this jaxlib, or no device
        return []


@pytest.mark.cuda
@pytest.mark.skipif(not _gpu_devices(), reason="needs a JAX GPU device")
def test_level_1_on_gpu_moves_weights_to_host_and_back(tiny, kit):
    config, sd, _model = tiny
    runner = JaxModelRunner(config, "float32", "cuda", state_dict=sd, buckets=kit.TINY_BUCKETS)
    runner.initialize_kv_cache(SPEC)
    before = _greedy(runner, kit, "a")
    assert runner.sleep(1) == _kv_bytes(runner) + _weight_bytes(runner)
    assert runner.params.embed.devices() == {jax.devices("cpu")[0]}
    assert (runner.params.lm_head is runner.params.embed) == config.tie_word_embeddings  # ties kept
    runner.wake_up()
    assert runner.params.embed.devices() == {runner.device}
    assert _greedy(runner, kit, "b") == before
