"""A Llama-family decoder in JAX over a paged KV cache: weights as a Flax pytree, one jitted program per layer.

The model is pure functions over ``LlamaParams`` (a ``flax.struct`` pytree). Each layer's weights are
arrays of their own and a step runs as ``num_layers + 2`` calls of small jitted programs (embed, one
layer program called once per layer with that layer's weights and index, head), dispatched from
Python. Why not one program: XLA compiles one fused program slowly when the layers are unrolled
(12-17 s per bucket on SmolLM2's 30 layers, against ~0.3 s for a layer), and a ``lax.scan`` over
weights stacked on a layer axis makes XLA CPU copy every layer's weight slices (``dynamic-slice``)
into fresh buffers before each matmul, i.e. read and write the whole model once more per step
(measured: 119 -> 82 ms CPU per batch-2 decode step without it). The per-layer dispatch costs ~0.1 ms
a layer. The KV array (all layers) is donated to each layer call and updated by scatters in place.

Layer matrices are stored ``[in, out]`` (``x @ w``: XLA CPU's matmuls run ~20% faster on this layout
than on torch's ``[out, in]``), fused like the torch backend::

    layers[i].qkv      [E, (H + 2*Hkv) * D]   columns: q heads | k heads | v heads
    layers[i].gate_up  [E, 2 * I]             columns: gate | up
    layers[i].o        [H * D, E]
    layers[i].down     [I, E]
    lm_head            [V, E]                 (the embedding itself when tied)
    rope               [2, max_positions, D]  cos | sin, half-split (``rotate_half``) layout

The two steps (shapes padded to buckets.py's buckets)::

    decode_step(params, kv, token_ids [B], positions [B], slots [B], DecodeMeta)       -> logits [B, V], kv
    chunk_step(params, kv, token_ids [T], positions [T], slots [T], ChunkMeta, rows [S]) -> logits [S, V], kv

Both take an optional ``LoraParams`` (slot stacks + each row's slot): every projection then adds its rows'
low-rank deltas, gathered per row (Punica's BGMV); without it the programs are the base model's.

Logits are fp32 whatever the weight dtype.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from jax import lax

from backends.checkpoint.llama_layout import llama_tensor_shapes
from backends.jax.attention import ChunkMeta, DecodeMeta, chunk_attention, decode_attention, write_kv
from backends.jax.solo_attention import SoloMeta, solo_attention
from backends.rope_scaling import llama3_inv_freq, rope_type

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16}
_PRECISION = lax.Precision.HIGHEST  # fp32 matmuls stay fp32 on GPUs too (parity with torch)


def resolve_dtype(dtype: Any) -> np.dtype:
    if isinstance(dtype, str):
        if dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
        return np.dtype(DTYPES[dtype])
    return np.dtype(dtype)


class Dims(NamedTuple):
    """The static (hashable) part of the model: what the traced programs branch on."""

    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float

    @classmethod
    def from_config(cls, config: Any) -> Dims:
        return cls(
            config.num_attention_heads,
            config.num_key_value_heads,
            config.head_dim,
            config.intermediate_size,
            float(config.rms_norm_eps),
        )


_LAYER_KEYS = ("input_norm", "qkv", "o", "post_norm", "gate_up", "down")


@struct.dataclass
class LayerParams:
    """One layer's weights, matrices [in, out]."""

    input_norm: jax.Array  # [E]
    qkv: jax.Array  # [E, (H + 2Hkv) * D]
    o: jax.Array  # [H * D, E]
    post_norm: jax.Array  # [E]
    gate_up: jax.Array  # [E, 2I]
    down: jax.Array  # [I, E]


@struct.dataclass
class LlamaParams:
    embed: jax.Array  # [V, E]
    layers: tuple[LayerParams, ...]  # one per layer, each leaf its own array (module doc)
    norm: jax.Array  # [E]
    lm_head: jax.Array  # [V, E]; the embedding itself when tied
    rope: jax.Array  # [2, P, D] in the compute dtype (as transformers casts cos/sin)


# ---- rotary tables (numpy, matching backends/torch/model.py) --------------------------------------


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> np.ndarray:
    """Inverse frequencies [D/2] fp32, computed as transformers' rope init functions do."""
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / (np.float32(theta) ** exponent)).astype(np.float32)
    kind = rope_type(scaling)
    if kind == "linear":
        return (inv_freq / np.float32(scaling["factor"])).astype(np.float32)
    if kind == "llama3":
        return llama3_inv_freq(inv_freq, scaling, np).astype(np.float32)
    return inv_freq


def rope_tables(head_dim: int, theta: float, scaling: dict[str, Any] | None, max_positions: int) -> np.ndarray:
    """cos/sin [2, max_positions, D] fp32; row p holds the angles of position p (half-split)."""
    inv_freq = rope_inv_freq(head_dim, theta, scaling)
    freqs = np.arange(max_positions, dtype=np.float32)[:, None] * inv_freq[None, :]  # [P, D/2]
    emb = np.concatenate((freqs, freqs), axis=-1)  # [P, D]
    return np.stack((np.cos(emb), np.sin(emb))).astype(np.float32)


# ---- weights --------------------------------------------------------------------------------------

_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")


def _slot(buffers: dict[str, np.ndarray], dims: Dims, name: str) -> np.ndarray:
    """The (slice of the) numpy buffer that HF tensor ``name`` fills."""
    globals_ = {"model.embed_tokens.weight": "embed", "model.norm.weight": "norm", "lm_head.weight": "lm_head"}
    if name in globals_:
        return buffers[globals_[name]]
    m = _LAYER.fullmatch(name)
    if m is None:
        raise KeyError(name)
    i = int(m.group(1))
    q = dims.num_heads * dims.head_dim
    kv = dims.num_kv_heads * dims.head_dim
    inter = dims.intermediate_size
    slots = {
        "self_attn.q_proj.weight": lambda: buffers["qkv"][i, :q],
        "self_attn.k_proj.weight": lambda: buffers["qkv"][i, q : q + kv],
        "self_attn.v_proj.weight": lambda: buffers["qkv"][i, q + kv :],
        "self_attn.o_proj.weight": lambda: buffers["o"][i],
        "mlp.gate_proj.weight": lambda: buffers["gate_up"][i, :inter],
        "mlp.up_proj.weight": lambda: buffers["gate_up"][i, inter:],
        "mlp.down_proj.weight": lambda: buffers["down"][i],
        "input_layernorm.weight": lambda: buffers["input_norm"][i],
        "post_attention_layernorm.weight": lambda: buffers["post_norm"][i],
    }
    if m.group(2) not in slots:
        raise KeyError(name)
    return slots[m.group(2)]()


def random_tensors(config: Any, seed: int = 0, std: float = 0.02) -> dict[str, np.ndarray]:
    """HF-named fp32 random weights (norm weights near 1) for tests without a checkpoint."""
    rng = np.random.default_rng(seed)
    out = {}
    for name, shape in llama_tensor_shapes(config).items():
        if len(shape) == 1:
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (std * rng.standard_normal(shape)).astype(np.float32)
    return out


def load_params(config: Any, tensors: Iterable[tuple[str, Any]], dtype: Any, device: jax.Device) -> LlamaParams:
    """Fill stacked numpy buffers from HF-named tensors (numpy, or anything ``np.asarray`` reads),
    then place them on ``device``. Raises if a tensor is missing, unknown or misshapen.

    ``lm_head.weight`` is ignored for a tied model; rotary ``inv_freq`` buffers are ignored.
    """
    dt = resolve_dtype(dtype)
    dims = Dims.from_config(config)
    n, e, v = config.num_hidden_layers, config.hidden_size, config.vocab_size
    q_rows = (dims.num_heads + 2 * dims.num_kv_heads) * dims.head_dim
    shapes = {
        "embed": (v, e),
        "norm": (e,),
        "input_norm": (n, e),
        "qkv": (n, q_rows, e),
        "o": (n, e, dims.num_heads * dims.head_dim),
        "post_norm": (n, e),
        "gate_up": (n, 2 * dims.intermediate_size, e),
        "down": (n, e, dims.intermediate_size),
    }
    if not config.tie_word_embeddings:
        shapes["lm_head"] = (v, e)
    buffers = {key: np.empty(shape, dtype=dt) for key, shape in shapes.items()}
    missing = set(llama_tensor_shapes(config))
    for name, value in tensors:
        if name.endswith("rotary_emb.inv_freq") or (name == "lm_head.weight" and config.tie_word_embeddings):
            continue
        dst = _slot(buffers, dims, name)
        src = np.asarray(value)
        if src.shape != dst.shape:
            raise ValueError(f"{name}: shape {src.shape} != expected {dst.shape}")
        dst[...] = src
        missing.discard(name)
    if missing:
        raise ValueError(f"checkpoint lacks {len(missing)} tensors, e.g. {sorted(missing)[:3]}")

    def put(key: str) -> jax.Array:
        return jax.device_put(buffers.pop(key), device)

    layers = tuple(
        LayerParams(**{key: jax.device_put(_layer_layout(buffers[key][i]), device) for key in _LAYER_KEYS})
        for i in range(n)
    )
    for key in _LAYER_KEYS:
        del buffers[key]

    embed = put("embed")
    rope = rope_tables(dims.head_dim, config.rope_theta, config.rope_scaling, config.max_position_embeddings)
    return LlamaParams(
        embed=embed,
        layers=layers,
        norm=put("norm"),
        lm_head=embed if config.tie_word_embeddings else put("lm_head"),
        rope=jax.device_put(rope.astype(dt), device),
    )


# ---- the forward pass -----------------------------------------------------------------------------


def _layer_layout(w: np.ndarray) -> np.ndarray:
    """A layer's matrix [out, in] as stored: [in, out] (C-contiguous); vectors as they are."""
    return np.ascontiguousarray(w.T) if w.ndim == 2 else w


def _matmul(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [T, in] @ w [in, out] -> [T, out]."""
    return lax.dot_general(x, w, (((1,), (0,)), ((), ())), precision=_PRECISION)


def _linear(x: jax.Array, w: jax.Array) -> jax.Array:
    """x [T, in] @ w[out, in].T -> [T, out]."""
    return lax.dot_general(x, w, (((1,), (1,)), ((), ())), precision=_PRECISION)


def rms_norm(x: jax.Array, w: jax.Array, eps: float) -> jax.Array:
    # statistics in fp32 whatever the weight dtype (as transformers does)
    x32 = x.astype(jnp.float32)
    x32 = x32 * lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + eps)
    return w * x32.astype(x.dtype)


def apply_rope(x: jax.Array, cos: jax.Array, sin: jax.Array) -> jax.Array:
    """x [T, n_heads, D]; cos/sin [T, 1, D]. Half-split (``rotate_half``) convention."""
    half = x.shape[-1] // 2
    rotated = jnp.concatenate((-x[..., half:], x[..., :half]), axis=-1)
    return x * cos + rotated * sin


# (q [T, H, D], k [T, Hkv, D], v, kv, layer) -> [T, H * D]: k and v are the rows' own (already in kv)
Attend = Callable[[jax.Array, jax.Array, jax.Array, jax.Array, jax.Array], jax.Array]


@struct.dataclass
class LoraParams:
    """A step's LoRA: the device slot stacks (backends/lora_store.py layouts, a layer axis first) and the
    slot of every row (the always-zero slot for rows without an adapter and for padding)."""

    a: dict[str, jax.Array]  # group -> [L, S, in, nR]
    b: dict[str, jax.Array]  # module -> [L, S, R, out]
    row_slots: jax.Array  # [T] int32


# the groups in the order the layer calls them: (group, its modules)
LORA_GROUPS = (
    ("qkv", ("q_proj", "k_proj", "v_proj")),
    ("o", ("o_proj",)),
    ("gate_up", ("gate_proj", "up_proj")),
    ("down", ("down_proj",)),
)


def _lora_delta(x: jax.Array, a: jax.Array, bs: tuple[jax.Array, ...], row_slots: jax.Array) -> jax.Array:
    """BGMV (Punica): each row times its own slot's A then B. x [T, in]; a [S, in, nR]; bs: [S, R, out_j]
    -> [T, sum(out_j)] (the group's fused output columns)."""
    rank = bs[0].shape[1]
    shrunk = jnp.einsum("ti,tir->tr", x, a[row_slots], precision=_PRECISION)  # [T, nR]
    outs = [
        jnp.einsum("tr,tro->to", shrunk[:, j * rank : (j + 1) * rank], b[row_slots], precision=_PRECISION)
        for j, b in enumerate(bs)
    ]
    return outs[0] if len(outs) == 1 else jnp.concatenate(outs, axis=-1)


def _layer(
    lp: LayerParams,
    kv: jax.Array,
    layer: jax.Array,  # int32 scalar: this layer's index into kv (and the LoRA stacks)
    hidden: jax.Array,  # [T, E]
    cos: jax.Array,  # [T, 1, D]
    sin: jax.Array,
    slots: jax.Array,  # [T] int32 flat cache slots (padded rows: the scratch block)
    lora: LoraParams | None,
    attend: Attend,
    dims: Dims,
) -> tuple[jax.Array, jax.Array]:
    """One decoder layer: hidden [T, E] -> hidden [T, E], with this layer's K/V written into ``kv``."""
    t = hidden.shape[0]
    h, hkv, d, inter = dims.num_heads, dims.num_kv_heads, dims.head_dim, dims.intermediate_size

    def delta(index: int, x: jax.Array) -> jax.Array | float:
        if lora is None:
            return 0.0
        group, modules = LORA_GROUPS[index]
        return _lora_delta(x, lora.a[group][layer], tuple(lora.b[m][layer] for m in modules), lora.row_slots)

    x = rms_norm(hidden, lp.input_norm, dims.rms_norm_eps)
    qkv = _matmul(x, lp.qkv) + delta(0, x)  # [T, (H + 2Hkv) * D]
    qk = apply_rope(qkv[:, : (h + hkv) * d].reshape(t, h + hkv, d), cos, sin)  # q and k in one pass
    q, k = qk[:, :h], qk[:, h:]  # [T, H, D], [T, Hkv, D]
    v = qkv[:, (h + hkv) * d :].reshape(t, hkv, d)
    kv = write_kv(kv, layer, slots, k, v)
    o = attend(q, k, v, kv, layer)
    hidden = hidden + (_matmul(o, lp.o) + delta(1, o))
    x = rms_norm(hidden, lp.post_norm, dims.rms_norm_eps)
    gate_up = _matmul(x, lp.gate_up) + delta(2, x)  # [T, 2I]
    act = jax.nn.silu(gate_up[:, :inter]) * gate_up[:, inter:]
    return hidden + (_matmul(act, lp.down) + delta(3, act)), kv


@jax.jit
def _embed(embed: jax.Array, rope: jax.Array, token_ids: jax.Array, positions: jax.Array):
    """-> hidden [T, E], cos [T, 1, D], sin [T, 1, D]."""
    return embed[token_ids], rope[0, positions][:, None, :], rope[1, positions][:, None, :]


@partial(jax.jit, static_argnames=("dims",), donate_argnames=("kv", "hidden"))
def _decode_layer(lp, kv, layer, hidden, cos, sin, slots, meta: DecodeMeta, lora, *, dims: Dims):
    def attend(q, k, v, kv, layer):
        return decode_attention(q, kv, layer, meta)

    return _layer(lp, kv, layer, hidden, cos, sin, slots, lora, attend, dims)


@partial(jax.jit, static_argnames=("dims",), donate_argnames=("kv", "hidden"))
def _chunk_layer(lp, kv, layer, hidden, cos, sin, slots, meta: ChunkMeta, lora, *, dims: Dims):
    def attend(q, k, v, kv, layer):
        return chunk_attention(q, kv, layer, meta)

    return _layer(lp, kv, layer, hidden, cos, sin, slots, lora, attend, dims)


@partial(jax.jit, static_argnames=("dims",), donate_argnames=("kv", "hidden"))
def _solo_layer(lp, kv, layer, hidden, cos, sin, slots, meta: SoloMeta, lora, *, dims: Dims):
    def attend(q, k, v, kv, layer):
        return solo_attention(q, k, v, kv, layer, meta)

    return _layer(lp, kv, layer, hidden, cos, sin, slots, lora, attend, dims)


@partial(jax.jit, static_argnames=("dims",))
def _head(norm: jax.Array, lm_head: jax.Array, hidden: jax.Array, rows: jax.Array | None, *, dims: Dims) -> jax.Array:
    """fp32 logits of ``hidden[rows]`` (all rows when None)."""
    if rows is not None:
        hidden = hidden[rows]
    return _linear(rms_norm(hidden, norm, dims.rms_norm_eps), lm_head).astype(jnp.float32)


@partial(jax.jit, static_argnames=("dims",))
def _normed(norm: jax.Array, hidden: jax.Array, rows: jax.Array, *, dims: Dims) -> jax.Array:
    """fp32 final hidden states of ``hidden[rows]`` (after the last norm: what an embedding pools)."""
    return rms_norm(hidden[rows], norm, dims.rms_norm_eps).astype(jnp.float32)


def _forward(layer_program, params, kv, token_ids, positions, slots, meta, rows, lora, dims, return_hidden=False):
    """The layers run one program call each (see the module doc); inputs are placed on the KV's device once."""
    token_ids, positions, slots, meta, rows, lora = jax.device_put(
        (token_ids, positions, slots, meta, rows, lora), kv.sharding
    )
    hidden, cos, sin = _embed(params.embed, params.rope, token_ids, positions)
    for i, lp in enumerate(params.layers):
        hidden, kv = layer_program(lp, kv, np.int32(i), hidden, cos, sin, slots, meta, lora, dims=dims)
    logits = _head(params.norm, params.lm_head, hidden, rows, dims=dims)
    if return_hidden:
        return logits, kv, _normed(params.norm, hidden, rows, dims=dims)
    return logits, kv


def decode_step(
    params: LlamaParams,
    kv: jax.Array,
    token_ids: jax.Array,  # [B]
    positions: jax.Array,  # [B]
    slots: jax.Array,  # [B]
    meta: DecodeMeta,
    lora: LoraParams | None = None,
    *,
    dims: Dims,
) -> tuple[jax.Array, jax.Array]:
    """One token per request on top of its cached context -> (fp32 logits [B, V], kv). ``kv`` is donated."""
    return _forward(_decode_layer, params, kv, token_ids, positions, slots, meta, None, lora, dims)


def chunk_step(
    params: LlamaParams,
    kv: jax.Array,
    token_ids: jax.Array,  # [T]
    positions: jax.Array,  # [T]
    slots: jax.Array,  # [T]
    meta: ChunkMeta | SoloMeta,  # SoloMeta: the step is one chunk (solo_attention.py)
    logits_rows: jax.Array,  # [S] rows to project (the sampled ones)
    lora: LoraParams | None = None,
    *,
    dims: Dims,
    return_hidden: bool = False,
) -> tuple[jax.Array, ...]:
    """Prefill / speculative chunks of several requests -> (fp32 logits [S, V], kv), and with ``return_hidden`` the
    rows' fp32 final hidden states [S, E] third. ``kv`` is donated."""
    program = _solo_layer if isinstance(meta, SoloMeta) else _chunk_layer
    return _forward(program, params, kv, token_ids, positions, slots, meta, logits_rows, lora, dims, return_hidden)
