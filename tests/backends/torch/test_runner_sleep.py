"""TorchModelRunner's sleep mode (backends/torch/runner_sleep.py): what each level drops, and that a woken runner
generates the same greedy tokens as before it slept."""

from __future__ import annotations

import weakref
from types import SimpleNamespace

import pytest
import torch

from backends.runner_driver import drive_greedy
from backends.torch import TorchModelRunner
from backends.torch.runner_sleep import TP_UNSUPPORTED, model_bytes
from backends.torch.tp_runner import TPLeaderRunner
from engine.model_runner import KVCacheSpec

SPEC = KVCacheSpec(num_device_blocks=32, num_host_blocks=4, block_size=4)
PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [40, 41], [3, 14, 15, 92, 65]]
KV_BOUND = ("kv_cache", "attn", "buffers", "cpu_decoder", "graphs")


def _greedy(runner, kit, tag: str, num_new: int = 5) -> list[list[int]]:
    """Prefill ``PROMPTS`` in one step, then decode greedily, on the runner's current KV cache (fresh request ids
    per call: the sampler keeps nothing from an earlier call)."""
    blocks = SPEC.num_device_blocks
    return drive_greedy(runner, PROMPTS, num_new, SPEC.block_size, blocks, initialize=False, tag=tag)[0]


def _runner(tiny, **kw) -> TorchModelRunner:
    config, sd, _model = tiny
    runner = TorchModelRunner(config, "float32", state_dict=sd, **kw)
    runner.initialize_kv_cache(SPEC)
    return runner


def _kv_bytes(runner) -> int:
    return runner.kv_bytes_per_block(SPEC.block_size) * SPEC.num_device_blocks


def test_level_1_on_cpu_frees_kv_keeps_weights(tiny, kit):
    runner = _runner(tiny)
    before, kernels, model = _greedy(runner, kit, "a"), runner.kernels, runner.model
    kv = weakref.ref(runner.kv_cache)
    assert runner.sleep(1) == _kv_bytes(runner)  # the weights are in host RAM already: they stay
    assert runner.sleep_level == 1
    assert all(getattr(runner, name) is None for name in KV_BOUND)
    assert kv() is None  # no reference left anywhere: the memory is freed
    assert runner.model is model
    with pytest.raises(RuntimeError, match="asleep"):
        _greedy(runner, kit, "b")
    runner.wake_up()
    assert runner.sleep_level == 0
    assert runner.kernels == kernels  # the same kernels bound again (the C decode kernel among them)
    assert _greedy(runner, kit, "c") == before


@pytest.mark.parametrize("kernel", [True, False], ids=["cpu-kernel", "torch-ops"])
def test_level_2_drops_weights_and_reloads_them(tiny, kit, kernel):
    runner = _runner(tiny, cpu_decode_kernel=kernel)
    before, kernels, model = _greedy(runner, kit, "a"), runner.kernels, runner.model
    weights = model_bytes(model)
    refs = weakref.ref(model), weakref.ref(runner.kv_cache)
    del model
    assert runner.sleep(2) == _kv_bytes(runner) + weights
    assert runner.sleep_level == 2
    assert runner.model is None
    assert all(getattr(runner, name) is None for name in KV_BOUND)
    assert all(ref() is None for ref in refs)  # no reference left anywhere (kernel, graphs): the memory is freed
    runner.wake_up()
    assert runner.sleep_level == 0
    assert runner.kernels == kernels  # packed and on huge pages as __init__ left it, where those apply
    assert _greedy(runner, kit, "b") == before


def test_level_2_reloads_random_weights_from_the_seed(tiny, kit):
    config, _sd, _model = tiny
    runner = TorchModelRunner(config, "float32", seed=7)
    runner.initialize_kv_cache(SPEC)
    before = _greedy(runner, kit, "a")
    runner.sleep(2)
    runner.wake_up()
    assert _greedy(runner, kit, "b") == before


def test_wake_in_two_steps(tiny, kit):
    runner = _runner(tiny)
    before = _greedy(runner, kit, "a")
    runner.sleep(2)
    with pytest.raises(ValueError, match="needs the weights awake"):
        runner.wake_up(("kv_cache",))
    runner.wake_up(("weights",))
    assert runner.model is not None and runner.kv_cache is None
    assert runner.sleep_level == 2  # until the KV cache is back too
    runner.wake_up(("kv_cache",))
    assert runner.sleep_level == 0
    assert _greedy(runner, kit, "b") == before


def test_deeper_sleep_and_repeated_calls(tiny, kit):
    runner = _runner(tiny)
    before = _greedy(runner, kit, "a")
    runner.sleep(1)
    assert runner.sleep(1) == 0  # nothing left to free
    weights = model_bytes(runner.model)
    assert runner.sleep(2) == weights  # on a CPU the weights were still in (device) memory
    with pytest.raises(ValueError, match="already asleep at level 2"):
        runner.sleep(1)
    runner.wake_up()
    runner.wake_up()  # awake: a no-op
    assert _greedy(runner, kit, "b") == before


def test_bad_level_and_tags(tiny):
    runner = _runner(tiny)
    for level in (0, 3):
        with pytest.raises(ValueError, match="sleep level"):
            runner.sleep(level)
    assert runner.sleep_level == 0 and runner.kv_cache is not None
    runner.sleep(1)
    with pytest.raises(ValueError, match="unknown wake_up tag"):
        runner.wake_up(("weights", "cuda_graphs"))
    assert runner.sleep_level == 1


def test_handed_in_model_sleeps_at_level_1_only(tiny, kit):
    _config, _sd, model = tiny
    runner = kit.make_runner(model, num_device_blocks=SPEC.num_device_blocks, num_host_blocks=4)
    before = _greedy(runner, kit, "a")
    with pytest.raises(RuntimeError, match="handed in as a built LlamaModel"):
        runner.sleep(2)
    assert runner.sleep_level == 0 and runner.kv_cache is not None  # refused before anything was freed
    runner.sleep(1)
    runner.wake_up()
    assert runner.model is model
    assert _greedy(runner, kit, "b") == before


def test_tensor_parallel_refuses(tiny):
    runner = _runner(tiny)
    runner._tp = SimpleNamespace(rank=0, size=2)  # as built with tp=group (building one needs a process group)
    with pytest.raises(RuntimeError, match=TP_UNSUPPORTED):
        runner.sleep(1)
    assert runner.kv_cache is not None
    leader = TPLeaderRunner(_runner(tiny), SimpleNamespace(rank=0))
    with pytest.raises(RuntimeError, match=TP_UNSUPPORTED):
        leader.sleep(1)
    with pytest.raises(RuntimeError, match=TP_UNSUPPORTED):
        leader.wake_up()
    assert leader.sleep_level == 0


@pytest.mark.slow
def test_level_2_reloads_smollm2_from_its_checkpoint(smollm2_checkpoint, kit):
    runner = TorchModelRunner(smollm2_checkpoint, "float32", progress=False)
    runner.initialize_kv_cache(SPEC)
    before = _greedy(runner, kit, "a", num_new=3)
    runner.sleep(2)
    assert runner.model is None
    runner.wake_up()
    assert _greedy(runner, kit, "b", num_new=3) == before


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_level_1_on_cuda_moves_weights_to_host_and_back(tiny, kit):
    config, sd, _model = tiny
    runner = TorchModelRunner(config, "float32", "cuda", state_dict=sd)
    runner.initialize_kv_cache(SPEC)
    before = _greedy(runner, kit, "a")
    weights = model_bytes(runner.model)
    assert runner.sleep(1) == _kv_bytes(runner) + weights
    assert runner.model.embed_t.device.type == "cpu"
    assert runner.sleep(2) == 0  # off the GPU already
    runner.wake_up(("weights",))
    assert runner.model.embed_t.device.type == "cuda"
    runner.wake_up(("kv_cache",))
    assert runner.kv_cache.device_kv.device.type == "cuda"
    assert _greedy(runner, kit, "b") == before
