"""PEFT LoRA directories: read, checked against the base model, refused with a reason when they do not fit."""

from __future__ import annotations

import json

import numpy as np
import pytest

from backends.checkpoint.peft_adapter import AdapterError, load_peft_adapter
from backends.checkpoint.peft_writer import lora_tensor_name, random_peft_adapter, save_peft_adapter
from backends.runner_driver import tiny_config

CONFIG = tiny_config()  # hidden 48, intermediate 80, 6 heads x 8, 2 KV heads, 2 layers


def _pair(layer, module, a, b):
    return {lora_tensor_name(layer, module, "A"): a, lora_tensor_name(layer, module, "B"): b}


def test_reads_ranks_targets_and_scaling(tmp_path):
    path = random_peft_adapter(tmp_path / "a", CONFIG, rank=4, target_modules=("q_proj", "down_proj"), alpha=8)
    adapter = load_peft_adapter(path, CONFIG, max_rank=16)
    assert adapter.target_modules == ("q_proj", "down_proj")
    assert list(adapter.weights) == [(0, "q_proj"), (0, "down_proj"), (1, "q_proj"), (1, "down_proj")]
    w = adapter.weights[(1, "down_proj")]
    assert w.lora_a.shape == (4, 80) and w.lora_b.shape == (48, 4) and w.scaling == 2.0
    assert adapter.rank == 4 and adapter.num_bytes == 2 * 4 * (4 * 48 + 48 * 4 + 4 * 80 + 48 * 4)


def test_rslora_and_alpha_pattern(tmp_path):
    rng = np.random.default_rng(0)
    tensors = {
        **_pair(0, "v_proj", rng.random((4, 48), dtype=np.float32), rng.random((16, 4), dtype=np.float32)),
        **_pair(0, "up_proj", rng.random((4, 48), dtype=np.float32), rng.random((80, 4), dtype=np.float32)),
    }
    save_peft_adapter(tmp_path, tensors, 4, 8, ["v_proj", "up_proj"], use_rslora=True, alpha_pattern={"up_proj": 2})
    adapter = load_peft_adapter(tmp_path, CONFIG, max_rank=4)
    assert adapter.weights[(0, "v_proj")].scaling == 8 / 2  # alpha / sqrt(r)
    assert adapter.weights[(0, "up_proj")].scaling == 2 / 2


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda p: (p / "adapter_config.json").unlink(), "has no adapter_config.json"),
        (lambda p: (p / "adapter_model.safetensors").unlink(), "has no adapter_model.safetensors"),
        (lambda p: (p / "adapter_config.json").write_text("{not json"), "not valid JSON"),
        (lambda p: (p / "adapter_model.safetensors").write_bytes(b"\x01\x02"), "not a safetensors file"),
        (lambda p: _edit_config(p, peft_type="IA3"), "is not LORA"),
        (lambda p: _edit_config(p, use_dora=True), "use_dora"),
        (lambda p: _edit_config(p, bias="all"), "bias="),
        (lambda p: _edit_config(p, modules_to_save=["lm_head"]), "modules_to_save"),
        (lambda p: _edit_config(p, target_modules=["q_proj", "embed_tokens"]), "unknown target modules"),
    ],
)
def test_malformed_directories_are_refused(tmp_path, mutate, message):
    path = random_peft_adapter(tmp_path / "a", CONFIG, rank=4, target_modules=("q_proj",))
    mutate(path)
    with pytest.raises(AdapterError, match=message):
        load_peft_adapter(path, CONFIG, max_rank=16)


def _edit_config(path, **fields):
    config = json.loads((path / "adapter_config.json").read_text())
    config.update(fields)
    (path / "adapter_config.json").write_text(json.dumps(config))


def test_rank_above_the_maximum_is_refused(tmp_path):
    path = random_peft_adapter(tmp_path, CONFIG, rank=8, target_modules=("k_proj",))
    with pytest.raises(AdapterError, match="rank 8 exceeds the maximum LoRA rank 4"):
        load_peft_adapter(path, CONFIG, max_rank=4)


def test_adapter_for_another_base_model_is_refused(tmp_path):
    other = tiny_config(hidden_size=64)
    path = random_peft_adapter(tmp_path, other, rank=4, target_modules=("o_proj",))
    with pytest.raises(AdapterError, match="do not fit the base projection"):
        load_peft_adapter(path, CONFIG, max_rank=16)
    deeper = random_peft_adapter(
        tmp_path / "deep", tiny_config(num_hidden_layers=3), rank=4, target_modules=("q_proj",)
    )
    with pytest.raises(AdapterError, match="layer 2 but the base model has 2"):
        load_peft_adapter(deeper, CONFIG, max_rank=16)


@pytest.mark.parametrize(
    ("tensors", "message"),
    [
        ({"base_model.model.lm_head.lora_A.weight": np.zeros((4, 48), np.float32)}, "unexpected tensor"),
        (
            _pair(0, "k_proj", np.zeros((4, 48), np.float32), np.zeros((16, 4), np.float32))
            | {"base_model.model.model.layers.0.mlp.k_proj.lora_A.weight": np.zeros((4, 48), np.float32)},
            "unknown target module mlp.k_proj",
        ),
        ({lora_tensor_name(0, "q_proj", "A"): np.zeros((4, 48), np.float32)}, "lora_B is missing"),
        (_pair(0, "q_proj", np.zeros((4, 48), np.float32), np.zeros((48, 2), np.float32)), "rank 4 != lora_B rank 2"),
        (_pair(0, "q_proj", np.full((4, 48), np.nan, np.float32), np.zeros((48, 4), np.float32)), "non-finite"),
        ({}, "holds no LoRA weights"),
    ],
)
def test_bad_tensors_are_refused(tmp_path, tensors, message):
    save_peft_adapter(tmp_path, tensors, 4, 8, ["q_proj"])
    with pytest.raises(AdapterError, match=message):
        load_peft_adapter(tmp_path, CONFIG, max_rank=16)


def test_a_missing_directory_is_refused(tmp_path):
    with pytest.raises(AdapterError, match="is not a directory"):
        load_peft_adapter(tmp_path / "nope", CONFIG, max_rank=16)
