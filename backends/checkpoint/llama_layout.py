"""Llama tensor layout: Hugging Face names and shapes, llama.cpp (GGUF) names, and the q/k RoPE row order.

Every shape here is in Hugging Face / torch layout: a Linear weight is [out_features, in_features].
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from backends.checkpoint.model_config import ModelConfig

# Per-block tensor suffix: (Hugging Face name under "model.layers.N.", llama.cpp name under "blk.N.").
_BLOCK_TENSORS: tuple[tuple[str, str], ...] = (
    ("input_layernorm.weight", "attn_norm.weight"),
    ("self_attn.q_proj.weight", "attn_q.weight"),
    ("self_attn.k_proj.weight", "attn_k.weight"),
    ("self_attn.v_proj.weight", "attn_v.weight"),
    ("self_attn.o_proj.weight", "attn_output.weight"),
    ("post_attention_layernorm.weight", "ffn_norm.weight"),
    ("mlp.gate_proj.weight", "ffn_gate.weight"),
    ("mlp.up_proj.weight", "ffn_up.weight"),
    ("mlp.down_proj.weight", "ffn_down.weight"),
)
_GLOBAL_TENSORS: dict[str, str] = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_GGUF_BLOCK_TO_HF = {gguf_suffix: hf_suffix for hf_suffix, gguf_suffix in _BLOCK_TENSORS}
_GGUF_BLOCK_NAME = re.compile(r"blk\.(\d+)\.(.+)")


def llama_tensor_shapes(config: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor of the model, by Hugging Face name, in load order (embedding, blocks, final norm, head).

    "lm_head.weight" is present only when the head is not tied to the embedding.
    """
    hidden = config.hidden_size
    q_size = config.num_attention_heads * config.head_dim
    kv_size = config.num_key_value_heads * config.head_dim
    block_shapes = {
        "input_layernorm.weight": (hidden,),
        "self_attn.q_proj.weight": (q_size, hidden),
        "self_attn.k_proj.weight": (kv_size, hidden),
        "self_attn.v_proj.weight": (kv_size, hidden),
        "self_attn.o_proj.weight": (hidden, q_size),
        "post_attention_layernorm.weight": (hidden,),
        "mlp.gate_proj.weight": (config.intermediate_size, hidden),
        "mlp.up_proj.weight": (config.intermediate_size, hidden),
        "mlp.down_proj.weight": (hidden, config.intermediate_size),
    }
    shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (config.vocab_size, hidden)}
    for layer in range(config.num_hidden_layers):
        for suffix, shape in block_shapes.items():
            shapes[f"model.layers.{layer}.{suffix}"] = shape
    shapes["model.norm.weight"] = (hidden,)
    if not config.tie_word_embeddings:
        shapes["lm_head.weight"] = (config.vocab_size, hidden)
    return shapes


def hf_name_from_gguf(gguf_name: str) -> str | None:
    """The Hugging Face name of a llama.cpp tensor, or None for tensors with no HF counterpart (e.g. rope_freqs)."""
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    match = _GGUF_BLOCK_NAME.fullmatch(gguf_name)
    if match is None or match.group(2) not in _GGUF_BLOCK_TO_HF:
        return None
    return f"model.layers.{match.group(1)}.{_GGUF_BLOCK_TO_HF[match.group(2)]}"


# q/k row order. Hugging Face's checkpoints use the half-split RoPE layout (rotate_half pairs row i with row
# i + head_dim/2 of each head); llama.cpp's converter reorders each head's rows into interleaved pairs:
#
#   HF rows of one head:        [x0 x1 ... x(d/2-1) | y0 y1 ... y(d/2-1)]
#   GGUF rows of the same head: [x0 y0 x1 y1 ... x(d/2-1) y(d/2-1)]
#
# `permute_for_gguf` is llama.cpp's `permute` (convert_hf_to_gguf.py); `unpermute_from_gguf` is its inverse.


def permute_for_gguf(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """HF half-split rows -> llama.cpp interleaved rows. weight: [num_heads * head_dim, ...]."""
    rows = weight.shape[0]
    _check_rows(rows, num_heads)
    return weight.reshape(num_heads, 2, rows // num_heads // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def unpermute_from_gguf(weight: np.ndarray, num_heads: int) -> np.ndarray:
    """llama.cpp interleaved rows -> HF half-split rows. weight: [num_heads * head_dim, ...]."""
    rows = weight.shape[0]
    _check_rows(rows, num_heads)
    return weight.reshape(num_heads, rows // num_heads // 2, 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def _check_rows(rows: int, num_heads: int) -> None:
    if num_heads <= 0 or rows % (2 * num_heads) != 0:
        raise ValueError(f"{rows} rows cannot be split into {num_heads} heads of an even head_dim")
