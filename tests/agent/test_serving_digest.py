"""The serving digest (agent/serving_digest.py): what decides a node's tokens changes it; what changes only speed
does not; the checkpoint counts by its name and its files' sizes."""

from __future__ import annotations

import dataclasses

import msgspec
import pytest

from agent.serving_digest import DIGEST_HEX_CHARS, checkpoint_identity, serving_digest
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.spec.spec_config import SpecDecodeConfig
from transport.messages import HardwareInfo

H100 = HardwareInfo("NVIDIA H100 80GB HBM3", "H100", "9.0", 80.0, 3350.0, 989.0, "gpu-table")


def _digest(engine: EngineConfig | None = None, **overrides) -> str:
    parts = dict(model="smol", backend="torch", hardware=H100, kernels="flash_sdpa kv=auto graphs=on", engine=engine)
    parts.update(overrides)
    return serving_digest(**parts)


def test_the_digest_is_stable_hex():
    digest = _digest(EngineConfig())
    assert digest == _digest(EngineConfig())
    assert len(digest) == DIGEST_HEX_CHARS and int(digest, 16) >= 0


@pytest.mark.parametrize(
    "change",
    [
        {"dtype": "bfloat16"},
        {"kv_dtype": "fp8_e4m3"},
        {"tp": 2},
        {"tp_compression": "int8"},
        {"attention_backend": "triton_paged"},
        {"cuda_graphs": False},
        {"cpu_decode_kernel": False},
        {"speculative": SpecDecodeConfig()},
        {"model": "sim:llama-3-8b", "backend": "sim", "gpu_profile": "h100-sxm"},
    ],
)
def test_what_decides_the_tokens_changes_the_digest(change):
    assert _digest(dataclasses.replace(EngineConfig(), **change)) != _digest(EngineConfig())


@pytest.mark.parametrize(
    "change",
    [
        {"model": "other"},
        {"backend": "jax"},
        {"kernels": "gather_sdpa kv=auto graphs=off"},
        {"hardware": msgspec.structs.replace(H100, device_name="NVIDIA A100-SXM4-40GB", gpu_type="A100-40GB")},
    ],
)
def test_the_hellos_own_parts_change_the_digest(change):
    assert _digest(EngineConfig(), **change) != _digest(EngineConfig())


def test_what_changes_only_speed_leaves_the_digest():
    base = _digest(EngineConfig())
    faster = EngineConfig(
        num_threads=2,
        scheduler=SchedulerConfig(max_num_batched_tokens=4096, max_num_seqs=8),
        cache=CacheConfig(num_device_blocks=64, num_host_blocks=0),
        huge_pages=False,
    )
    assert _digest(faster) == base


def test_a_checkpoint_counts_by_its_name_and_its_weight_files_sizes(tmp_path):
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"x" * 10)
    assert checkpoint_identity(str(gguf)) == ["model.gguf", 10]
    before = _digest(EngineConfig(model=str(gguf)))
    gguf.write_bytes(b"x" * 11)  # other weights under the same name
    assert _digest(EngineConfig(model=str(gguf))) != before
    folder = tmp_path / "hf"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"y" * 3)
    (folder / "config.json").write_text("{}")  # not weights: not counted
    assert checkpoint_identity(str(folder)) == ["hf", [["model.safetensors", 3]]]
    assert checkpoint_identity(None) == ["default"]
    assert checkpoint_identity(str(tmp_path / "missing.gguf")) == ["missing.gguf"]
