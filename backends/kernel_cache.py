"""Where the CPU kernels built at run time (backends/torch/csrc, backends/jax/csrc) are cached, the CPU part of
their cache key, and the switch that turns them off (``ZOO_CPU_DECODE=0``): the torch and JAX loaders share all
three, so one ``ZOO_KERNEL_CACHE`` governs every build, a build for one CPU is never loaded on another
(``-march=native``), and one variable turns both kernels off. A source's part of the key is its text and that of
the headers beside it (``source_text``: cpu_decode.c includes its parts from there)."""

from __future__ import annotations

import os
import platform
from pathlib import Path


def kernel_cache_dir() -> Path:
    """``$ZOO_KERNEL_CACHE``, else ``~/.cache/zoo/kernels``."""
    return Path(os.environ.get("ZOO_KERNEL_CACHE") or Path.home() / ".cache" / "zoo" / "kernels")


def cpu_flags() -> str:
    """The CPU's feature flags (``-march=native`` builds for them), part of the cache key."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("flags", "Features")):
                return line
    except OSError:
        pass
    return platform.processor()


def kernels_switched_off() -> bool:
    """``ZOO_CPU_DECODE=0``: neither runner builds or loads a CPU kernel (the torch ops / pure XLA run instead)."""
    return os.environ.get("ZOO_CPU_DECODE", "1") == "0"


def source_text(source: Path) -> str:
    """``source``'s text followed by every ``.h`` in its folder (the parts it includes), for the cache key."""
    return source.read_text() + "".join(h.read_text() for h in sorted(source.parent.glob("*.h")))
