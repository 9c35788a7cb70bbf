"""The KV cache sized from the device's memory (backends/kv_sizing.py; vLLM's ``--gpu-memory-utilization`` and
``--kv-cache-memory-bytes``, and ``--swap-space`` for host RAM): vLLM's rule on a device's figures, the flags' refusals
where the rule cannot apply, the real SmolLM2 engine built with byte budgets; vLLM's prefix caching and preemption
flags. On a CUDA host, the device's own figures."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from backends.kv_sizing import (
    ACTIVATION_SAFETY,
    LOGIT_BYTES,
    DeviceMemory,
    activation_reserve_bytes,
    device_blocks,
    kv_budget_bytes,
)
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from zoo.cli import build_parser

GiB = 2**30
MODEL = SimpleNamespace(  # a Llama-3-8B's shapes
    hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
    vocab_size=128256,
)  # fmt: skip


class _Runner:
    """What the sizing reads of a runner: one block's bytes (Llama-3-8B in bf16: 128 KiB per token)."""

    def kv_bytes_per_block(self, block_size: int) -> int:
        return 32 * 2 * block_size * 8 * 128 * 2


def _config(**fields) -> EngineConfig:
    scheduler = SchedulerConfig(max_num_batched_tokens=2048, max_num_seqs=256, max_model_len=8192)
    return EngineConfig(scheduler=scheduler, cache=CacheConfig(block_size=16, num_device_blocks=7), **fields)


def test_the_activation_reserve_counts_a_steps_buffers_and_the_sampled_rows_logits():
    per_token = (2 * 4096 + (32 + 16) * 128 + 4096 + 3 * 14336) * 2
    expected = ACTIVATION_SAFETY * (per_token * 2048 + 256 * 128256 * LOGIT_BYTES)
    assert activation_reserve_bytes(MODEL, 2048, 256, 2) == int(expected)
    assert activation_reserve_bytes(MODEL, 4096, 256, 2) > activation_reserve_bytes(MODEL, 2048, 256, 2)


def test_vllms_rule_on_an_h100():
    memory = DeviceMemory(total_bytes=80 * GiB, free_bytes=64 * GiB)  # 16 GiB in use: the weights and the context
    assert kv_budget_bytes(memory, 0.9, 2 * GiB) == int(72 * GiB) - 16 * GiB - 2 * GiB
    config = _config(device="cuda", dtype="bfloat16", gpu_memory_utilization=0.9)
    blocks = device_blocks(config, _Runner(), MODEL, memory)
    activations = activation_reserve_bytes(MODEL, 2048, 256, 2)
    assert blocks == (int(72 * GiB) - 16 * GiB - activations) // _Runner().kv_bytes_per_block(16)
    assert blocks * 16 > 250_000  # ~32 GiB of KV: a quarter of a million tokens


def test_a_byte_budget_on_any_device_and_neither_flag_keeps_the_count():
    per_block = _Runner().kv_bytes_per_block(16)
    assert device_blocks(_config(kv_cache_memory_bytes=10 * per_block + 5), _Runner(), MODEL) == 10
    assert device_blocks(_config(), _Runner(), MODEL) == 7


@pytest.mark.parametrize(
    "fields, memory, error",
    [
        ({"kv_cache_memory_bytes": 1000}, None, "--kv-cache-memory-bytes: 1,000 bytes leaves no room"),
        ({"kv_cache_memory_bytes": 2**70}, None, r"is more than the device has \(.* GiB\)"),  # a CPU's: host RAM
        (
            {"kv_cache_memory_bytes": 81 * GiB, "device": "cuda"},
            DeviceMemory(total_bytes=80 * GiB, free_bytes=70 * GiB),
            r"more than the device has \(80.00 GiB\)",
        ),
        ({"gpu_memory_utilization": 0.5}, None, "on a CPU give --num-device-blocks or --kv-cache-memory-bytes"),
        ({"gpu_memory_utilization": 0.5, "device": "cuda", "backend": "jax"}, None, "give --kv-cache-memory-bytes"),
        ({"gpu_memory_utilization": 0.5, "device": "cuda", "tp": 2}, None, "give --num-device-blocks"),
        (
            {"gpu_memory_utilization": 0.2, "device": "cuda"},
            DeviceMemory(total_bytes=24 * GiB, free_bytes=8 * GiB),
            r"0.2 of 24.00 GiB less 16.00 GiB in use and .* GiB of activations leaves no room",
        ),
    ],
)
def test_where_the_rule_cannot_apply_the_start_says_what_to_give(fields, memory, error):
    with pytest.raises(ValueError, match=error):
        device_blocks(_config(**fields), _Runner(), MODEL, memory)


@pytest.mark.parametrize(
    "fields, error",
    [
        ({"gpu_memory_utilization": 0.5, "kv_cache_memory_bytes": 1}, "not both"),
        ({"gpu_memory_utilization": 0.0}, r"in \(0, 1\]"),
        ({"gpu_memory_utilization": 1.5}, r"in \(0, 1\]"),
        ({"kv_cache_memory_bytes": 0}, ">= 1"),
        ({"kv_cache_memory_bytes": 10, "backend": "sim", "model": "sim:llama-3-8b", "gpu_profile": "l4"}, "simulated"),
    ],
)
def test_the_engine_config_refuses_a_bad_pair(fields, error):
    with pytest.raises(ValueError, match=error):
        _config(**fields)


def test_vllms_cache_and_preemption_flags_make_the_engine_config():
    from zoo.agent_cmd import sim_engine_config_from_args
    from zoo.engine_args import engine_config_from_args

    args = build_parser().parse_args(
        ["agent", "--no-enable-prefix-caching", "--preemption-mode", "recompute", "--swap-space", "0.5"]
    )
    config = engine_config_from_args(args)
    assert config.cache.enable_prefix_caching is False and config.scheduler.preemption_mode == "recompute"
    assert config.swap_space_bytes == 2**29
    assert engine_config_from_args(build_parser().parse_args(["agent"])).cache.enable_prefix_caching is True
    with pytest.raises(ValueError, match="--swap-space must be"):
        engine_config_from_args(build_parser().parse_args(["agent", "--swap-space", "-1"]))
    sim = ["agent", "--backend", "sim", "--gpu-profile", "l4", "--model", "sim:llama-3-8b"]
    config, _ = sim_engine_config_from_args(build_parser().parse_args([*sim, "--no-enable-prefix-caching"]))
    assert config.cache.enable_prefix_caching is False
    with pytest.raises(ValueError, match="--swap-space: a simulated node"):
        sim_engine_config_from_args(build_parser().parse_args([*sim, "--swap-space", "1"]))


def test_the_flags():
    args = build_parser().parse_args(["agent", "--gpu-memory-utilization", "0.85", "--kv-cache-memory-bytes", "2Gi"])
    assert (args.gpu_memory_utilization, args.kv_cache_memory_bytes) == (0.85, 2 * GiB)
    for flag, bad in (("--gpu-memory-utilization", "0"), ("--gpu-memory-utilization", "nan"),
                      ("--kv-cache-memory-bytes", "1.5G"), ("--kv-cache-memory-bytes", "0")):  # fmt: skip
        with pytest.raises(SystemExit):
            build_parser().parse_args(["agent", flag, bad])


def test_the_real_engine_takes_byte_budgets_for_its_device_and_its_swap_space(smollm2_checkpoint, monkeypatch):
    from backends.builder import build_engine

    monkeypatch.setattr("backends.checkpoint.load_checkpoint", lambda path=None: smollm2_checkpoint)
    config = _config(
        kv_cache_memory_bytes=32 * 2**20, swap_space_bytes=2**20, cpu_decode_kernel=False, huge_pages=False
    )
    engine = build_engine(config, progress=False)
    per_block = engine.runner.kv_bytes_per_block(16)  # SmolLM2 in fp32: 30 layers x 3 KV heads x 64 x 16 x 2 x 4
    assert engine.cache_config.num_device_blocks == 32 * 2**20 // per_block
    assert engine.scheduler.kv_cache_manager.num_device_blocks == engine.cache_config.num_device_blocks
    assert engine.cache_config.num_host_blocks == 2**20 // per_block


def test_a_simulated_node_takes_its_gpus_share():
    from backends.builder import build_engine

    def blocks(utilization: float | None) -> int:
        config = _config(
            backend="sim", model="sim:llama-3-8b", gpu_profile="h100-sxm", gpu_memory_utilization=utilization
        )
        return build_engine(dataclasses.replace(config, cache=CacheConfig())).cache_config.num_device_blocks

    assert blocks(0.5) < blocks(None) == blocks(0.9)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_a_cuda_devices_own_figures():
    free, total = torch.cuda.mem_get_info()
    blocks = device_blocks(_config(device="cuda", gpu_memory_utilization=0.5), _Runner(), MODEL)
    assert 0 < blocks * _Runner().kv_bytes_per_block(16) <= min(total * 0.5, free)
