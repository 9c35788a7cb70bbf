"""Fill a LlamaModel from Hugging Face Llama tensor names, one tensor at a time.

Parameters are allocated uninitialised by the model; each source tensor (numpy fp32 from a
Checkpoint, or a torch tensor) is copied straight into its slot, converting dtype on the way, so
peak extra memory is one tensor. Fusions::

    q_proj | k_proj | v_proj  -> layers.{i}.qkv_proj      rows [0, H*D) | [H*D, (H+Hkv)*D) | rest
    gate_proj | up_proj       -> layers.{i}.gate_up_proj  rows [0, I) | [I, 2I)
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from backends.torch.model import LlamaModel
from backends.torch.tp_shard import shard_tensors

_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")


def _target(model: LlamaModel, name: str) -> torch.Tensor:
    """The (slice of the) parameter that HF tensor ``name`` fills."""
    if name == "model.embed_tokens.weight":
        return model.embed_tokens
    if name == "model.norm.weight":
        return model.norm.weight
    if name == "lm_head.weight":
        return model.lm_head
    m = _LAYER.fullmatch(name)
    if m is None:
        raise KeyError(name)
    layer = model.layers[int(m.group(1))]
    q, kv, inter = layer.q_size, layer.kv_size, layer.intermediate_size
    slots = {
        "self_attn.q_proj.weight": lambda: layer.qkv_proj[:q],
        "self_attn.k_proj.weight": lambda: layer.qkv_proj[q : q + kv],
        "self_attn.v_proj.weight": lambda: layer.qkv_proj[q + kv :],
        "self_attn.o_proj.weight": lambda: layer.o_proj,
        "mlp.gate_proj.weight": lambda: layer.gate_up_proj[:inter],
        "mlp.up_proj.weight": lambda: layer.gate_up_proj[inter:],
        "mlp.down_proj.weight": lambda: layer.down_proj,
        "input_layernorm.weight": lambda: layer.input_layernorm.weight,
        "post_attention_layernorm.weight": lambda: layer.post_attention_layernorm.weight,
    }
    if m.group(2) not in slots:
        raise KeyError(name)
    return slots[m.group(2)]()


def expected_tensor_names(config: Any) -> set[str]:
    names = {"model.embed_tokens.weight", "model.norm.weight"}
    if not config.tie_word_embeddings:
        names.add("lm_head.weight")
    per_layer = (
        "self_attn.q_proj.weight",
        "self_attn.k_proj.weight",
        "self_attn.v_proj.weight",
        "self_attn.o_proj.weight",
        "mlp.gate_proj.weight",
        "mlp.up_proj.weight",
        "mlp.down_proj.weight",
        "input_layernorm.weight",
        "post_attention_layernorm.weight",
    )
    for i in range(config.num_hidden_layers):
        names.update(f"model.layers.{i}.{p}" for p in per_layer)
    return names


def load_weights(model: LlamaModel, tensors: Iterable[tuple[str, np.ndarray | torch.Tensor]]) -> None:
    """Copy HF-named tensors into the model; raises if a required tensor is missing or misshapen.

    ``lm_head.weight`` is ignored for a tied model; rotary ``inv_freq`` buffers are ignored.
    """
    missing = expected_tensor_names(model.config)
    with torch.no_grad():
        for name, value in tensors:
            if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and model.config.tie_word_embeddings):
                continue
            dst = _target(model, name)
            src = torch.from_numpy(np.ascontiguousarray(value)) if isinstance(value, np.ndarray) else value
            if tuple(src.shape) != tuple(dst.shape):
                raise ValueError(f"{name}: shape {tuple(src.shape)} != expected {tuple(dst.shape)}")
            dst.copy_(src)
            missing.discard(name)
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {sorted(missing)[:3]}")


def random_state_dict(config: Any, seed: int = 0, std: float = 0.02) -> dict[str, torch.Tensor]:
    """HF-named fp32 random weights for tests and benchmarks without a checkpoint."""
    g = torch.Generator().manual_seed(seed)
    e, d, inter = config.hidden_size, config.head_dim, config.intermediate_size
    h, hkv = config.num_attention_heads, config.num_key_value_heads
    shapes = {"model.embed_tokens.weight": (config.vocab_size, e), "model.norm.weight": (e,)}
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, e)
    for i in range(config.num_hidden_layers):
        p = f"model.layers.{i}."
        shapes[p + "self_attn.q_proj.weight"] = (h * d, e)
        shapes[p + "self_attn.k_proj.weight"] = (hkv * d, e)
        shapes[p + "self_attn.v_proj.weight"] = (hkv * d, e)
        shapes[p + "self_attn.o_proj.weight"] = (e, h * d)
        shapes[p + "mlp.gate_proj.weight"] = (inter, e)
        shapes[p + "mlp.up_proj.weight"] = (inter, e)
        shapes[p + "mlp.down_proj.weight"] = (e, inter)
        shapes[p + "input_layernorm.weight"] = (e,)
        shapes[p + "post_attention_layernorm.weight"] = (e,)
    out = {}
    for name, shape in shapes.items():
        if len(shape) == 1:
            out[name] = 1.0 + 0.1 * torch.randn(shape, generator=g)
        else:
            out[name] = std * torch.randn(shape, generator=g)
    return out


def build_model(
    source: Any,
    dtype: str | torch.dtype = "float32",
    device: str | torch.device = "cpu",
    *,
    state_dict: dict[str, Any] | None = None,
    seed: int = 0,
    progress: bool = True,
    tp: Any = None,
) -> LlamaModel:
    """A LlamaModel from a Checkpoint (streams ``iter_tensors``) or from a ModelConfig.

    With a ModelConfig the weights come from ``state_dict`` (HF names) or, if None, are random.
    With ``tp`` (a TPGroup) the model holds rank ``tp.rank``'s shard (tp_shard.py) of the same weights.
    """
    if hasattr(source, "iter_tensors"):
        config = source.config
        tensors = source.iter_tensors(progress=progress)
    else:
        config = source
        if state_dict is None:
            state_dict = random_state_dict(source, seed)
        tensors = state_dict.items()
    model = LlamaModel(config, dtype, device, tp=tp)
    if tp is not None:
        tensors = shard_tensors(config, tensors, tp.rank, tp.size)
    load_weights(model, tensors)
    return model.eval()


def hf_state_dict(model: LlamaModel) -> dict[str, torch.Tensor]:
    """The model's weights under their HF names (views into the fused tensors; the inverse of load_weights).
    For an unsharded model: every rank of a TP group can shard it again."""
    if getattr(model, "tp", None) is not None:
        raise ValueError("hf_state_dict needs the whole model, not a TP shard")
    return {name: _target(model, name) for name in sorted(expected_tensor_names(model.config))}
