"""Write LoRA adapters in PEFT's directory format (peft_adapter.py reads them): random ones for tests and
benchmarks, without torch or peft."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from backends.checkpoint.peft_adapter import CONFIG_FILE, LORA_MODULES, WEIGHTS_FILE, module_shape
from engine.lora import LoraRequest

if TYPE_CHECKING:
    from backends.checkpoint.model_config import ModelConfig


def lora_tensor_name(layer: int, module: str, which: str) -> str:
    parent = "self_attn" if module in ("q_proj", "k_proj", "v_proj", "o_proj") else "mlp"
    return f"base_model.model.model.layers.{layer}.{parent}.{module}.lora_{which}.weight"


def save_peft_adapter(
    path: str | Path,
    tensors: dict[str, np.ndarray],
    rank: int,
    alpha: float,
    target_modules: list[str],
    **config_fields: object,
) -> Path:
    """Write ``tensors`` (PEFT names) and an adapter_config.json into directory ``path``; returns it."""
    from safetensors.numpy import save_file

    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    adapter_config = {
        "peft_type": "LORA",
        "r": rank,
        "lora_alpha": alpha,
        "target_modules": sorted(target_modules),
        "bias": "none",
        "use_rslora": False,
        "fan_in_fan_out": False,
        "alpha_pattern": {},
        "rank_pattern": {},
        **config_fields,
    }
    (path / CONFIG_FILE).write_text(json.dumps(adapter_config, indent=2), encoding="utf-8")
    save_file({k: np.ascontiguousarray(v) for k, v in tensors.items()}, str(path / WEIGHTS_FILE))
    return path


def random_peft_adapter(
    path: str | Path,
    config: ModelConfig,
    rank: int = 16,
    target_modules: tuple[str, ...] = LORA_MODULES,
    seed: int = 0,
    b_std: float = 0.02,
    alpha: float | None = None,
) -> Path:
    """A random rank-``rank`` adapter of ``config`` on ``target_modules`` in every layer (B is non-zero, so
    it changes the model, unlike a freshly initialised PEFT adapter)."""
    rng = np.random.default_rng(seed)
    tensors = {}
    for layer in range(config.num_hidden_layers):
        for module in target_modules:
            out_features, in_features = module_shape(config, module)
            lora_a = rng.standard_normal((rank, in_features), dtype=np.float32) / np.float32(np.sqrt(in_features))
            tensors[lora_tensor_name(layer, module, "A")] = lora_a
            tensors[lora_tensor_name(layer, module, "B")] = b_std * rng.standard_normal(
                (out_features, rank), dtype=np.float32
            )
    return save_peft_adapter(path, tensors, rank, 2.0 * rank if alpha is None else alpha, list(target_modules))


def random_peft_adapters(
    root: str | Path, config: ModelConfig, specs: dict[str, tuple[tuple[str, ...], int]], seed: int, b_std: float = 0.3
) -> dict[str, LoraRequest]:
    """One random adapter per ``specs`` entry (name -> (target modules, rank)) in ``root/name``, seeded
    ``seed``, ``seed + 1``, … in order, each as the LoraRequest that serves it under its name."""
    return {
        name: LoraRequest(name, str(random_peft_adapter(Path(root) / name, config, rank, targets, seed + i, b_std)))
        for i, (name, (targets, rank)) in enumerate(specs.items())
    }
