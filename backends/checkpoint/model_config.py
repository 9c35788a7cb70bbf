"""The architecture of a Llama-family decoder, independent of the file format it was read from."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

# rope_scaling["rope_type"] values and the keys each one needs (Hugging Face naming).
_ROPE_SCALING_KEYS: dict[str, tuple[str, ...]] = {
    "linear": ("factor",),
    "dynamic": ("factor",),
    "yarn": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
}


@dataclass(frozen=True, slots=True)
class ModelConfig:
    """Shapes and hyper-parameters of a Llama decoder.

    Contract: every size is a positive int; `num_attention_heads` is a multiple of `num_key_value_heads`;
    `rope_scaling` is None or a Hugging Face style dict whose "rope_type" is one of linear/dynamic/yarn/llama3
    (a copy is stored, so mutating the caller's dict does not change the config). Because it holds a dict the
    config is not hashable.
    """

    name: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    bos_token_id: int | None
    eos_token_id: int | None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name must be a non-empty string, got {self.name!r}")
        for size_field in (
            "vocab_size",
            "hidden_size",
            "intermediate_size",
            "num_hidden_layers",
            "num_attention_heads",
            "num_key_value_heads",
            "head_dim",
            "max_position_embeddings",
        ):
            value = getattr(self, size_field)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{size_field} must be a positive int, got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads != 0:
            raise ValueError(
                f"num_attention_heads ({self.num_attention_heads}) must be a multiple of "
                f"num_key_value_heads ({self.num_key_value_heads})"
            )
        if self.head_dim % 2 != 0:
            raise ValueError(f"head_dim must be even for rotary embeddings, got {self.head_dim}")
        for float_field in ("rms_norm_eps", "rope_theta"):
            value = getattr(self, float_field)
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{float_field} must be a positive finite number, got {value!r}")
            object.__setattr__(self, float_field, float(value))
        if not isinstance(self.tie_word_embeddings, bool):
            raise ValueError(f"tie_word_embeddings must be a bool, got {self.tie_word_embeddings!r}")
        for id_field in ("bos_token_id", "eos_token_id"):
            value = getattr(self, id_field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < self.vocab_size:
                raise ValueError(
                    f"{id_field} must be None or an int in [0, vocab_size={self.vocab_size}), got {value!r}"
                )
        object.__setattr__(self, "rope_scaling", _validated_rope_scaling(self.rope_scaling))

    @property
    def num_params(self) -> int:
        """Parameters of the Llama layout (backends/checkpoint/llama_layout.py): embeddings (+ an untied head),
        per layer QKV, O, gate+up, down and two norms, and the final norm; no biases."""
        h, inter, hd = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.num_attention_heads * hd, self.num_key_value_heads * hd
        per_layer = h * (q + 2 * kv) + q * h + 3 * h * inter + 2 * h
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return embeddings + self.num_hidden_layers * per_layer + h

    @property
    def num_queries_per_kv(self) -> int:
        return self.num_attention_heads // self.num_key_value_heads

    @classmethod
    def from_hf_dict(cls, hf: dict[str, Any], name: str) -> ModelConfig:
        """Build from a Hugging Face `config.json` dict of a Llama model.

        Missing optional keys take LlamaConfig's defaults (head_dim = hidden/heads, kv heads = heads,
        tie_word_embeddings False). Both the legacy `rope_theta`/`rope_scaling` keys and transformers 5's
        `rope_parameters` are read. A list `eos_token_id` keeps its first entry.
        """
        model_type = hf.get("model_type")
        architectures = hf.get("architectures") or []
        if model_type != "llama" and "LlamaForCausalLM" not in architectures:
            raise ValueError(
                f"unsupported architecture: model_type={model_type!r}, architectures={architectures!r}; "
                "only Llama-family checkpoints (model_type 'llama') are supported"
            )
        for unsupported in ("attention_bias", "mlp_bias"):
            if hf.get(unsupported):
                raise ValueError(f"unsupported Llama variant: config.json sets {unsupported}=true")
        missing = [
            key
            for key in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
            if key not in hf
        ]
        if missing:
            raise ValueError(f"config.json is missing required keys: {', '.join(missing)}")

        rope_params = dict(hf.get("rope_parameters") or {})
        rope_theta = hf.get("rope_theta", rope_params.pop("rope_theta", 10000.0))
        rope_scaling = hf.get("rope_scaling")
        if rope_scaling is None and rope_params.get("rope_type", rope_params.get("type", "default")) != "default":
            rope_scaling = rope_params
        eos_token_id = hf.get("eos_token_id", 2)
        if isinstance(eos_token_id, list):
            eos_token_id = eos_token_id[0] if eos_token_id else None
        num_attention_heads = hf["num_attention_heads"]
        return cls(
            name=name,
            vocab_size=hf["vocab_size"],
            hidden_size=hf["hidden_size"],
            intermediate_size=hf["intermediate_size"],
            num_hidden_layers=hf["num_hidden_layers"],
            num_attention_heads=num_attention_heads,
            num_key_value_heads=hf.get("num_key_value_heads") or num_attention_heads,
            head_dim=hf.get("head_dim") or hf["hidden_size"] // num_attention_heads,
            rms_norm_eps=hf.get("rms_norm_eps", 1e-6),
            rope_theta=rope_theta,
            rope_scaling=rope_scaling,
            max_position_embeddings=hf.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            bos_token_id=hf.get("bos_token_id", 1),
            eos_token_id=eos_token_id,
        )

    def to_hf_dict(self) -> dict[str, Any]:
        """A Hugging Face `config.json` dict (LlamaForCausalLM, float32) that `from_hf_dict` reads back."""
        return {
            "architectures": ["LlamaForCausalLM"],
            "model_type": "llama",
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_hidden_layers,
            "num_attention_heads": self.num_attention_heads,
            "num_key_value_heads": self.num_key_value_heads,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": None if self.rope_scaling is None else dict(self.rope_scaling),
            "max_position_embeddings": self.max_position_embeddings,
            "tie_word_embeddings": self.tie_word_embeddings,
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "torch_dtype": "float32",
        }


def _validated_rope_scaling(rope_scaling: Any) -> dict | None:
    """A copy of `rope_scaling` with "rope_type" set (legacy "type" accepted); None for no/default scaling."""
    if rope_scaling is None:
        return None
    if not isinstance(rope_scaling, dict):
        raise ValueError(f"rope_scaling must be None or a dict, got {type(rope_scaling).__name__}")
    scaling = dict(rope_scaling)
    rope_type = scaling.get("rope_type", scaling.get("type"))
    if rope_type == "default":
        return None
    if rope_type not in _ROPE_SCALING_KEYS:
        raise ValueError(
            f"rope_scaling has unsupported rope_type {rope_type!r}; supported: {sorted(_ROPE_SCALING_KEYS)}"
        )
    scaling["rope_type"] = rope_type
    missing = [key for key in _ROPE_SCALING_KEYS[rope_type] if key not in scaling]
    if missing:
        raise ValueError(f"rope_scaling of rope_type {rope_type!r} is missing {', '.join(missing)}")
    return scaling
