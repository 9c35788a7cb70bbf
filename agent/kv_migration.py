"""Moving a running request's KV between two engines (the engine thread's half of a live migration).

    source engine thread                                   target engine thread
    export_for_migration(engine, id)                        import_migrated_kv(engine, token_ids, kv)
      LLMEngine.export_request: tokens + computed             LLMEngine.import_prefix: device blocks for the
        full blocks' device ids                                 blocks not cached here (sans-IO bookkeeping)
      runner's cache read_blocks → [L,2,n,bs,Hkv,D] (CPU)     runner's cache write_blocks ← the transfer
      abort it here (its tokens so far were streamed)         then the request is added with token_ids as its
                                                              prompt: the prefix cache serves the moved blocks,
                                                              only the partial last block is recomputed

The bytes travel between the two halves over the KV data plane (agent/kv_data_plane.py). The layout is the
shared block layout of backends/kv_layout.py, so any runner whose cache offers ``read_blocks`` /
``write_blocks`` (the torch and JAX ones) can take part, across backends too when their KV dtypes match;
a runner without them, or a dtype mismatch, migrates by re-prefill.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from agent.kv_data_plane import dtype_name
from engine.llm_engine import LLMEngine, MigratedRequest
from transport.kv_transfer import ReceivedKV
from transport.messages import KVWireLayout

_TORCH_DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}


@dataclass(slots=True)
class ExportedRequest:
    """A request taken off its engine: its state, and its KV (None: nothing to ship, the target re-prefills)."""

    state: MigratedRequest
    layout: KVWireLayout | None
    kv: torch.Tensor | np.ndarray | None  # [L, 2, n, block_size, Hkv, D], C-contiguous, host memory

    @property
    def kv_nbytes(self) -> int:
        return 0 if self.kv is None else len(self.kv_bytes())

    def kv_bytes(self) -> memoryview:
        """The KV as raw bytes (no copy; bf16 is viewed as 16-bit integers)."""
        if isinstance(self.kv, np.ndarray):  # the JAX cache's host copy
            return memoryview(self.kv.reshape(-1).view(np.uint8))
        flat = self.kv.reshape(-1)
        if flat.dtype == torch.bfloat16:
            flat = flat.view(torch.int16)
        return memoryview(flat.numpy()).cast("B")


def _cache(engine: LLMEngine):
    cache = getattr(engine.runner, "kv_cache", None)
    return cache if cache is not None and hasattr(cache, "read_blocks") else None


def _cache_dtype(cache) -> str:
    store = getattr(cache, "host_kv", None)
    return dtype_name(store.dtype) if store is not None else ""


def wire_layout_of(kv) -> KVWireLayout:
    """The wire layout of blocks read from a KV cache: ``kv`` [layers, 2, blocks, block_size, kv_heads, head_dim]."""
    num_layers, _, num_blocks, block_size, num_kv_heads, head_dim = kv.shape
    return KVWireLayout(
        num_layers=num_layers,
        num_blocks=num_blocks,
        block_size=block_size,
        num_kv_heads=num_kv_heads,
        head_dim=head_dim,
        dtype=dtype_name(kv.dtype),
    )


def export_for_migration(engine: LLMEngine, req_id: str) -> ExportedRequest | None:
    """Take ``req_id`` off ``engine`` with its KV; None for a request not here. Call from the engine's thread."""
    state = engine.export_request(req_id)
    if state is None:
        return None
    cache = _cache(engine)
    layout, kv = None, None
    if cache is not None and state.block_ids:
        kv = cache.read_blocks(state.block_ids)  # torch tensor (torch cache) or numpy array (JAX cache)
        layout = wire_layout_of(kv)
    engine.abort([req_id])
    return ExportedRequest(state, layout, kv)


def import_migrated_kv(
    engine: LLMEngine,
    token_ids: list[int],
    kv: ReceivedKV,
    cache_salt: str | None = None,
    lora_id: int | None = None,
) -> int:
    """Put a transfer's KV (the first full blocks of ``token_ids``) into ``engine``'s prefix cache, keyed under the
    request's ``cache_salt`` and LoRA adapter ``lora_id`` (only requests of that salt on that adapter hit it); the
    number of blocks written (blocks cached here already, or that did not fit, are skipped). KV computed under
    another adapter than the request's (``kv.lora_id``; 0: the base model) is not imported: the request recomputes
    its prompt. Call from the engine's thread, before adding the request whose prompt is ``token_ids``."""
    cache = _cache(engine)
    layout = kv.layout
    if cache is None or layout.dtype not in _TORCH_DTYPES or layout.dtype != _cache_dtype(cache):
        return 0  # a cache of another dtype: the request recomputes its prompt there
    if (kv.lora_id or None) != lora_id:
        return 0  # KV of another adapter (or of one against none) would be wrong here
    num_blocks = min(layout.num_blocks, len(token_ids) // layout.block_size)
    targets = engine.import_prefix(token_ids, num_blocks, cache_salt, lora_id)
    picks = [i for i, block_id in enumerate(targets) if block_id >= 0]
    if not picks:
        return 0
    raw = bytearray(kv.nbytes)
    kv.copy_into(memoryview(raw))
    shape = (layout.num_layers, 2, layout.num_blocks, layout.block_size, layout.num_kv_heads, layout.head_dim)
    if isinstance(getattr(cache, "host_kv", None), np.ndarray):  # a JAX cache: numpy in, its dtype
        blocks = np.frombuffer(raw, dtype=cache.host_kv.dtype).reshape(shape)
        if len(picks) < layout.num_blocks:
            blocks = blocks[:, :, picks]
    else:
        blocks = torch.frombuffer(raw, dtype=_TORCH_DTYPES[layout.dtype]).view(shape)
        if len(picks) < layout.num_blocks:  # some are cached here already: only the others are written
            blocks = blocks.index_select(2, torch.tensor(picks, dtype=torch.int64))
    cache.write_blocks([targets[i] for i in picks], blocks)
    return len(picks)
