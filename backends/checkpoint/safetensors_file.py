"""One memory-mapped .safetensors file whose tensors are read as float32 numpy arrays, without torch.

File layout (https://github.com/huggingface/safetensors):

    [u64 little-endian N][N bytes of JSON header][data ...]
    header: {name: {"dtype": "BF16", "shape": [..], "data_offsets": [begin, end]}, "__metadata__": {...}}

Offsets are relative to the start of the data. numpy has no bfloat16, so BF16 is widened by bit shifting.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

_FLOAT_DTYPES = {"F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"), "BF16": np.dtype("<u2")}
_ITEM_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2}
_MAX_HEADER_BYTES = 100 * 1024 * 1024


class SafetensorsFile:
    """Header parsed up front; each `get_float32` reads one tensor from the memory map."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        with self.path.open("rb") as file:
            prefix = file.read(8)
            if len(prefix) != 8:
                raise ValueError(f"{self.path} is not a safetensors file (too short)")
            header_size = int.from_bytes(prefix, "little")
            if header_size > _MAX_HEADER_BYTES:
                raise ValueError(f"{self.path} is not a safetensors file (header size {header_size})")
            try:
                header = json.loads(file.read(header_size))
            except (UnicodeDecodeError, json.JSONDecodeError) as error:
                raise ValueError(f"{self.path} has a malformed safetensors header: {error}") from error
        header.pop("__metadata__", None)
        self._entries: dict[str, dict] = header
        self._data_offset = 8 + header_size
        self._mmap: np.memmap | None = None

    def tensor_names(self) -> list[str]:
        return list(self._entries)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._entries[name]["shape"])

    def get_float32(self, name: str) -> np.ndarray:
        """A fresh, writable float32 copy of tensor `name` (F64/F32/F16/BF16 stored)."""
        entry = self._entries[name]
        dtype_name = entry["dtype"]
        if dtype_name not in _FLOAT_DTYPES:
            raise ValueError(f"tensor {name!r} in {self.path} has unsupported dtype {dtype_name}")
        begin, end = entry["data_offsets"]
        shape = tuple(entry["shape"])
        if end - begin != math.prod(shape) * _ITEM_SIZES[dtype_name]:
            raise ValueError(f"tensor {name!r} in {self.path}: byte range does not match shape {shape}")
        if self._mmap is None:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r")
        raw = self._mmap[self._data_offset + begin : self._data_offset + end].view(_FLOAT_DTYPES[dtype_name])
        if dtype_name == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32).reshape(shape)
        return raw.astype(np.float32).reshape(shape)
