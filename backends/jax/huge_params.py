"""The JAX runner's CPU arrays rebuilt on huge pages in place (backends/huge_pages.py says why).

XLA allocated the weights (and the kernel's transposed and panel-packed head copies); they cannot be
re-pointed as torch tensors can, so their memory is collapsed where it lies (``MADV_COLLAPSE``): every 2 MiB-
aligned stretch inside each array. Arrays under 2 MiB, and the unaligned ends of the others, stay on 4 KiB pages
(SmolLM2 fp32: ~93% of the bytes move, measured on this host). The contents are unchanged; where huge pages
cannot be had nothing happens and the result says why.
"""

from __future__ import annotations

import logging
from typing import Any

import jax

from backends.huge_pages import HugePageResult, collapse

logger = logging.getLogger(__name__)


def collapse_arrays(*trees: Any) -> HugePageResult:
    """Collapse the CPU buffers of every array in these pytrees (each buffer once)."""
    ranges: dict[int, int] = {}
    for leaf in jax.tree_util.tree_leaves(trees):
        if not isinstance(leaf, jax.Array) or any(d.platform != "cpu" for d in leaf.devices()):
            continue
        try:
            # written first: XLA fills a buffer asynchronously, and a page not yet touched fails the whole collapse
            # (EINVAL: the kernel's SCAN_PTE_NON_PRESENT)
            leaf.block_until_ready()
            ranges.setdefault(leaf.unsafe_buffer_pointer(), leaf.nbytes)
        except (RuntimeError, ValueError):  # a sharded or deleted array: no single buffer
            continue
    result = collapse(sorted(ranges.items()))
    logger.info("weights: %s", result.summary())
    return result
