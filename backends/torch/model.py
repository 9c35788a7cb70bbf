"""A Llama-family decoder over a flat token batch with a paged KV cache.

The model sees one step's tokens flattened into rows (no batch dimension, no padding)::

    input_ids  [T]        tokens of every scheduled request, back to back
    positions  [T]        absolute position of each token in its sequence
    hidden     [T, E]     E = hidden_size

Attention is delegated to an ``AttentionBackend`` (attention.py) that writes the new K/V into the
paged cache and attends over each row's own sequence. The output head runs only on
``logits_indices`` (the rows that will be sampled): it is the single largest weight read of a
decode step.

Weights are stored fused for fewer, larger matmuls (weights.py maps the HF names onto them), and
transposed: each matrix is held as ``[in, out]`` contiguous and applied as ``x @ W_t`` (``torch.mm``
/ ``torch.addmm`` with the residual folded in). For a decode row (M = 1) MKL streams an ``[in, out]``
matrix ~1.5-2x faster than it runs ``F.linear`` over the ``[out, in]`` HF layout (the latter is a
single-threaded GEMV); for M > 1 both are the same SGEMM. The HF-layout ``[out, in]`` views are
kept as properties (``qkv_proj``, ``o_proj``, ...) for loading and inspection::

    qkv_proj_t      [E, (H + 2*Hkv) * D]   columns: q heads | k heads | v heads
    o_proj_t        [H * D, E]
    gate_up_proj_t  [E, 2 * I]             columns: gate | up
    down_proj_t     [I, E]
    embed_t         [E, V]                 the embedding table, also the tied output head

q/k rows use Hugging Face's half-split RoPE layout (``rotate_half``).

Tensor parallelism (``tp``, a ``TPGroup`` from tp_group.py, or None): the layers are built from the rank's
local config (tp_shard.py: its heads, KV heads and MLP columns) and the two row-parallel products
(``o_proj``, ``down_proj``) are all-reduced before the residual add.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch
import torch.nn.functional as F
from torch import nn

from backends.rope_scaling import llama3_inv_freq, rope_type
from backends.torch.attention import AttentionBackend, AttentionMetadata
from backends.torch.tp_shard import shard_config

if TYPE_CHECKING:
    from backends.torch.lora_batch import LoraBatch

# LoRA groups (lora_slots.lora_groups order): the projections that read the same input
LORA_QKV, LORA_O, LORA_GATE_UP, LORA_DOWN = 0, 1, 2, 3

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def resolve_dtype(dtype: str | torch.dtype) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {dtype!r}")
    return DTYPES[dtype]


def rope_inv_freq(head_dim: int, theta: float, scaling: dict[str, Any] | None) -> torch.Tensor:
    """Inverse frequencies [D/2] in fp32, bit-identical to transformers' rope init functions."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).float() / head_dim))
    kind = rope_type(scaling)
    if kind == "linear":
        return inv_freq / float(scaling["factor"])
    if kind == "llama3":
        return llama3_inv_freq(inv_freq, scaling, torch)
    return inv_freq


def rope_tables(head_dim: int, theta: float, scaling: dict[str, Any] | None, max_positions: int) -> torch.Tensor:
    """cos/sin tables [2, max_positions, D] in fp32; row p holds the angles of position p (half-split)."""
    inv_freq = rope_inv_freq(head_dim, theta, scaling)
    freqs = torch.arange(max_positions, dtype=torch.float32)[:, None] * inv_freq[None, :]  # [P, D/2]
    emb = torch.cat((freqs, freqs), dim=-1)  # [P, D]
    return torch.stack((emb.cos(), emb.sin()))


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [T, n_heads, D]; cos/sin [T, 1, D]. Half-split (``rotate_half``) convention."""
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


def apply_rope_signed(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """``apply_rope`` with the sign of ``rotate_half`` folded into the table (``signed_sin`` = sin with its
    first half negated): one op and one temporary fewer, the same bits ((-a) * s == a * (-s) exactly, and
    the products are summed in the same order)."""
    half = x.shape[-1] // 2
    rotated = torch.cat((x[..., half:], x[..., :half]), dim=-1)
    out = x * cos
    return out.add_(rotated.mul_(signed_sin))


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float, dtype: torch.dtype, device: torch.device) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(size, dtype=dtype, device=device), requires_grad=False)

    def forward(self, x: torch.Tensor, in_place: bool = False) -> torch.Tensor:
        # statistics in fp32 whatever the weight dtype (as transformers does); same op order as HF
        if x.dtype == torch.float32:
            if in_place:  # the same ops on this call's temporaries: 3 allocations fewer, the same bits
                # (torch's F.rms_norm gives the same bits on this CPU build but runs more ops: measured slower)
                inv = x.pow(2).mean(-1, keepdim=True).add_(self.eps).rsqrt_()
                return (x * inv).mul_(self.weight)
            return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps))
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x32.to(x.dtype)


class DecoderLayer(nn.Module):
    def __init__(self, config: Any, layer_idx: int, dtype: torch.dtype, device: torch.device, tp: Any = None) -> None:
        super().__init__()
        self.layer_idx = layer_idx
        self.tp = tp
        e, d = config.hidden_size, config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_kv_heads = config.num_key_value_heads
        self.head_dim = d
        self.q_size = self.num_heads * d
        self.kv_size = self.num_kv_heads * d
        inter = config.intermediate_size

        def weight_t(num_in: int, num_out: int) -> nn.Parameter:
            return nn.Parameter(torch.empty(num_in, num_out, dtype=dtype, device=device), requires_grad=False)

        self.input_layernorm = RMSNorm(e, config.rms_norm_eps, dtype, device)
        self.post_attention_layernorm = RMSNorm(e, config.rms_norm_eps, dtype, device)
        self.qkv_proj_t = weight_t(e, self.q_size + 2 * self.kv_size)
        self.o_proj_t = weight_t(self.q_size, e)
        self.gate_up_proj_t = weight_t(e, 2 * inter)
        self.down_proj_t = weight_t(inter, e)
        self.intermediate_size = inter
        self.fast_path = True  # LlamaModel.fast_path sets it for every layer

    # [out, in] views of the stored [in, out] weights (the HF layout; weights.py writes through them)
    @property
    def qkv_proj(self) -> torch.Tensor:
        return self.qkv_proj_t.t()

    @property
    def o_proj(self) -> torch.Tensor:
        return self.o_proj_t.t()

    @property
    def gate_up_proj(self) -> torch.Tensor:
        return self.gate_up_proj_t.t()

    @property
    def down_proj(self) -> torch.Tensor:
        return self.down_proj_t.t()

    def forward(
        self,
        hidden: torch.Tensor,  # [T, E]
        cos: torch.Tensor,  # [T, 1, D]
        sin: torch.Tensor,  # [T, 1, D]
        kv_cache: torch.Tensor,  # [2, N, bs, Hkv, D]
        attn: AttentionBackend,
        meta: AttentionMetadata,
        lora: LoraBatch | None = None,
    ) -> torch.Tensor:
        t = hidden.shape[0]
        fast = self.fast_path
        x = self.input_layernorm(hidden, fast)
        qkv = torch.mm(x, self.qkv_proj_t)  # [T, (H + 2Hkv) * D]
        if lora is not None:
            lora.add(self.layer_idx, LORA_QKV, x, qkv)
        qk = qkv[:, : self.q_size + self.kv_size].view(t, self.num_heads + self.num_kv_heads, self.head_dim)
        # q and k rotated in one pass (fast: ``sin`` is the signed table, see LlamaModel.forward)
        qk = apply_rope_signed(qk, cos, sin) if fast else apply_rope(qk, cos, sin)
        q = qk[:, : self.num_heads]  # [T, H, D]
        k = qk[:, self.num_heads :]  # [T, Hkv, D]
        v = qkv[:, self.q_size + self.kv_size :].view(t, self.num_kv_heads, self.head_dim)
        o = attn.forward(q, k, v, kv_cache, meta)  # [T, H * D]
        hidden = self._row_parallel_add(hidden, o, self.o_proj_t)  # hidden + o @ W_o
        if lora is not None:
            lora.add(self.layer_idx, LORA_O, o, hidden)

        x = self.post_attention_layernorm(hidden, fast)
        gate_up = torch.mm(x, self.gate_up_proj_t)  # [T, 2I]
        if lora is not None:
            lora.add(self.layer_idx, LORA_GATE_UP, x, gate_up)
        if fast:  # silu(gate) * up into silu's output (the same products)
            act = F.silu(gate_up[:, : self.intermediate_size]).mul_(gate_up[:, self.intermediate_size :])
        else:
            act = F.silu(gate_up[:, : self.intermediate_size]) * gate_up[:, self.intermediate_size :]
        hidden = self._row_parallel_add(hidden, act, self.down_proj_t)
        if lora is not None:
            lora.add(self.layer_idx, LORA_DOWN, act, hidden)
        return hidden

    def _row_parallel_add(self, hidden: torch.Tensor, x: torch.Tensor, w_t: torch.Tensor) -> torch.Tensor:
        """hidden + x @ w_t; under TP, x @ w_t is this rank's partial sum and is all-reduced first."""
        if self.tp is None:
            return torch.addmm(hidden, x, w_t)
        return hidden + self.tp.all_reduce(torch.mm(x, w_t))


class LlamaModel(nn.Module):
    """Decoder + output head. Parameters are allocated uninitialised; weights.py fills them."""

    def __init__(
        self, config: Any, dtype: str | torch.dtype = "float32", device: str | torch.device = "cpu", tp: Any = None
    ) -> None:
        super().__init__()
        if tp is not None:
            config = shard_config(config, tp.size)  # this rank's heads, KV heads and MLP columns
        self.tp = tp
        self.config = config
        self.dtype = resolve_dtype(dtype)
        device = torch.device(device)
        self.num_layers = config.num_hidden_layers
        self.embed_t = nn.Parameter(
            torch.empty(config.hidden_size, config.vocab_size, dtype=self.dtype, device=device), requires_grad=False
        )
        self.layers = nn.ModuleList(DecoderLayer(config, i, self.dtype, device, tp) for i in range(self.num_layers))
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps, self.dtype, device)
        if config.tie_word_embeddings:
            self.lm_head_t = self.embed_t
        else:
            self.lm_head_t = nn.Parameter(
                torch.empty(config.hidden_size, config.vocab_size, dtype=self.dtype, device=device),
                requires_grad=False,
            )
        tables = rope_tables(config.head_dim, config.rope_theta, config.rope_scaling, config.max_position_embeddings)
        # kept in the compute dtype: transformers casts cos/sin to the activations' dtype too
        self.register_buffer("rope", tables.to(device=device, dtype=self.dtype), persistent=False)
        # the fast path's tables: cos | sin with rotate_half's sign folded in (first half negated)
        signed = tables.clone()
        signed[1, :, : config.head_dim // 2].neg_()
        self.register_buffer("rope_signed", signed.to(device=device, dtype=self.dtype), persistent=False)
        self._fast_path = True

    @property
    def fast_path(self) -> bool:
        """The decode fast path (on by default): RoPE on a signed sine table, in-place norm temporaries, the MLP
        product in place; the same logits bit for bit, fewer ops and allocations per layer. Off = the reference
        op sequence (kept for A/B measurement: bench/fastpath.py)."""
        return self._fast_path

    @fast_path.setter
    def fast_path(self, on: bool) -> None:
        self._fast_path = bool(on)
        for layer in self.layers:
            layer.fast_path = bool(on)

    def forward(
        self,
        input_ids: torch.Tensor,  # [T] int64
        positions: torch.Tensor,  # [T] int64
        kv_caches: list[torch.Tensor],  # per layer [2, N, bs, Hkv, D]
        attn: AttentionBackend,
        meta: AttentionMetadata,
        logits_indices: torch.Tensor | None = None,  # [S] int64 rows to project; None = all
        lora: LoraBatch | None = None,  # this step's adapters per row (lora_batch.py); None = base only
        return_hidden: bool = False,
    ) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        """Returns fp32 logits [S, V] for the selected rows; with ``return_hidden``, also their final hidden states
        [S, E] (after the last norm: what an embedding pools, engine/embeddings.py)."""
        hidden = self.embed_t.index_select(1, input_ids).t().contiguous()  # [T, E]
        tables = self.rope_signed if self._fast_path else self.rope
        cos_sin = tables[:, positions].unsqueeze(2)  # [2, T, 1, D]
        cos, sin = cos_sin[0], cos_sin[1]
        for layer, kv in zip(self.layers, kv_caches):
            hidden = layer(hidden, cos, sin, kv, attn, meta, lora)
        if logits_indices is not None:
            hidden = hidden.index_select(0, logits_indices)
        normed = self.norm(hidden, self._fast_path)
        logits = torch.mm(normed, self.lm_head_t).float()  # [S, V]
        return (logits, normed) if return_hidden else logits

    @property
    def embed_tokens(self) -> torch.Tensor:
        """[V, E] view (HF layout) of the stored embedding table."""
        return self.embed_t.t()

    @property
    def lm_head(self) -> torch.Tensor:
        """[V, E] view (HF layout) of the stored output head."""
        return self.lm_head_t.t()
