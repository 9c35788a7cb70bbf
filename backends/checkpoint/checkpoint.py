"""A loaded checkpoint: config, tokenizer and lazily read float32 tensors, whatever the file format."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np
from tqdm import tqdm

from backends.checkpoint.gguf_loader import open_gguf
from backends.checkpoint.hf_loader import open_hf_dir
from backends.checkpoint.locate import default_model_path
from backends.checkpoint.model_config import ModelConfig
from backends.checkpoint.tokenizer import Tokenizer


class TensorSource(Protocol):
    """Tensors by Hugging Face name, each read (and dequantized) only when asked for."""

    def tensor_names(self) -> list[str]: ...

    def get_tensor(self, name: str) -> np.ndarray: ...


class Checkpoint:
    """A Llama checkpoint in Hugging Face naming and layout, returned as numpy (never torch).

    Tensor contract: float32, C-contiguous, owned by the caller (safe to modify); Linear weights are
    [out_features, in_features]; q_proj/k_proj rows are in HF's half-split RoPE order, so `rotate_half`
    RoPE is exact. Names, in load order:

        model.embed_tokens.weight                      [vocab, hidden]
        model.layers.{i}.input_layernorm.weight        [hidden]
        model.layers.{i}.self_attn.{q,k,v,o}_proj.weight
        model.layers.{i}.post_attention_layernorm.weight
        model.layers.{i}.mlp.{gate,up,down}_proj.weight
        model.norm.weight                              [hidden]
        lm_head.weight                                 [vocab, hidden]  only when not tied
    """

    def __init__(self, config: ModelConfig, tokenizer: Tokenizer, path: Path, source: TensorSource, format: str):
        self.config = config
        self.tokenizer = tokenizer
        self.path = path
        self.format = format
        self._source = source

    def __repr__(self) -> str:
        return f"Checkpoint({self.config.name!r}, format={self.format!r}, path={str(self.path)!r})"

    def tensor_names(self) -> list[str]:
        return self._source.tensor_names()

    def get_tensor(self, name: str) -> np.ndarray:
        return self._source.get_tensor(name)

    def iter_tensors(self, progress: bool = True) -> Iterator[tuple[str, np.ndarray]]:
        """Every tensor in load order, one at a time; a tqdm bar on stderr when `progress`."""
        names = self.tensor_names()
        with tqdm(
            total=len(names), desc=f"loading {self.config.name}", unit="tensor", file=sys.stderr, disable=not progress
        ) as bar:
            for name in names:
                tensor = self.get_tensor(name)
                bar.update(1)
                yield name, tensor


def load_checkpoint(path: str | Path | None = None) -> Checkpoint:
    """Open a checkpoint: None -> the default model; a .gguf file; or a Hugging Face directory
    (config.json + *.safetensors + tokenizer.json). Only Llama-architecture models are supported.

    Raises FileNotFoundError when the path or a required file is missing, ValueError when the format or
    architecture is unsupported or the contents are inconsistent.
    """
    resolved = default_model_path() if path is None else Path(path).expanduser()
    if not resolved.exists():
        raise FileNotFoundError(f"no checkpoint at {resolved}")
    if resolved.is_dir():
        config, tokenizer, source = open_hf_dir(resolved)
        return Checkpoint(config, tokenizer, resolved, source, format="hf")
    if resolved.suffix.lower() == ".gguf":
        config, tokenizer, source = open_gguf(resolved)
        return Checkpoint(config, tokenizer, resolved, source, format="gguf")
    raise ValueError(
        f"unsupported checkpoint file {resolved}: expected a .gguf file or a Hugging Face directory "
        "(config.json + *.safetensors + tokenizer.json)"
    )
