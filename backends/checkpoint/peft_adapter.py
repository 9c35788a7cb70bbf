"""LoRA adapters in PEFT's directory format, read without torch and checked against the base model.

A PEFT LoRA directory (what ``PeftModel.save_pretrained`` writes, https://github.com/huggingface/peft)::

    adapter_config.json         {"peft_type": "LORA", "r": 16, "lora_alpha": 32, "target_modules": [...],
                                 "use_rslora": false, "alpha_pattern": {}, "rank_pattern": {}, ...}
    adapter_model.safetensors   base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight  [r, in]
                                base_model.model.model.layers.{i}.self_attn.q_proj.lora_B.weight  [out, r]

A targeted projection computes ``W x + scaling * B (A x)`` with ``scaling = alpha / r`` (``alpha / sqrt(r)``
with rsLoRA), as peft's ``LoraLayer.update_layer`` defines it (peft 0.21, src/peft/tuners/lora/layer.py).
Per-module rank and alpha may differ (``rank_pattern`` / ``alpha_pattern``, matched as peft's
``get_pattern_key`` does: the key is a suffix of the module name after a dot). The rank is read from the
tensors; the alpha from the pattern when one matches, else ``lora_alpha``.

Refused with an ``AdapterError`` naming the problem: a missing or malformed file, another PEFT method, DoRA,
LoRA biases, ``modules_to_save``/trainable tokens (they replace base weights, not add to them), a module
outside q/k/v/o/gate/up/down, a layer the base model lacks, a shape that does not fit the base model, a lone
``lora_A`` or ``lora_B``, and a rank above ``max_rank``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from backends.checkpoint.safetensors_file import SafetensorsFile

if TYPE_CHECKING:
    from backends.checkpoint.model_config import ModelConfig

CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"

# the projections a LoRA adapter may target, in the order the backends keep them
LORA_MODULES: tuple[str, ...] = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_PARENT = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn"}
_TENSOR_NAME = re.compile(
    r"base_model\.model\.model\.layers\.(\d+)\.(self_attn|mlp)\.(\w+)\.lora_([AB])(?:\.[\w-]+)?\.weight"
)
# config keys that, when set, mean the adapter does more than add B @ A to a projection
_UNSUPPORTED_TRUTHY = (
    "use_dora",
    "lora_bias",
    "fan_in_fan_out",
    "modules_to_save",
    "layer_replication",
    "trainable_token_indices",
    "target_parameters",
    "alora_invocation_tokens",
    "use_bdlora",
)


class AdapterError(ValueError):
    """An adapter that cannot be served on this base model; the message says why."""


@dataclass(frozen=True, slots=True)
class LoraWeights:
    """One targeted projection: ``delta(x) = scaling * (x @ lora_a.T) @ lora_b.T``."""

    lora_a: np.ndarray  # [r, in] float32
    lora_b: np.ndarray  # [out, r] float32
    scaling: float

    @property
    def rank(self) -> int:
        return self.lora_a.shape[0]


@dataclass(frozen=True, slots=True)
class PeftAdapter:
    """A checked adapter in host RAM. ``weights[(layer, module)]`` for every targeted projection."""

    path: Path
    weights: dict[tuple[int, str], LoraWeights]

    @property
    def rank(self) -> int:
        """The largest rank of any module (what a device slot must hold)."""
        return max(w.rank for w in self.weights.values())

    @property
    def target_modules(self) -> tuple[str, ...]:
        targeted = {module for _, module in self.weights}
        return tuple(m for m in LORA_MODULES if m in targeted)

    @property
    def num_bytes(self) -> int:
        return sum(w.lora_a.nbytes + w.lora_b.nbytes for w in self.weights.values())


def module_shape(config: ModelConfig, module: str) -> tuple[int, int]:
    """(out, in) of a base projection, Hugging Face layout."""
    hidden, inter = config.hidden_size, config.intermediate_size
    q_size = config.num_attention_heads * config.head_dim
    kv_size = config.num_key_value_heads * config.head_dim
    return {
        "q_proj": (q_size, hidden),
        "k_proj": (kv_size, hidden),
        "v_proj": (kv_size, hidden),
        "o_proj": (hidden, q_size),
        "gate_proj": (inter, hidden),
        "up_proj": (inter, hidden),
        "down_proj": (hidden, inter),
    }[module]


def load_peft_adapter(path: str | Path, config: ModelConfig, max_rank: int) -> PeftAdapter:
    """Read and check the PEFT LoRA directory ``path`` against ``config``; raises AdapterError."""
    path = Path(path)
    if not path.is_dir():
        raise AdapterError(f"LoRA adapter {str(path)!r} is not a directory")
    adapter_config = _read_config(path)
    weights_file = path / WEIGHTS_FILE
    if not weights_file.is_file():
        raise AdapterError(f"LoRA adapter {str(path)!r} has no {WEIGHTS_FILE}")
    try:
        tensors = SafetensorsFile(weights_file)
        pairs = _pair_tensors(tensors, config)
        weights = {
            key: _module_weights(tensors, key, names, adapter_config, config, max_rank) for key, names in pairs.items()
        }
    except AdapterError:
        raise
    except (ValueError, KeyError, OSError) as error:
        raise AdapterError(f"LoRA adapter {str(path)!r}: {error}") from error
    if not weights:
        raise AdapterError(f"LoRA adapter {str(path)!r} holds no LoRA weights")
    return PeftAdapter(path, weights)


def check_peft_directory(path: str | Path) -> None:
    """AdapterError unless ``path`` is a PEFT LoRA directory with a usable config and a weights file (what
    can be checked without the base model's shapes)."""
    path = Path(path)
    if not path.is_dir():
        raise AdapterError(f"LoRA adapter {str(path)!r} is not a directory")
    _read_config(path)
    if not (path / WEIGHTS_FILE).is_file():
        raise AdapterError(f"LoRA adapter {str(path)!r} has no {WEIGHTS_FILE}")


def _read_config(path: Path) -> dict:
    config_file = path / CONFIG_FILE
    if not config_file.is_file():
        raise AdapterError(f"LoRA adapter {str(path)!r} has no {CONFIG_FILE}")
    try:
        adapter_config = json.loads(config_file.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise AdapterError(f"{config_file} is not valid JSON: {error}") from error
    if not isinstance(adapter_config, dict):
        raise AdapterError(f"{config_file} must hold a JSON object")
    if adapter_config.get("peft_type", "LORA") != "LORA":
        raise AdapterError(f"{config_file}: peft_type {adapter_config.get('peft_type')!r} is not LORA")
    for key in _UNSUPPORTED_TRUTHY:
        if adapter_config.get(key):
            raise AdapterError(f"{config_file}: {key}={adapter_config[key]!r} is not supported")
    if adapter_config.get("bias", "none") != "none":
        raise AdapterError(f"{config_file}: bias={adapter_config['bias']!r} is not supported (only 'none')")
    targets = adapter_config.get("target_modules")
    if isinstance(targets, list):
        unknown = sorted(set(targets) - set(LORA_MODULES))
        if unknown:
            raise AdapterError(f"{config_file}: unknown target modules {unknown}; supported: {list(LORA_MODULES)}")
    alpha = adapter_config.get("lora_alpha", 8)
    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not math.isfinite(alpha):
        raise AdapterError(f"{config_file}: lora_alpha must be a number, got {alpha!r}")
    for key in ("alpha_pattern", "rank_pattern"):
        if not isinstance(adapter_config.get(key) or {}, dict):
            raise AdapterError(f"{config_file}: {key} must be an object")
    return adapter_config


def _pair_tensors(tensors: SafetensorsFile, config: ModelConfig) -> dict[tuple[int, str], dict[str, str]]:
    """{(layer, module): {"A": name, "B": name}}; every tensor must be a LoRA A/B of a known projection."""
    pairs: dict[tuple[int, str], dict[str, str]] = {}
    for name in tensors.tensor_names():
        match = _TENSOR_NAME.fullmatch(name)
        if match is None:
            raise AdapterError(f"unexpected tensor {name!r} (only LoRA A/B of q/k/v/o/gate/up/down are supported)")
        layer, parent, module, which = int(match.group(1)), match.group(2), match.group(3), match.group(4)
        if module not in LORA_MODULES or _PARENT.get(module, "mlp") != parent:
            raise AdapterError(f"tensor {name!r}: unknown target module {parent}.{module}")
        if layer >= config.num_hidden_layers:
            raise AdapterError(f"tensor {name!r}: layer {layer} but the base model has {config.num_hidden_layers}")
        slot = pairs.setdefault((layer, module), {})
        if which in slot:
            raise AdapterError(f"tensor {name!r}: a second lora_{which} for layer {layer} {module}")
        slot[which] = name
    for (layer, module), slot in pairs.items():
        if len(slot) != 2:
            missing = "B" if "A" in slot else "A"
            raise AdapterError(f"layer {layer} {module}: lora_{missing} is missing")
    return dict(sorted(pairs.items(), key=lambda kv: (kv[0][0], LORA_MODULES.index(kv[0][1]))))


def _module_weights(
    tensors: SafetensorsFile,
    key: tuple[int, str],
    names: dict[str, str],
    adapter_config: dict,
    config: ModelConfig,
    max_rank: int,
) -> LoraWeights:
    layer, module = key
    out_features, in_features = module_shape(config, module)
    a_shape, b_shape = tensors.shape(names["A"]), tensors.shape(names["B"])
    if len(a_shape) != 2 or len(b_shape) != 2 or a_shape[1] != in_features or b_shape[0] != out_features:
        raise AdapterError(
            f"layer {layer} {module}: lora_A {a_shape} / lora_B {b_shape} do not fit the base projection "
            f"[{out_features}, {in_features}] (expected [r, {in_features}] and [{out_features}, r])"
        )
    rank = a_shape[0]
    if b_shape[1] != rank or rank < 1:
        raise AdapterError(f"layer {layer} {module}: lora_A rank {rank} != lora_B rank {b_shape[1]}")
    if rank > max_rank:
        raise AdapterError(f"layer {layer} {module}: rank {rank} exceeds the maximum LoRA rank {max_rank}")
    module_name = f"model.layers.{layer}.{_PARENT.get(module, 'mlp')}.{module}"
    alpha = adapter_config.get("lora_alpha", 8)
    alpha_pattern = adapter_config.get("alpha_pattern") or {}
    for pattern, value in alpha_pattern.items():
        if re.match(rf"(.*\.)?({pattern})$", module_name):
            alpha = value
            break
    scaling = alpha / math.sqrt(rank) if adapter_config.get("use_rslora") else alpha / rank
    lora_a, lora_b = tensors.get_float32(names["A"]), tensors.get_float32(names["B"])
    if not (np.isfinite(lora_a).all() and np.isfinite(lora_b).all()):
        raise AdapterError(f"layer {layer} {module}: non-finite LoRA weights")
    return LoraWeights(lora_a, lora_b, float(scaling))
