"""JAX chunk step: the tiled chunk attention (backends/jax/chunk_meta.py) against the dense masked form it replaced,
interleaved in one process on the real model (fp32, CPU), plus the same step with attention replaced by a trivial
op (what the rest of the layer costs).

Each case is a step of ``num_prompts`` prompts of ``length`` tokens (start 0) padded to the runner's token bucket;
per round each variant runs ``reps`` timed steps in a rotating order and the round keeps their median; ratios are
per round (dense / tiled step time = the tiled form's speedup), then their median. The bench's
``uniform32_prefill`` figure (bench/engine_jax_ab.py) covers ~4 such steps and swings with the machine's load;
this isolates the chunk step.

    python -m bench.jax_chunk_ab [--rounds 3] [--reps 3]
"""

from __future__ import annotations

import json
import os
import statistics
import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from backends.jax import model
from backends.jax.attention import MASKED
from backends.jax.chunk_meta import build_chunk_meta

CASES = ((8, 64), (4, 128), (1, 512), (32, 16))  # (prompts, tokens each): 512 rows
VARIANTS = ("tiled", "dense", "no_attention")


@struct.dataclass
class DenseMeta:
    """The previous ChunkMeta: one key list for every row of the step."""

    row_seg: jax.Array
    row_pos: jax.Array
    key_block_ids: jax.Array
    key_block_seg: jax.Array
    key_block_pos: jax.Array


def dense_chunk_attention(q: jax.Array, kv: jax.Array, layer: jax.Array, meta: DenseMeta) -> jax.Array:
    """backends/jax/attention.py's chunk attention before the row tiles: scores [Hkv, G, T, KB * block_size]."""
    t, h, d = q.shape
    block_size, hkv = kv.shape[3], kv.shape[4]
    kb = meta.key_block_ids.shape[0]
    keys = kv[layer, 0, meta.key_block_ids].reshape(kb * block_size, hkv, d)
    values = kv[layer, 1, meta.key_block_ids].reshape(kb * block_size, hkv, d)
    key_seg = jnp.repeat(meta.key_block_seg, block_size)
    key_pos = (meta.key_block_pos[:, None] + jnp.arange(block_size)[None, :]).reshape(-1)
    mask = (meta.row_seg[:, None] == key_seg[None, :]) & (key_pos[None, :] <= meta.row_pos[:, None])
    qg = q.reshape(t, hkv, h // hkv, d)
    scores = jnp.einsum("tkgd,nkd->kgtn", qg, keys, preferred_element_type=jnp.float32) * d**-0.5
    probs = jax.nn.softmax(jnp.where(mask[None, None], scores, MASKED), axis=-1)
    out = jnp.einsum("kgtn,nkd->tkgd", probs.astype(values.dtype), values, preferred_element_type=jnp.float32)
    return out.reshape(t, h * d).astype(q.dtype)


def dense_meta(row_seg, row_pos, seg_blocks: list[np.ndarray], block_size: int, width) -> DenseMeta:
    """The previous runner's metadata: every chunk's blocks in one list padded to ``width(n)`` blocks."""
    n = sum(len(b) for b in seg_blocks)
    kb = width(n)
    ids, seg, pos = np.zeros(kb, np.int32), np.full(kb, -2, np.int32), np.zeros(kb, np.int32)
    ids[:n] = np.concatenate(seg_blocks)
    seg[:n] = np.concatenate([np.full(len(b), s, np.int32) for s, b in enumerate(seg_blocks)])
    pos[:n] = np.concatenate([np.arange(len(b), dtype=np.int32) * block_size for b in seg_blocks])
    return DenseMeta(row_seg, row_pos, ids, seg, pos)


def _layer_program(attention):
    @partial(jax.jit, static_argnames=("dims",), donate_argnames=("kv", "hidden"))
    def program(lp, kv, layer, hidden, cos, sin, slots, meta, lora, *, dims):
        return model._layer(
            lp, kv, layer, hidden, cos, sin, slots, lora, lambda q, kv, i: attention(q, kv, i, meta), dims
        )

    return program


def _trivial_attention(q, kv, layer, meta):
    t, h, d = q.shape
    return (q * kv[layer, 0, 0, 0, 0, 0]).reshape(t, h * d)


def _step_inputs(runner, num_prompts: int, length: int, rng):
    bs = runner.block_size
    t = runner.buckets.num_tokens(num_prompts * length)
    token_ids, positions = np.zeros(t, np.int32), np.zeros(t, np.int32)
    row_seg, slots = np.full(t, -1, np.int32), np.full(t, runner.kv_cache.scratch_slot, np.int32)
    seg_blocks, next_block = [], 1
    for s in range(num_prompts):
        nb = -(-length // bs)
        blocks = np.arange(next_block, next_block + nb, dtype=np.int32)
        next_block += nb
        rows = slice(s * length, (s + 1) * length)
        pos = np.arange(length, dtype=np.int32)
        token_ids[rows] = rng.integers(0, runner.config.vocab_size, length)
        positions[rows], row_seg[rows] = pos, s
        slots[rows] = blocks[pos // bs] * bs + pos % bs
        seg_blocks.append(blocks)
    sample = np.zeros(runner.buckets.sample_rows(num_prompts), np.int32)
    sample[:num_prompts] = [(s + 1) * length - 1 for s in range(num_prompts)]
    tiled = build_chunk_meta(row_seg, positions, seg_blocks, bs, runner.buckets.key_blocks)
    dense = dense_meta(row_seg, positions, seg_blocks, bs, runner.buckets.key_blocks)
    return (token_ids, positions, slots, sample), tiled, dense


def run(model_path: str | None, rounds: int, reps: int, num_blocks: int = 640) -> dict:
    from backends.checkpoint import default_model_path, load_checkpoint
    from backends.jax.runner import JaxModelRunner
    from engine.model_runner import KVCacheSpec

    runner = JaxModelRunner(load_checkpoint(model_path or default_model_path()), progress=False)
    runner.initialize_kv_cache(KVCacheSpec(num_blocks, 0, 16))
    programs = {
        "tiled": model._chunk_layer,
        "dense": _layer_program(dense_chunk_attention),
        "no_attention": _layer_program(_trivial_attention),
    }
    rng = np.random.default_rng(0)

    def step(variant: str, inputs, meta) -> float:
        token_ids, positions, slots, sample = inputs
        t0 = time.perf_counter()
        logits, runner.kv_cache.device_kv = model._forward(
            programs[variant],
            runner.params,
            runner.kv_cache.device_kv,
            token_ids,
            positions,
            slots,
            meta,
            sample,
            None,
            runner.dims,
        )
        logits.block_until_ready()
        return time.perf_counter() - t0

    cases = {}
    for num_prompts, length in CASES:
        inputs, tiled, dense = _step_inputs(runner, num_prompts, length, rng)
        metas = {"tiled": tiled, "dense": dense, "no_attention": tiled}
        first = {}
        for v in VARIANTS:  # compile, then check the two attention forms agree on the sampled rows
            token_ids, positions, slots, sample = inputs
            logits, runner.kv_cache.device_kv = model._forward(
                programs[v],
                runner.params,
                runner.kv_cache.device_kv,
                token_ids,
                positions,
                slots,
                metas[v],
                sample,
                None,
                runner.dims,
            )
            first[v] = np.asarray(logits)[:num_prompts]
        per_round = []
        for r in range(rounds):
            order = VARIANTS[r % 3 :] + VARIANTS[: r % 3]
            load = os.getloadavg()[0]
            ms = {v: 1e3 * statistics.median(step(v, inputs, metas[v]) for _ in range(reps)) for v in order}
            per_round.append({"order": list(order), "load": load, **{f"{v}_ms": ms[v] for v in VARIANTS}})
        med = {f"{v}_ms": statistics.median(r[f"{v}_ms"] for r in per_round) for v in VARIANTS}
        cases[f"{num_prompts}x{length}"] = {
            "rows": len(inputs[0]),
            "tile_blocks": list(tiled.tile_block_ids.shape),
            "dense_key_blocks": int(dense.key_block_ids.shape[0]),
            "rounds": per_round,
            "median": med,
            "dense_over_tiled": statistics.median(r["dense_ms"] / r["tiled_ms"] for r in per_round),
            "attention_share_dense": 1 - med["no_attention_ms"] / med["dense_ms"],
            "attention_share_tiled": 1 - med["no_attention_ms"] / med["tiled_ms"],
            "tiled_prefill_tok_per_s": num_prompts * length / med["tiled_ms"] * 1e3,
            "max_abs_logit_diff_tiled_vs_dense": float(np.abs(first["tiled"] - first["dense"]).max()),
            "max_abs_logit_diff_tiled_vs_no_attention": float(np.abs(first["tiled"] - first["no_attention"]).max()),
        }
    return {"cases": cases, "rounds": rounds, "reps": reps, "time_utc": time.strftime("%H:%M:%S", time.gmtime())}


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(run(args.model, args.rounds, args.reps), indent=2))
