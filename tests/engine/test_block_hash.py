from __future__ import annotations

import struct

import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv import extend_block_hashes, hash_block_tokens, hash_full_blocks
from engine.kv.block_hash import HASH_ALGOS, check_hash_algo, hash_repeated_block


def test_only_full_blocks_are_hashed():
    assert len(hash_full_blocks(list(range(11)), 4)) == 2
    assert hash_full_blocks([1, 2, 3], 4) == []


def test_chain_depends_on_every_earlier_token():
    a = hash_full_blocks([1, 2, 3, 4, 5, 6, 7, 8], 4)
    b = hash_full_blocks([9, 2, 3, 4, 5, 6, 7, 8], 4)
    assert a[0] != b[0]
    assert a[1].token_ids == b[1].token_ids and a[1] != b[1]


def test_same_prefix_same_chain_and_lora_separates():
    a = hash_full_blocks([1, 2, 3, 4, 5, 6, 7, 8, 9], 4)
    b = hash_full_blocks([1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0], 4)
    assert a == b[:2]
    assert hash_full_blocks([1, 2, 3, 4], 4, lora_id=1) != hash_full_blocks([1, 2, 3, 4], 4)


def test_hash_is_stable_across_processes_and_hosts():
    # SHA-256 based, not Python's per-process salted hash(): routers on other hosts compute the same names
    first = hash_block_tokens(None, [1, 2, 3, 4])
    assert first.hash_value == 6432690096285770582
    assert hash_block_tokens(first, [5, 6, 7, 8], lora_id=3).hash_value == 18366671934221209715


def test_extend_grows_in_place_and_caps_at_full_blocks():
    tokens = list(range(10))
    chain = extend_block_hashes([], tokens, 4, None, 1)
    assert len(chain) == 1
    extend_block_hashes(chain, tokens, 4, None, 5)
    assert chain == hash_full_blocks(tokens, 4)


def test_xxhash_is_stable_too_and_names_other_values():
    # XXH3-64 seeded by the parent: the same on every host (pinned), and not the SHA-256 names
    first = hash_block_tokens(None, [1, 2, 3, 4], algo="xxhash")
    assert first.hash_value == 18393368043903125860
    assert hash_block_tokens(first, [5, 6, 7, 8], lora_id=3, algo="xxhash").hash_value == 1869737545622064807
    # the documented rule, spelt out: the root label, then the adapter (-1: none), then the block, as seeds
    root = xxhash.xxh3_64_intdigest(struct.pack("<q", -1), seed=xxhash.xxh3_64_intdigest(b"silicon-zoo/prefix-root/v1"))
    assert first.hash_value == xxhash.xxh3_64_intdigest(struct.pack("<4q", 1, 2, 3, 4), seed=root)
    assert first.hash_value != hash_block_tokens(None, [1, 2, 3, 4]).hash_value


@pytest.mark.parametrize("algo", HASH_ALGOS)
def test_each_algorithm_chains_and_separates_adapters(algo):
    a = hash_full_blocks([1, 2, 3, 4, 5, 6, 7, 8], 4, algo=algo)
    b = hash_full_blocks([9, 2, 3, 4, 5, 6, 7, 8], 4, algo=algo)
    assert a[0] != b[0] and a[1].token_ids == b[1].token_ids and a[1].hash_value != b[1].hash_value
    lora = hash_full_blocks([1, 2, 3, 4, 5, 6, 7, 8], 4, lora_id=1, algo=algo)
    assert all(x.hash_value != y.hash_value for x, y in zip(a, lora))


def test_an_unknown_algorithm_is_refused_by_name():
    with pytest.raises(ValueError, match=r"sha256.*xxhash.*'md5'"):
        check_hash_algo("md5")
    for call in (
        lambda: hash_full_blocks([1, 2, 3, 4], 4, algo="md5"),
        lambda: extend_block_hashes([], [1, 2, 3, 4], 4, None, 1, "md5"),
        lambda: hash_block_tokens(None, [1, 2, 3, 4], algo="md5"),
        lambda: hash_block_tokens(hash_block_tokens(None, [1, 2, 3, 4]), [5, 6, 7, 8], algo="md5"),
    ):
        with pytest.raises(ValueError, match="md5"):
            call()


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 2**40), max_size=120),
    block_size=st.sampled_from([1, 4, 16]),
    have=st.integers(0, 10),
    want=st.integers(0, 40),
    lora_id=st.none() | st.integers(0, 5),
    algo=st.sampled_from(HASH_ALGOS),
)
def test_extend_equals_block_by_block_chaining(tokens, block_size, have, want, lora_id, algo):
    """The bulk hashing in extend_block_hashes names every block exactly as hash_block_tokens chained one by one."""
    chain, parent = [], None
    for start in range(0, len(tokens) - block_size + 1, block_size):
        parent = hash_block_tokens(parent, tokens[start : start + block_size], lora_id, algo)
        chain.append(parent)
    prefix = chain[: min(have, len(chain))]
    got = extend_block_hashes(list(prefix), tokens, block_size, lora_id, want, algo)
    assert got == chain[: max(len(prefix), want)]


@settings(max_examples=40, deadline=None)
@given(
    parent_tokens=st.none() | st.lists(st.integers(0, 2**40), min_size=4, max_size=4),
    token_id=st.integers(0, 2**40),
    block_size=st.sampled_from([1, 4, 16]),
    lora_id=st.none() | st.integers(0, 5),
    algo=st.sampled_from(HASH_ALGOS),
)
def test_a_repeated_block_is_named_as_its_tokens(parent_tokens, token_id, block_size, lora_id, algo):
    """hash_repeated_block (a decode row's block of the runner's fixed token, named without its tokens) is
    hash_block_tokens of that block; an unknown algorithm is refused by name there too."""
    parent = None if parent_tokens is None else hash_block_tokens(None, parent_tokens, lora_id, algo)
    got = hash_repeated_block(parent, token_id, block_size, lora_id, algo)
    assert got == hash_block_tokens(parent, [token_id] * block_size, lora_id, algo)
    assert got.hash_value == hash_block_tokens(parent, [token_id] * block_size, lora_id, algo).hash_value
    with pytest.raises(ValueError, match="md5"):
        hash_repeated_block(parent, token_id, block_size, lora_id, "md5")
