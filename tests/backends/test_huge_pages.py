"""backends/huge_pages.py: an arena advised for huge pages gets them where the kernel offers them, collapse
rebuilds memory in place without changing it, and where huge pages cannot be had every call says why and
changes nothing."""

from __future__ import annotations

import ctypes
import mmap

import pytest

from backends import huge_pages as hp

AVAILABLE = hp.unavailable_reason() == ""


def test_thp_mode_reads_the_bracketed_choice(tmp_path, monkeypatch):
    switch = tmp_path / "enabled"
    switch.write_text("always [madvise] never\n")
    monkeypatch.setattr(hp, "THP_ENABLED", switch)
    assert hp.thp_mode() == "madvise"
    switch.write_text("always madvise [never]\n")
    assert hp.thp_mode() == "never"
    assert hp.unavailable_reason() == "transparent_hugepage is 'never'"
    monkeypatch.setattr(hp, "THP_ENABLED", tmp_path / "absent")
    assert hp.thp_mode() == "unavailable"
    assert "no transparent huge pages" in hp.unavailable_reason()


def test_arena_is_aligned_and_sized():
    arena = hp.Arena(3 * hp.HUGE + 123)
    assert arena.address % hp.HUGE == 0
    assert len(arena.buffer) == 3 * hp.HUGE + 123
    arena.buffer[-1] = 7  # writable to its last byte
    assert arena.buffer[-1] == 7
    with pytest.raises(ValueError):
        hp.Arena(0)


@pytest.mark.skipif(not AVAILABLE, reason=f"no transparent huge pages here: {hp.unavailable_reason()}")
def test_arena_gets_huge_pages_at_first_touch():
    arena = hp.Arena(8 * hp.HUGE)
    assert arena.advised == ""
    assert hp.huge_bytes(arena.address, arena.nbytes) == 0  # nothing placed before the first touch
    ctypes.memset(arena.address, 1, arena.nbytes)
    result = arena.result()
    assert result.huge > 0 and result.reason == ""
    assert result.huge <= result.requested
    assert "huge-pages" in result.summary() and "off" not in result.summary()


def test_arena_without_huge_pages_says_why(monkeypatch):
    monkeypatch.setattr(hp, "thp_mode", lambda: "never")
    arena = hp.Arena(2 * hp.HUGE)
    ctypes.memset(arena.address, 1, arena.nbytes)
    result = arena.result()
    assert result.huge == 0 and result.reason == "transparent_hugepage is 'never'"
    assert result.summary() == "huge-pages off (transparent_hugepage is 'never')"


@pytest.mark.skipif(not AVAILABLE, reason=f"no transparent huge pages here: {hp.unavailable_reason()}")
def test_collapse_keeps_the_contents():
    size = 6 * hp.HUGE
    m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    address = ctypes.addressof(ctypes.c_char.from_buffer(m))
    pattern = bytes(range(256)) * (size // 256)
    m[:] = pattern  # touched on 4 KiB pages (not advised)
    result = hp.collapse([(address, size)])
    assert result.requested == size
    assert result.huge >= hp.HUGE, result  # at least the aligned interior's first page
    assert m[:] == pattern


def test_collapse_of_ranges_without_an_aligned_interior():
    buf = (ctypes.c_char * 4096)()
    result = hp.collapse([(ctypes.addressof(buf), 4096)])
    assert result.huge == 0 and result.reason


def test_huge_bytes_of_unmapped_memory_is_zero():
    assert hp.huge_bytes(16, 4096) == 0
