"""Model weights on transparent huge pages, for the CPU decode kernel.

A batch-1 decode step streams every weight once (SmolLM2 fp32: 538 MB a token), so it runs at the machine's
read bandwidth at best. On 4 KiB pages that stream crosses a page every 4 KiB: ~131,000 TLB misses a token
and hardware prefetchers that stop at every page boundary. On 2 MiB pages it crosses 256 times fewer. Measured
on this 2-core host (the same weights stepped alternately in one process, batch 1): the step took 8-24% less
wall time with the larger matrices alone collapsed onto huge pages (bench/results/2026-12-02-huge-pages.json).

Linux hands out huge pages only where asked when ``/sys/kernel/mm/transparent_hugepage/enabled`` is
``madvise`` (the common default): a range advised ``MADV_HUGEPAGE`` before its first touch gets them at fault
time; ``MADV_COLLAPSE`` (Linux >= 6.1) rebuilds an already-touched range in place. Two ways in:

- ``arena_for(nbytes)``: fresh memory, 2 MiB aligned and advised, for weights copied in (the torch runner moves
  its weights there: backends/torch/huge_weights.py);
- ``collapse(address, nbytes)``: the 2 MiB-aligned interior of memory someone else allocated (JAX's buffers).

Either way the outcome is measured, not assumed: ``huge_bytes(address, nbytes)`` reads ``AnonHugePages`` of
the ranges from ``/proc/self/smaps``. Where none of this exists (another OS, THP ``never``, an older kernel, no
free huge pages) the calls report it in their result and change nothing: the weights stay where they were, the
kernel reads them at the speed 4 KiB pages allow, and the reason is logged and shown in the runner's kernels line.
No bit of any weight changes either way.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import functools
import mmap
import sys
from dataclasses import dataclass
from pathlib import Path

HUGE = 2 << 20  # the x86-64 / arm64 (4 KiB base) transparent huge page
MADV_HUGEPAGE = 14
MADV_COLLAPSE = 25
THP_ENABLED = Path("/sys/kernel/mm/transparent_hugepage/enabled")


@dataclass(frozen=True, slots=True)
class HugePageResult:
    """What a request for huge pages got: ``huge`` of ``requested`` bytes; ``reason`` when it got none."""

    requested: int
    huge: int
    reason: str = ""

    @property
    def fraction(self) -> float:
        return self.huge / self.requested if self.requested else 0.0

    def summary(self) -> str:
        if self.huge:
            return f"huge-pages {self.huge >> 20}/{self.requested >> 20} MiB"
        return f"huge-pages off ({self.reason or 'none granted'})"


def thp_mode() -> str:
    """The bracketed mode of the THP switch (``always``, ``madvise``, ``never``), or ``unavailable``."""
    try:
        text = THP_ENABLED.read_text()
    except OSError:
        return "unavailable"
    start, end = text.find("["), text.find("]")
    return text[start + 1 : end] if 0 <= start < end else "unavailable"


@functools.cache
def _libc() -> ctypes.CDLL | None:
    """The C library with ``madvise`` typed (once a process), or None off Linux."""
    if not sys.platform.startswith("linux"):
        return None
    name = ctypes.util.find_library("c") or "libc.so.6"
    try:
        libc = ctypes.CDLL(name, use_errno=True)
    except OSError:
        return None
    libc.madvise.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int)
    libc.madvise.restype = ctypes.c_int
    return libc


def _madvise(libc: ctypes.CDLL, start: int, length: int, advice: int) -> int:
    """0 or the errno of madvise(start, length, advice)."""
    if libc.madvise(start, length, advice) == 0:
        return 0
    return ctypes.get_errno() or errno.EINVAL


def _aligned_interior(address: int, nbytes: int) -> tuple[int, int]:
    start = (address + HUGE - 1) & ~(HUGE - 1)
    end = (address + nbytes) & ~(HUGE - 1)
    return start, max(0, end - start)


def unavailable_reason() -> str:
    """Why huge pages cannot be asked for here, or '' when they can."""
    mode = thp_mode()
    if _libc() is None:
        return "not Linux"
    if mode == "unavailable":
        return "no transparent huge pages in this kernel"
    if mode == "never":
        return "transparent_hugepage is 'never'"
    return ""


class Arena:
    """``nbytes`` of anonymous memory (an mmap), 2 MiB aligned, advised ``MADV_HUGEPAGE`` before any touch.
    ``address`` is its first aligned byte; ``buffer`` a writable memoryview of exactly ``nbytes`` there. Lives
    as long as this object (hold it as long as anything views its memory)."""

    def __init__(self, nbytes: int) -> None:
        if nbytes <= 0:
            raise ValueError("an arena needs at least one byte")
        self.nbytes = nbytes
        whole = (nbytes + HUGE - 1) & ~(HUGE - 1)  # whole huge pages past the aligned start (the tail one too)
        self._map = mmap.mmap(-1, whole + HUGE, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        raw = ctypes.addressof(ctypes.c_char.from_buffer(self._map))
        offset = (-raw) % HUGE
        self.address = raw + offset
        self.buffer = memoryview(self._map)[offset : offset + nbytes]
        self.advised = ""  # '' = advised; else why not
        libc = _libc()
        reason = unavailable_reason()
        if not reason and libc is not None:
            err = _madvise(libc, self.address, whole, MADV_HUGEPAGE)
            reason = f"madvise(MADV_HUGEPAGE): {errno.errorcode.get(err, err)}" if err else ""
        self.advised = reason

    def result(self) -> HugePageResult:
        """What the arena got (call after its pages were written: pages are placed at first touch)."""
        if self.advised:
            return HugePageResult(self.nbytes, 0, self.advised)
        return HugePageResult(self.nbytes, huge_bytes(self.address, self.nbytes))


def collapse(ranges: list[tuple[int, int]]) -> HugePageResult:
    """Rebuild the 2 MiB-aligned interior of each (address, nbytes) range on huge pages in place
    (``MADV_COLLAPSE``); the contents stay. Ranges under 2 MiB have no interior and are left alone."""
    requested = sum(n for _, n in ranges)
    reason = unavailable_reason()
    libc = _libc()
    if reason or libc is None:
        return HugePageResult(requested, 0, reason or "no libc")
    failures: set[str] = set()
    for address, nbytes in ranges:
        start, length = _aligned_interior(address, nbytes)
        if length:
            err = _madvise(libc, start, length, MADV_COLLAPSE)
            if err == errno.EAGAIN:  # transient (a page locked or being migrated): the man page says retry
                err = _madvise(libc, start, length, MADV_COLLAPSE)
            if err:
                failures.add(f"madvise(MADV_COLLAPSE): {errno.errorcode.get(err, err)}")
    maps = _mappings()
    huge = sum(huge_bytes(*_aligned_interior(a, n), maps) for a, n in ranges)  # only whole 2 MiB pages can be huge
    return HugePageResult(requested, huge, "" if huge else ", ".join(sorted(failures)) or "no 2 MiB-aligned range")


def _mappings() -> list[tuple[int, int, int]]:
    """(start, end, AnonHugePages bytes) of each mapping of this process, from /proc/self/smaps."""
    try:
        text = Path("/proc/self/smaps").read_text()
    except OSError:
        return []
    out: list[tuple[int, int, int]] = []
    start = end = 0
    for line in text.splitlines():
        head = line.split(" ", 1)[0]
        if "-" in head and not head.endswith(":"):
            a, _, b = head.partition("-")
            try:
                start, end = int(a, 16), int(b, 16)
            except ValueError:
                start = end = 0
        elif head == "AnonHugePages:" and end > start:
            out.append((start, end, int(line.split()[1]) * 1024))
    return out


def huge_bytes(address: int, nbytes: int, mappings: list[tuple[int, int, int]] | None = None) -> int:
    """Bytes of [address, address + nbytes) on huge pages now, by ``/proc/self/smaps``: a mapping inside the
    range counts its ``AnonHugePages`` whole, one that overlaps it in part at most the overlap (exact for an
    Arena, an estimate for a stretch of memory malloc shares with others)."""
    lo, hi = address, address + nbytes
    total = 0
    for start, end, huge in _mappings() if mappings is None else mappings:
        if huge and end > lo and start < hi:
            overlap = min(end, hi) - max(start, lo)
            total += min(huge, overlap)
    return min(total, nbytes)
