"""Preallocated buffers for one step's metadata: filled in place each step instead of fresh arrays.

A step's host-side inputs (input ids, positions, slot mapping, logits rows) and the attention
backend's metadata (block tables, masks) are small integer / bool arrays rebuilt every step. Building
each as a fresh numpy array and a fresh tensor costs allocations and, on CUDA, one host-to-device copy
per array. Here they are carved, one after another, out of one buffer per dtype that lives for the
runner's lifetime (a bump allocator reset every step)::

    int64 region   | ids | positions | slots | logits rows | group 0 table | group 1 table | chunk table |
    bool region    | group 0 mask [rows, L] | chunk 0 mask [n, ctx] | ...
                   '------------------- used this step --------------------'  '-- spare --'

Each piece is handed out twice: as a numpy view to fill and as a tensor view to compute with. On the
CPU both are the same memory. On CUDA the host regions are pinned and mirrored by device regions of the
same size: ``upload()`` copies each region's used prefix in one transfer, so a step costs at most two
host-to-device copies however many groups and chunks it has.

Capacities are buckets (engine/buckets.py): a region starts at the size a decode of the largest batch
bucket at the smallest context bucket needs and grows, when a step needs more, to the next power of
two, so a steady stream of steps stops allocating after the first few. A piece handed out before a
region grows stays valid (it keeps the old storage alive); the grown region serves the next pieces.

A piece is valid until the next ``reset()`` (the next step): what a step returns must not be a view of
these buffers (the runner's logits are computed from them, never aliases of them).
"""

from __future__ import annotations

import numpy as np
import torch

from engine.buckets import BucketPolicy, next_pow2

DEFAULT_BUCKETS = BucketPolicy()


NUMPY_DTYPES = {np.dtype(np.int64): torch.int64, np.dtype(np.int32): torch.int32, np.dtype(np.bool_): torch.bool}


class _Region:
    """One dtype's host buffer (and its device mirror on CUDA) with a bump cursor."""

    def __init__(self, dtype: torch.dtype, capacity: int, device: torch.device) -> None:
        self.dtype = dtype
        self.device = device
        self.grows = 0
        self._retired: list[tuple[torch.Tensor, torch.Tensor, int, int]] = []  # outgrown, still to upload
        self._alloc(capacity)

    def _alloc(self, capacity: int) -> None:
        self.host = torch.zeros(capacity, dtype=self.dtype, pin_memory=self.device.type == "cuda")
        self.host_np = self.host.numpy()
        on_cpu = self.device.type == "cpu"
        self.dev = self.host if on_cpu else torch.zeros(capacity, dtype=self.dtype, device=self.device)
        self.cursor = 0
        self.uploaded = 0  # host[:uploaded] already copied to dev this step

    @property
    def capacity(self) -> int:
        return self.host.numel()

    def take(self, n: int) -> tuple[np.ndarray, torch.Tensor]:
        if self.cursor + n > self.capacity:
            if self.dev is not self.host:  # its pieces are uploaded with the rest at upload()
                self._retired.append((self.host, self.dev, self.uploaded, self.cursor))
            self._alloc(next_pow2(max(n, 2 * self.capacity)))
            self.grows += 1
        start, self.cursor = self.cursor, self.cursor + n
        return self.host_np[start : self.cursor], self.dev[start : self.cursor]

    def upload(self) -> None:
        if self.dev is self.host:
            return
        for host, dev, lo, hi in [*self._retired, (self.host, self.dev, self.uploaded, self.cursor)]:
            if hi > lo:
                dev[lo:hi].copy_(host[lo:hi], non_blocking=True)
        self._retired.clear()
        self.uploaded = self.cursor

    def reset(self) -> None:
        self.cursor = self.uploaded = 0


class StepBuffers:
    """Per-dtype regions for one runner's steps (see the module docstring)."""

    def __init__(self, device: str | torch.device = "cpu", capacity: dict[torch.dtype, int] | None = None) -> None:
        self.device = torch.device(device)
        self._initial = dict(capacity or {})
        # the sized dtypes up front (a step's pieces always come from the same memory); others on first use
        self.regions = {dtype: _Region(dtype, n, self.device) for dtype, n in self._initial.items()}
        self._done: torch.cuda.Event | None = None

    @classmethod
    def for_buckets(
        cls,
        device: str | torch.device,
        block_size: int,
        buckets: BucketPolicy = DEFAULT_BUCKETS,
        max_batch: int | None = None,
    ) -> StepBuffers:
        """Sized for a decode of the largest batch bucket over the smallest context bucket, and the row
        arrays of the largest token bucket; both grow (powers of two) when a step needs more."""
        b = buckets.batch_size(max_batch or buckets.batch_buckets[-1])
        rows = max(b, buckets.token_buckets[-1])
        width = buckets.context_blocks(1)
        # 4 row arrays (ids, positions, slots, logits rows) + the decode's block tables; its masks in keys
        return cls(
            device, {torch.int64: next_pow2(4 * rows + b * width), torch.bool: next_pow2(b * width * block_size)}
        )

    def reset(self) -> None:
        """Start a step: every piece of the previous step may be overwritten from here on."""
        if self._done is not None:
            self._done.synchronize()  # the previous step's copies have read the pinned host memory
            self._done = None
        for region in self.regions.values():
            region.reset()

    def take(self, n: int, dtype: torch.dtype = torch.int64) -> tuple[np.ndarray, torch.Tensor]:
        """n elements: a numpy view to fill and the tensor view (on the device) it becomes."""
        region = self.regions.get(dtype)
        if region is None:
            region = self.regions[dtype] = _Region(dtype, self._initial.get(dtype, 1024), self.device)
        return region.take(n)

    def put(self, values: np.ndarray) -> torch.Tensor:
        """A piece holding a copy of ``values`` (its dtype, its shape); the tensor view."""
        host, dev = self.take(values.size, NUMPY_DTYPES[values.dtype])
        host[:] = values.reshape(-1)
        return dev.view(values.shape)

    def upload(self) -> None:
        """Copy what was filled since the last upload to the device (nothing to do on the CPU)."""
        if self.device.type == "cpu":
            return
        for region in self.regions.values():
            region.upload()
        if self.device.type == "cuda":
            self._done = torch.cuda.Event()
            self._done.record()
