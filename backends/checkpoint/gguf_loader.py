"""Llama checkpoints in llama.cpp's GGUF format: config from the metadata, tensors dequantized on access."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import gguf
import numpy as np

from backends.checkpoint.llama_layout import hf_name_from_gguf, llama_tensor_shapes, unpermute_from_gguf
from backends.checkpoint.model_config import ModelConfig
from backends.checkpoint.tokenizer import Tokenizer

# GGUF tensors that have no Hugging Face counterpart and are folded into the config instead.
_CONFIG_ONLY_TENSORS = frozenset({"rope_freqs.weight"})
_QUANT_SUFFIX = re.compile(r"[.-](?:I?Q\d\w*|[BF]F?16|F32|FP16|FP32)$", re.IGNORECASE)


class GGUFTensors:
    """The model's tensors by Hugging Face name, read from a `gguf.GGUFReader`'s memory map.

    `get_tensor` dequantizes one tensor per call (nothing is read up front) and returns a fresh float32
    array in HF layout, with q_proj/k_proj rows un-permuted back to HF's half-split RoPE order.
    """

    def __init__(self, reader: gguf.GGUFReader, config: ModelConfig) -> None:
        self._config = config
        self._shapes = llama_tensor_shapes(config)
        self._tensors: dict[str, Any] = {}
        for tensor in reader.tensors:
            hf_name = hf_name_from_gguf(tensor.name)
            if hf_name is None:
                if tensor.name in _CONFIG_ONLY_TENSORS:
                    continue
                raise ValueError(f"unsupported tensor {tensor.name!r} in a llama GGUF (biases are not supported)")
            if hf_name not in self._shapes:
                raise ValueError(f"tensor {tensor.name!r} does not belong to a model with this config")
            shape = tuple(int(dim) for dim in reversed(tensor.shape))
            if shape != self._shapes[hf_name]:
                raise ValueError(f"tensor {tensor.name!r} has shape {shape}, expected {self._shapes[hf_name]}")
            self._tensors[hf_name] = tensor
        missing = [name for name in self._shapes if name not in self._tensors]
        if missing:
            raise ValueError(f"the GGUF lacks {len(missing)} tensors, e.g. {missing[:3]}")

    def tensor_names(self) -> list[str]:
        return list(self._shapes)

    def get_tensor(self, name: str) -> np.ndarray:
        tensor = self._tensors.get(name)
        if tensor is None:
            raise KeyError(f"no tensor {name!r}; see tensor_names()")
        try:
            values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        except NotImplementedError as error:
            raise ValueError(f"cannot dequantize {tensor.name!r} of type {tensor.tensor_type.name}: {error}") from error
        weight = np.asarray(values, dtype=np.float32).reshape(self._shapes[name])
        if name.endswith("self_attn.q_proj.weight"):
            weight = unpermute_from_gguf(weight, self._config.num_attention_heads)
        elif name.endswith("self_attn.k_proj.weight"):
            weight = unpermute_from_gguf(weight, self._config.num_key_value_heads)
        if not weight.flags.writeable or not weight.flags.c_contiguous:
            weight = np.array(weight, dtype=np.float32, order="C")
        return weight


def open_gguf(path: Path) -> tuple[ModelConfig, Tokenizer, GGUFTensors]:
    """Config, tokenizer and lazy tensors of a llama GGUF file."""
    try:
        reader = gguf.GGUFReader(path)
    except ValueError as error:
        raise ValueError(f"{path} is not a readable GGUF file: {error}") from error
    config = config_from_gguf(reader, name=_model_name(path, reader))
    return config, Tokenizer.from_gguf(reader), GGUFTensors(reader, config)


def config_from_gguf(reader: gguf.GGUFReader, name: str) -> ModelConfig:
    """A ModelConfig from `{arch}.*` metadata; the head is tied when the file has no output.weight."""
    architecture = _field(reader, "general.architecture")
    if architecture != "llama":
        raise ValueError(f"unsupported architecture {architecture!r} in GGUF; only 'llama' is supported")

    def required(key: str) -> Any:
        value = _field(reader, f"llama.{key}")
        if value is None:
            raise ValueError(f"the GGUF has no llama.{key} metadata")
        return value

    tensor_names = {tensor.name for tensor in reader.tensors}
    hidden_size = int(required("embedding_length"))
    num_heads = int(required("attention.head_count"))
    head_dim = int(_field(reader, "llama.attention.key_length") or hidden_size // num_heads)
    rope_dims = _field(reader, "llama.rope.dimension_count")
    if rope_dims is not None and int(rope_dims) != head_dim:
        raise ValueError(f"partial rotary embeddings (rope.dimension_count {rope_dims} != head_dim {head_dim})")
    vocab_size = _field(reader, "llama.vocab_size")
    if vocab_size is None:
        tokens = reader.get_field("tokenizer.ggml.tokens")
        if tokens is None:
            raise ValueError("the GGUF has neither llama.vocab_size nor tokenizer.ggml.tokens")
        vocab_size = len(tokens.data)
    rope_theta = _round_f32(float(_field(reader, "llama.rope.freq_base") or 10000.0))
    rope_freqs = next((tensor for tensor in reader.tensors if tensor.name == "rope_freqs.weight"), None)
    return ModelConfig(
        name=name,
        vocab_size=int(vocab_size),
        hidden_size=hidden_size,
        intermediate_size=int(required("feed_forward_length")),
        num_hidden_layers=int(required("block_count")),
        num_attention_heads=num_heads,
        num_key_value_heads=int(_field(reader, "llama.attention.head_count_kv") or num_heads),
        head_dim=head_dim,
        rms_norm_eps=_round_f32(float(required("attention.layer_norm_rms_epsilon"))),
        rope_theta=rope_theta,
        rope_scaling=_rope_scaling(reader, rope_freqs, head_dim, rope_theta),
        max_position_embeddings=int(required("context_length")),
        tie_word_embeddings="output.weight" not in tensor_names,
        bos_token_id=_optional_int(_field(reader, "tokenizer.ggml.bos_token_id")),
        eos_token_id=_optional_int(_field(reader, "tokenizer.ggml.eos_token_id")),
    )


def _rope_scaling(reader: gguf.GGUFReader, rope_freqs: Any, head_dim: int, rope_theta: float) -> dict | None:
    """HF-style rope_scaling from llama.rope.scaling.* (or the legacy rope.scale_linear), else from a
    rope_freqs.weight tensor (how llama.cpp stores Llama 3.1+ scaling), else None."""
    scaling_type = _field(reader, "llama.rope.scaling.type")
    factor = _field(reader, "llama.rope.scaling.factor")
    original_context = _field(reader, "llama.rope.scaling.original_context_length")
    if scaling_type is None and _field(reader, "llama.rope.scale_linear") is not None:
        scaling_type, factor = "linear", _field(reader, "llama.rope.scale_linear")
    if scaling_type in (None, "none"):
        if rope_freqs is None:
            return None
        factors = np.asarray(gguf.quants.dequantize(rope_freqs.data, rope_freqs.tensor_type), dtype=np.float64)
        return llama3_scaling_from_rope_freqs(factors.reshape(-1), head_dim, rope_theta, original_context)
    if scaling_type == "linear":
        return {"rope_type": "linear", "factor": float(factor)}
    if scaling_type == "yarn":
        scaling = {"rope_type": "yarn", "factor": float(factor)}
        if original_context is not None:
            scaling["original_max_position_embeddings"] = int(original_context)
        for key in ("beta_fast", "beta_slow"):
            value = _field(reader, f"llama.rope.scaling.yarn_{key}")
            if value is not None:
                scaling[key] = float(value)
        return scaling
    if scaling_type == "llama3":
        return {
            "rope_type": "llama3",
            "factor": float(factor),
            "low_freq_factor": float(_field(reader, "llama.rope.scaling.low_freq_factor")),
            "high_freq_factor": float(_field(reader, "llama.rope.scaling.high_freq_factor")),
            "original_max_position_embeddings": int(original_context),
        }
    raise ValueError(f"unsupported llama.rope.scaling.type {scaling_type!r} in GGUF")


def llama3_rope_factors(
    head_dim: int, rope_theta: float, factor: float, low_freq_factor: float, high_freq_factor: float, original: int
) -> np.ndarray:
    """llama.cpp's rope_freqs (per-frequency divisors, [head_dim/2]) for Llama 3 scaling (convert_hf_to_gguf.py)."""
    inv_freq = 1.0 / rope_theta ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    wavelen = 2 * math.pi / inv_freq
    smooth = (original / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    medium = 1.0 / ((1.0 - smooth) / factor + smooth)
    return np.where(
        wavelen < original / high_freq_factor, 1.0, np.where(wavelen > original / low_freq_factor, factor, medium)
    )


def llama3_scaling_from_rope_freqs(
    factors: np.ndarray, head_dim: int, rope_theta: float, original_context: int | None
) -> dict | None:
    """The llama3 rope_scaling whose rope_freqs equal `factors`, searched over the values Llama 3.x uses.

    GGUF keeps only the resulting per-frequency divisors, not low/high_freq_factor; this recovers them and
    raises ValueError when no candidate reproduces the tensor (rather than running with the wrong RoPE).
    """
    if factors.shape != (head_dim // 2,):
        raise ValueError(f"rope_freqs.weight has shape {factors.shape}, expected ({head_dim // 2},)")
    if np.allclose(factors, 1.0):
        return None
    factor = float(factors.max())
    contexts = [int(original_context)] if original_context else [2**k for k in range(11, 18)]
    # (original, low, high) and (k*original, k*low, k*high) give the same RoPE; low=1 (Llama 3.x's) comes first.
    for low, high in ((1.0, 4.0), (1.0, 2.0), (1.0, 8.0), (0.5, 4.0), (2.0, 4.0), (2.0, 8.0)):
        for original in contexts:
            candidate = llama3_rope_factors(head_dim, rope_theta, factor, low, high, original)
            if np.allclose(candidate, factors, rtol=1e-5, atol=1e-6):
                return {
                    "rope_type": "llama3",
                    "factor": factor,
                    "low_freq_factor": low,
                    "high_freq_factor": high,
                    "original_max_position_embeddings": original,
                }
    raise ValueError("rope_freqs.weight does not match any llama3 rope scaling; this RoPE variant is unsupported")


def _model_name(path: Path, reader: gguf.GGUFReader) -> str:
    """The file name without ".gguf" and its quantization suffix ("SmolLM2-135M-Instruct.Q4_1.gguf" ->
    "SmolLM2-135M-Instruct"); general.name if that leaves nothing."""
    stem = _QUANT_SUFFIX.sub("", Path(path).stem)
    return stem or str(_field(reader, "general.name") or "gguf-model")


def _field(reader: gguf.GGUFReader, key: str) -> Any:
    field = reader.get_field(key)
    return None if field is None else field.contents()


def _optional_int(value: Any) -> int | None:
    return None if value is None else int(value)


def _round_f32(value: float) -> float:
    """GGUF stores eps as float32 (1e-5 reads 9.99999974e-06); the shortest decimal that rounds to the same f32."""
    as_f32 = np.float32(value)
    for digits in range(1, 10):
        rounded = float(f"{value:.{digits}g}")
        if np.float32(rounded) == as_f32:
            return rounded
    return value
