"""The output head packed in column panels, the layout the C decode kernel's ``head = 2`` (HEAD_PANELS) reads.

[E, V] -> [ceil(V / PANEL), E, PANEL]: panel p holds columns PANEL*p .. PANEL*p + PANEL - 1 row-major, the last
zero-padded, so the kernel's GEMM streams each panel contiguously (an [E, V] column block is E strided 128-byte
reads; the blocked layout oneDNN packs a weight into). Shared by the torch loader (backends/torch/cpu_decode.py,
into a tensor on huge pages) and the JAX one (backends/jax/cpu_kernel.py). numpy only.
"""

from __future__ import annotations

import numpy as np

PANEL = 32  # columns of a head panel (cpu_decode.c's micro-kernel width)


def panels_shape(e: int, v: int) -> tuple[int, int, int]:
    return (-(-v // PANEL), e, PANEL)


def pack_panels(head_t: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """The panels of ``head_t`` [E, V], written into ``out`` (zero-filled, of ``panels_shape``) or a new array."""
    e, v = head_t.shape
    p = panels_shape(e, v)[0]
    if out is None:
        out = np.zeros(panels_shape(e, v), dtype=np.float32)
    full = v // PANEL
    out[:full] = head_t[:, : full * PANEL].reshape(e, full, PANEL).transpose(1, 0, 2)
    if full < p:
        out[full, :, : v - full * PANEL] = head_t[:, full * PANEL :]
    return out
