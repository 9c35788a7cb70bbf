from __future__ import annotations

import numpy as np
import pytest

from backends.checkpoint.llama_layout import hf_name_from_gguf, permute_for_gguf, unpermute_from_gguf


def _llama_cpp_permute(weights: np.ndarray, n_head: int, n_head_kv: int | None) -> np.ndarray:
    """Verbatim from llama.cpp's convert_hf_to_gguf.py (LlamaModel.permute)."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (
        weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


@pytest.mark.parametrize(("num_heads", "num_kv_heads", "head_dim"), [(9, 3, 64), (4, 4, 8), (2, 1, 4)])
def test_unpermute_inverts_llama_cpp_permute(num_heads: int, num_kv_heads: int, head_dim: int) -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((num_heads * head_dim, 16)).astype(np.float32)
    k = rng.standard_normal((num_kv_heads * head_dim, 16)).astype(np.float32)
    q_gguf = _llama_cpp_permute(q, num_heads, num_heads)
    k_gguf = _llama_cpp_permute(k, num_heads, num_kv_heads)
    np.testing.assert_array_equal(unpermute_from_gguf(q_gguf, num_heads), q)
    np.testing.assert_array_equal(unpermute_from_gguf(k_gguf, num_kv_heads), k)
    np.testing.assert_array_equal(permute_for_gguf(q, num_heads), q_gguf)
    assert not np.array_equal(q_gguf, q)


def test_unpermuted_rows_make_rotate_half_rope_equal_llama_cpp_interleaved_rope() -> None:
    """What the un-permutation is for: rotate_half RoPE on HF rows == interleaved RoPE on llama.cpp rows."""
    rng = np.random.default_rng(1)
    num_heads, head_dim, hidden, position, theta = 3, 8, 12, 5, 10000.0
    w_hf = rng.standard_normal((num_heads * head_dim, hidden))
    x = rng.standard_normal(hidden)
    angles = position * theta ** (-np.arange(0, head_dim, 2) / head_dim)  # [head_dim/2]
    cos, sin = np.cos(angles), np.sin(angles)

    q = (unpermute_from_gguf(_llama_cpp_permute(w_hf, num_heads, num_heads), num_heads) @ x).reshape(num_heads, -1)
    first, second = q[:, : head_dim // 2], q[:, head_dim // 2 :]
    rotate_half = np.concatenate([first * cos - second * sin, second * cos + first * sin], axis=1)

    q_gguf = (_llama_cpp_permute(w_hf, num_heads, num_heads) @ x).reshape(num_heads, -1)
    even, odd = q_gguf[:, 0::2], q_gguf[:, 1::2]
    interleaved = np.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1).reshape(num_heads, -1)

    np.testing.assert_allclose(rotate_half, unpermute_from_gguf(interleaved.reshape(-1, 1), num_heads).reshape(q.shape))


def test_unpermute_rejects_rows_not_divisible_into_heads() -> None:
    with pytest.raises(ValueError, match="heads"):
        unpermute_from_gguf(np.zeros((10, 4)), 3)


@pytest.mark.parametrize(
    ("gguf_name", "hf_name"),
    [
        ("token_embd.weight", "model.embed_tokens.weight"),
        ("output_norm.weight", "model.norm.weight"),
        ("output.weight", "lm_head.weight"),
        ("blk.0.attn_norm.weight", "model.layers.0.input_layernorm.weight"),
        ("blk.12.attn_q.weight", "model.layers.12.self_attn.q_proj.weight"),
        ("blk.3.attn_k.weight", "model.layers.3.self_attn.k_proj.weight"),
        ("blk.3.attn_v.weight", "model.layers.3.self_attn.v_proj.weight"),
        ("blk.3.attn_output.weight", "model.layers.3.self_attn.o_proj.weight"),
        ("blk.29.ffn_norm.weight", "model.layers.29.post_attention_layernorm.weight"),
        ("blk.1.ffn_gate.weight", "model.layers.1.mlp.gate_proj.weight"),
        ("blk.1.ffn_up.weight", "model.layers.1.mlp.up_proj.weight"),
        ("blk.1.ffn_down.weight", "model.layers.1.mlp.down_proj.weight"),
        ("rope_freqs.weight", None),
        ("blk.1.attn_q.bias", None),
    ],
)
def test_gguf_names_map_to_hf_names(gguf_name: str, hf_name: str | None) -> None:
    assert hf_name_from_gguf(gguf_name) == hf_name
