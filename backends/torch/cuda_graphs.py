"""CUDA graphs of the decode step: one captured forward per batch bucket, replayed each decode step.

A decode step's launches (~10 per layer) cost more on the host than on an H200 for a small model, so
the whole forward is captured once per batch bucket (engine/buckets.py) at start-up and replayed; the
step then costs one ``cudaGraphLaunch``. Inputs live in static buffers the graphs read, padded to the
bucket (the ``gpt-fast`` / vLLM recipe; our code)::

    input_ids     [B]       int64    padded rows: token 0
    positions     [B]       int64    padded rows: 0
    slot_mapping  [B]       int64    padded rows: -1 (the store kernel skips them)
    block_tables  [B, W]    int32    W = ceil(max_model_len / block_size); only a row's first blocks are read
    ctx_lens      [B]       int32    padded rows: 0 (the attention kernel writes zeros)
    logits        [B, V]    fp32     output; rows >= n (padded rows) are ignored

Only steps of plain decodes (no chunk, no speculative rows) at most the largest bucket replay; every
other step runs eagerly with the same backend. Needs an attention backend with ``static_metadata``
(the Triton paged kernel); the dispatch table only asks for graphs then.
"""

from __future__ import annotations

import logging
import time

import numpy as np
import torch

from backends.torch.attention import PagedMetadata
from backends.torch.model import LlamaModel

logger = logging.getLogger(__name__)

NUM_WARMUP_RUNS = 2  # before capture, on a side stream: Triton compiles, cuBLAS picks its kernels


class DecodeGraphs:
    """Captured decode forwards of ``model`` per batch size in ``batch_sizes``; ``run`` replays one."""

    def __init__(
        self,
        model: LlamaModel,
        kv_layers: list[torch.Tensor],
        attn,  # an AttentionBackend with static_metadata
        batch_sizes: tuple[int, ...],
        max_model_len: int,
        block_size: int,
    ) -> None:
        if not getattr(attn, "static_metadata", False):
            raise ValueError(f"CUDA graphs need an attention backend with static metadata, not {attn.name}")
        self.model = model
        self.kv_layers = kv_layers
        self.attn = attn
        self.batch_sizes = tuple(sorted(batch_sizes))
        self.max_batch = self.batch_sizes[-1]
        self.block_size = block_size
        self.width = -(-max_model_len // block_size)
        dev = kv_layers[0].device
        b = self.max_batch
        self.input_ids = torch.zeros(b, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(b, dtype=torch.int64, device=dev)
        self.slot_mapping = torch.full((b,), -1, dtype=torch.int64, device=dev)
        self.block_tables = torch.zeros((b, self.width), dtype=torch.int32, device=dev)
        self.ctx_lens = torch.zeros(b, dtype=torch.int32, device=dev)
        self.logits_rows = torch.arange(b, dtype=torch.int64, device=dev)
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._logits: dict[int, torch.Tensor] = {}
        self.capture_time_s = 0.0
        self._host_tables = np.zeros((b, self.width), dtype=np.int32)

    def _forward(self, b: int) -> torch.Tensor:
        meta = PagedMetadata(self.slot_mapping[:b], self.block_tables[:b], self.ctx_lens[:b])
        return self.model(self.input_ids[:b], self.positions[:b], self.kv_layers, self.attn, meta, self.logits_rows[:b])

    def capture(self) -> float:
        """Capture every bucket (largest first, all in one memory pool); returns the seconds it took."""
        t0 = time.perf_counter()
        pool = None
        stream = torch.cuda.Stream(self.input_ids.device)
        stream.wait_stream(torch.cuda.current_stream())
        with torch.inference_mode(), torch.cuda.stream(stream):
            for b in reversed(self.batch_sizes):
                for _ in range(NUM_WARMUP_RUNS):  # padded rows only: slot -1, ctx 0, the cache is untouched
                    self._forward(b)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, stream=stream):
                    self._logits[b] = self._forward(b)
                pool = graph.pool()
                self._graphs[b] = graph
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize(self.input_ids.device)
        self.capture_time_s = time.perf_counter() - t0
        logger.info("captured decode CUDA graphs %s in %.2f s", self.batch_sizes, self.capture_time_s)
        return self.capture_time_s

    def bucket(self, num_rows: int) -> int | None:
        """The captured batch size that serves ``num_rows`` decodes, or None (run eagerly)."""
        for b in self.batch_sizes:
            if b >= num_rows:
                return b
        return None

    def run(
        self,
        input_ids: np.ndarray,  # [n] int64
        positions: np.ndarray,  # [n] int64
        slot_mapping: np.ndarray,  # [n] int64
        seq_lens: list[int],  # [n] keys per row (position + 1)
        block_ids: list[list[int]],  # per row, its sequence's blocks
    ) -> torch.Tensor:
        """Logits [n, V] of one decode step of n <= max_batch rows, by replaying its bucket's graph."""
        n = len(seq_lens)
        b = self.bucket(n)
        if b is None:
            raise ValueError(f"{n} decodes exceed the largest captured batch {self.max_batch}")
        bs = self.block_size
        tables = self._host_tables
        for i, (length, ids) in enumerate(zip(seq_lens, block_ids)):
            nb = -(-length // bs)
            tables[i, :nb] = ids[:nb]
        pad = b - n
        self.input_ids[:b].copy_(torch.from_numpy(np.pad(input_ids, (0, pad))), non_blocking=True)
        self.positions[:b].copy_(torch.from_numpy(np.pad(positions, (0, pad))), non_blocking=True)
        self.slot_mapping[:b].copy_(torch.from_numpy(np.pad(slot_mapping, (0, pad), constant_values=-1)))
        ctx = np.zeros(b, dtype=np.int32)
        ctx[:n] = seq_lens
        self.ctx_lens[:b].copy_(torch.from_numpy(ctx), non_blocking=True)
        self.block_tables[:n].copy_(torch.from_numpy(tables[:n]), non_blocking=True)
        self._graphs[b].replay()
        return self._logits[b][:n]
