"""Llama checkpoints as Hugging Face directories: config.json, *.safetensors (maybe sharded), tokenizer.json."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from backends.checkpoint.llama_layout import llama_tensor_shapes
from backends.checkpoint.model_config import ModelConfig
from backends.checkpoint.safetensors_file import SafetensorsFile
from backends.checkpoint.tokenizer import Tokenizer

_SHARD_INDEX = "model.safetensors.index.json"


class SafetensorsTensors:
    """The model's tensors by Hugging Face name across one or more safetensors shards.

    `get_tensor` reads one tensor per call from the shard's memory map and returns a fresh float32 array.
    Tensors the model does not use (e.g. rotary_emb.inv_freq, or lm_head.weight when tied) are ignored.
    """

    def __init__(self, shard_paths: list[Path], config: ModelConfig) -> None:
        self._shapes = llama_tensor_shapes(config)
        self._files: dict[str, SafetensorsFile] = {}
        for shard_path in shard_paths:
            shard = SafetensorsFile(shard_path)
            for name in shard.tensor_names():
                if name in self._shapes:
                    self._files[name] = shard
        missing = [name for name in self._shapes if name not in self._files]
        if missing:
            raise ValueError(f"the checkpoint lacks {len(missing)} tensors, e.g. {missing[:3]}")
        for name, expected in self._shapes.items():
            shape = self._files[name].shape(name)
            if shape != expected:
                raise ValueError(f"tensor {name!r} has shape {shape}, expected {expected}")

    def tensor_names(self) -> list[str]:
        return list(self._shapes)

    def get_tensor(self, name: str) -> np.ndarray:
        shard = self._files.get(name)
        if shard is None:
            raise KeyError(f"no tensor {name!r}; see tensor_names()")
        return shard.get_float32(name)


def open_hf_dir(path: Path) -> tuple[ModelConfig, Tokenizer, SafetensorsTensors]:
    """Config, tokenizer and lazy tensors of a Hugging Face Llama checkpoint directory."""
    config_file = path / "config.json"
    if not config_file.is_file():
        hint = " (it holds .gguf files: pass the .gguf file itself)" if any(path.glob("*.gguf")) else ""
        raise FileNotFoundError(
            f"{path} has no config.json; a Hugging Face checkpoint directory needs config.json, "
            f"*.safetensors and tokenizer.json{hint}"
        )
    with config_file.open(encoding="utf-8") as file:
        config = ModelConfig.from_hf_dict(json.load(file), name=path.resolve().name)
    tensors = SafetensorsTensors(_shard_paths(path), config)
    return config, Tokenizer.from_hf_dir(path), tensors


def _shard_paths(path: Path) -> list[Path]:
    """The shards named by model.safetensors.index.json, else every *.safetensors in the directory."""
    index_file = path / _SHARD_INDEX
    if index_file.is_file():
        with index_file.open(encoding="utf-8") as file:
            weight_map: dict[str, str] = json.load(file).get("weight_map", {})
        shards = [path / shard for shard in dict.fromkeys(weight_map.values())]
        absent = [shard.name for shard in shards if not shard.is_file()]
        if absent:
            raise FileNotFoundError(f"{_SHARD_INDEX} in {path} names missing shards: {absent}")
        return shards
    shards = sorted(path.glob("*.safetensors"))
    if not shards:
        raise FileNotFoundError(
            f"{path} has no *.safetensors weights (pytorch_model.bin checkpoints are not supported)"
        )
    return shards
