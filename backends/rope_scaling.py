"""RoPE frequency scaling from a Hugging Face ``rope_scaling`` dict, written once for both backends.

    inv_freq [D/2] fp32 (torch.Tensor or np.ndarray)  ->  scaled inv_freq [D/2], same kind and dtype

Supported types: "default" (also no or an empty dict), "linear", "llama3". ``xp`` is the array
library of ``inv_freq`` (the ``torch`` or ``numpy`` module): the formula uses only Python operators
on the arrays and ``xp.where``, so each backend computes with its own library's kernels, exactly as
it would with the formula written out in its own model.py (torch's matches transformers' rope init
functions bit for bit). This module imports neither library.
"""

from __future__ import annotations

import math
from types import ModuleType
from typing import Any, TypeVar

A = TypeVar("A")  # torch.Tensor or np.ndarray

ROPE_TYPES = ("default", "linear", "llama3")


def rope_type(scaling: dict[str, Any] | None) -> str:
    """One of ROPE_TYPES; raises ValueError for another."""
    if not scaling:
        return "default"
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if kind not in ROPE_TYPES:
        raise ValueError(f"unsupported rope_scaling type {kind!r}")
    return kind


def llama3_inv_freq(inv_freq: A, scaling: dict[str, Any], xp: ModuleType) -> A:
    """Llama 3's scaling: long wavelengths divided by ``factor``, short ones kept, the band between
    interpolated. ``inv_freq`` [D/2] fp32 -> [D/2] fp32."""
    factor = float(scaling["factor"])
    low_freq_factor = float(scaling["low_freq_factor"])
    high_freq_factor = float(scaling["high_freq_factor"])
    old_context_len = float(scaling["original_max_position_embeddings"])
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = xp.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * inv_freq_llama / factor + smooth * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return xp.where(is_medium, smoothed, inv_freq_llama)
