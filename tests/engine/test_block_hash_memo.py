"""The recent-chains memo of engine/kv/block_hash.py: off by default; on, a node's first lookup of a prompt the
router hashed gets the same chain without hashing it again; bounded by the blocks it holds."""

from __future__ import annotations

from array import array

import pytest

from engine.kv import block_hash
from engine.kv.block_hash import extend_block_hashes, hash_full_blocks, keep_recent_chains


@pytest.fixture(autouse=True)
def _memo_off_afterwards():
    yield
    keep_recent_chains(0)


def _tokens(seed: int, n: int) -> list[int]:
    return [(seed * 7919 + 31 * j) % 32000 for j in range(n)]


def test_off_by_default_it_keeps_nothing():
    hash_full_blocks(_tokens(1, 64), 16)
    assert not block_hash._recent_chains


def test_on_a_first_lookup_reuses_the_chain_and_gets_the_same_values(monkeypatch):
    keep_recent_chains(1000)
    tokens = _tokens(2, 70)
    router = hash_full_blocks(tokens, 16)
    fresh = extend_block_hashes([], list(tokens), 16, None, 3)  # a node asks for fewer blocks
    hashed = []
    monkeypatch.setattr(block_hash.hashlib, "sha256", lambda *a: hashed.append(a) or pytest.fail("hashed again"))
    reused = extend_block_hashes([], list(tokens), 16, None, 3)
    assert reused == fresh == router[:3] and not hashed
    with pytest.raises(pytest.fail.Exception):
        extend_block_hashes([], list(tokens), 16, 5, 3)  # another adapter: another chain, hashed


def test_bounded_by_blocks_oldest_dropped_first():
    keep_recent_chains(10)
    for seed in range(4):
        hash_full_blocks(_tokens(seed, 64), 16)  # 4 blocks each
    assert len(block_hash._recent_chains) == 2 and block_hash._recent_chain_blocks == 8
    assert (array("q", _tokens(3, 64)).tobytes(), 16, None, "sha256") in block_hash._recent_chains


def test_the_algorithm_is_part_of_the_key():
    keep_recent_chains(1000)
    tokens = _tokens(5, 64)
    sha, xx = hash_full_blocks(tokens, 16), hash_full_blocks(tokens, 16, algo="xxhash")
    assert [b.hash_value for b in sha] != [b.hash_value for b in xx]
    assert extend_block_hashes([], list(tokens), 16, None, 4, "xxhash") == xx
    assert extend_block_hashes([], list(tokens), 16, None, 4) == sha


def test_on_or_off_the_same_chains_and_the_same_errors():
    tokens = _tokens(4, 70)
    cases = [tokens, [*tokens[:64], 2**70], [True, *tokens[1:]]]  # an id past int64 in the partial tail; a bool
    off = [hash_full_blocks(t, 16) for t in cases]
    with pytest.raises(TypeError):
        hash_full_blocks([0.5, *tokens[1:]], 16)
    keep_recent_chains(1000)
    assert [hash_full_blocks(t, 16) for t in cases] == off
    assert [extend_block_hashes([], list(t), 16, None, 4) for t in cases] == [chain[:4] for chain in off]
    with pytest.raises(TypeError):
        hash_full_blocks([0.5, *tokens[1:]], 16)


@pytest.mark.parametrize(
    "tokens",
    [[0, 1, 2**63 - 1], [5, -1, 7], [2**63], [2**64], [True, 3], [1.0], ["7"], list(range(40))],
    ids=repr,
)
def test_token_bytes_are_the_int64_bytes_or_none(tokens):
    """_token_bytes' unsigned fast path writes what array("q") does, and gives None where that raises."""
    try:
        expected = array("q", tokens).tobytes()
    except (TypeError, OverflowError):
        expected = None
    assert block_hash._token_bytes(tokens) == expected
