"""Paged KV memory of both tiers: device blocks and host-RAM blocks.

One stacked tensor per tier (shapes from ``KVLayout``, backends/kv_layout.py), so a block move is a
single index copy across all layers::

    device_kv  [num_layers, 2, num_device_blocks, block_size, Hkv, D]   (axis 1: 0 = K, 1 = V)
    host_kv    [num_layers, 2, num_host_blocks,   block_size, Hkv, D]   (pinned when CUDA is present)

``layers[i]`` is layer i's ``[2, num_blocks, block_size, Hkv, D]`` view (``layers[i][0]`` = K,
``[1]`` = V, each in the layout of KVCacheSpec), so one index_select gathers both K and V.
The block manager owns which ids are free; this class only moves bytes.
Tensors start zeroed: padded gathers read block 0, and masked-out NaN garbage would still poison
``softmax @ V``. Block moves copy bytes: an FP8 cache (whose dtype torch's index ops do not cover) is
moved through uint8 views of the same memory.
"""

from __future__ import annotations

import torch

from backends.kv_layout import KVLayout


class PagedKVCache:
    def __init__(self, layout: KVLayout, dtype: torch.dtype, device: torch.device) -> None:
        self.block_size = layout.block_size
        self.device = device
        self.device_kv = torch.zeros(layout.tier_shape(layout.num_device_blocks), dtype=dtype, device=device)
        pin = torch.cuda.is_available() and device.type == "cuda"
        host_shape = layout.tier_shape(layout.num_host_blocks)
        self.host_kv = torch.zeros(host_shape, dtype=dtype, device="cpu", pin_memory=pin)
        self._layers = [self.device_kv[i] for i in range(layout.num_layers)]
        byte_moves = dtype in (torch.float8_e4m3fn, torch.float8_e5m2)
        self._device_moves = self.device_kv.view(torch.uint8) if byte_moves else self.device_kv
        self._host_moves = self.host_kv.view(torch.uint8) if byte_moves else self.host_kv

    @property
    def layers(self) -> list[torch.Tensor]:
        return self._layers

    @property
    def num_device_blocks(self) -> int:
        return self.device_kv.shape[2]

    @property
    def num_host_blocks(self) -> int:
        return self.host_kv.shape[2]

    def _ids(self, ids: list[int], device: torch.device) -> torch.Tensor:
        return torch.tensor(ids, dtype=torch.int64, device=device)

    def swap_out(self, pairs: list[tuple[int, int]]) -> None:
        """(device block, host block) pairs: device -> host."""
        if not pairs:
            return
        src, dst = zip(*pairs)
        blocks = self._device_moves.index_select(2, self._ids(src, self.device))
        self._host_moves.index_copy_(2, self._ids(dst, torch.device("cpu")), blocks.to("cpu"))

    def swap_in(self, pairs: list[tuple[int, int]]) -> None:
        """(host block, device block) pairs: host -> device."""
        if not pairs:
            return
        src, dst = zip(*pairs)
        blocks = self._host_moves.index_select(2, self._ids(src, torch.device("cpu")))
        if self.device.type == "cuda":
            blocks = blocks.pin_memory().to(self.device, non_blocking=True)
        self._device_moves.index_copy_(2, self._ids(dst, self.device), blocks)

    def copy(self, pairs: list[tuple[int, int]]) -> None:
        """(device block, device block) pairs: all sources are read before any destination is written."""
        if not pairs:
            return
        src, dst = zip(*pairs)
        blocks = self._device_moves.index_select(2, self._ids(src, self.device))
        self._device_moves.index_copy_(2, self._ids(dst, self.device), blocks)

    def read_blocks(self, block_ids: list[int]) -> torch.Tensor:
        """The device blocks' KV gathered into one C-contiguous CPU tensor ``[L, 2, n, block_size, Hkv, D]``
        (what a peer transfer sends)."""
        if self._device_moves is not self.device_kv:
            raise ValueError("an FP8 KV cache does not take part in peer transfers (their layout names fp32/bf16/fp16)")
        blocks = self.device_kv.index_select(2, self._ids(block_ids, self.device))
        return blocks.to("cpu").contiguous()

    def write_blocks(self, block_ids: list[int], blocks: torch.Tensor) -> None:
        """Scatter ``blocks`` ``[L, 2, n, block_size, Hkv, D]`` (any device) into device blocks ``block_ids``."""
        if self._device_moves is not self.device_kv:
            raise ValueError("an FP8 KV cache does not take part in peer transfers (their layout names fp32/bf16/fp16)")
        if blocks.shape[2] != len(block_ids) or blocks.shape[:2] != self.device_kv.shape[:2]:
            raise ValueError(f"blocks {tuple(blocks.shape)} do not fit {len(block_ids)} blocks of this cache")
        self.device_kv.index_copy_(2, self._ids(block_ids, self.device), blocks.to(self.device, self.device_kv.dtype))
