"""Prefix hash chains over full KV blocks.

Block i of a sequence is named by a chain that covers every token before it::

    h0 = H(ROOT, tokens[0:B],   lora)        B = block_size
    h1 = H(h0,   tokens[B:2B],  lora)
    h2 = H(h1,   tokens[2B:3B], lora)        ... only FULL blocks get a hash

So two requests share ``h_i`` exactly when their first ``(i + 1) * B`` tokens (and adapter) agree, which
is when block i's KV is the same. H is SHA-256 truncated to 64 bits by default: stable across processes and hosts,
so a router or another node can compute the same names. A ``BlockHash`` also carries the block's token
ids; equality compares them too, so a 64-bit collision in the chain value alone cannot alias two blocks
whose own tokens differ.

The algorithm is a choice (``HASH_ALGOS``, ``CacheConfig.prefix_hash_algo``), as vLLM's
``--prefix-caching-hash-algo`` (vllm/config/cache.py, v0.16: sha256 | sha256_cbor | xxhash | xxhash_cbor):

    sha256   H(parent, tokens, lora) = SHA-256(parent u64 | lora i64 | tokens as i64)[:8]   (the default)
    xxhash   H(parent, tokens)       = XXH3-64(tokens as i64, seed=parent), the chain rooted at
             XXH3-64(lora i64, seed=XXH3-64(root label)): ~5x faster in Python (one C call per block, no
             buffer joined), not collision-resistant against a chosen prompt: one tenant (vLLM's advice), or
             a simulation (the fleet simulator: its figures come from the cost model, never from a hash value)

Both are stable across processes and hosts; a node says its own in its hello (``KVInfo.prefix_hash_algo``),
and the router names a prompt's blocks with it.
"""

from __future__ import annotations

import functools
import hashlib
import struct
import sys
from array import array
from collections import OrderedDict
from collections.abc import Sequence
from itertools import repeat
from typing import NamedTuple

from engine.config import HASH_ALGOS as HASH_ALGOS  # re-exported: the names this module makes
from engine.config import check_hash_algo

try:
    from xxhash import xxh3_64_intdigest as _xxh3
except ImportError:  # a bare host (the lent GPU machine has torch only): sha256 alone, "xxhash" refused by name
    _xxh3 = None

_ROOT_LABEL = b"silicon-zoo/prefix-root/v1"
_ROOT_HASH_VALUE = int.from_bytes(hashlib.sha256(_ROOT_LABEL).digest()[:8], "little")
_XX_ROOT = _xxh3(_ROOT_LABEL) if _xxh3 is not None else 0
_NO_LORA = -1
_HEADER = struct.Struct("<Qq")  # parent chain value, lora id (-1: none)
_VALUE = struct.Struct("<Q")  # _HEADER's halves
_LORA = struct.Struct("<q")
_LITTLE_ENDIAN = sys.byteorder == "little"  # array("q") writes native int64s: "<q" here
_SIGN_BYTES = slice(7, None, 8) if _LITTLE_ENDIAN else slice(0, None, 8)  # each native int64's most significant byte


class BlockHash(NamedTuple):
    hash_value: int  # 64-bit chain value, covers every token up to the end of this block
    token_ids: tuple[int, ...]  # this block's tokens (len == block_size)
    lora_id: int | None


_new_block_hash = functools.partial(tuple.__new__, BlockHash)  # BlockHash(...) without its Python __new__


@functools.lru_cache(maxsize=1024)
def _xx_root(lora: int) -> int:
    return _xxh3(_LORA.pack(lora), _XX_ROOT)


def _root_value(lora: int, algo: str) -> int:
    """The chain value a sequence's first block chains onto (xxhash: the adapter is folded in here, once)."""
    return _ROOT_HASH_VALUE if algo == "sha256" else _xx_root(lora)


def _chain_value(parent_value: int, lora: int, token_ids: Sequence[int], algo: str) -> int:
    if algo == "xxhash":
        return _xxh3(array("q", token_ids).tobytes(), parent_value)
    digest = hashlib.sha256(_HEADER.pack(parent_value, lora))
    digest.update(array("q", token_ids))
    return int.from_bytes(digest.digest()[:8], "little")


def hash_block_tokens(
    parent: BlockHash | None, token_ids: Sequence[int], lora_id: int | None = None, algo: str = "sha256"
) -> BlockHash:
    """Hash of one full block chained onto its parent's (None for the first block)."""
    lora = _NO_LORA if lora_id is None else lora_id
    check_hash_algo(algo)
    parent_value = _root_value(lora, algo) if parent is None else parent.hash_value
    return _new_block_hash((_chain_value(parent_value, lora, token_ids, algo), tuple(token_ids), lora_id))


@functools.lru_cache(maxsize=64)
def _repeated_block(token_id: int, block_size: int) -> tuple[tuple[int, ...], bytes]:
    """A block of ``token_id`` at every position, and its tokens as the int64s the chain hashes."""
    block = (token_id,) * block_size
    return block, array("q", block).tobytes()


def hash_repeated_block(
    parent: BlockHash | None, token_id: int, block_size: int, lora_id: int | None = None, algo: str = "sha256"
) -> BlockHash:
    """``hash_block_tokens(parent, (token_id,) * block_size, lora_id, algo)``, its bytes made once per token: the
    blocks a decoding request fills with a runner's fixed token (the fleet simulator's decode rows,
    engine/decode_cohort.py), named without their tokens being read."""
    if algo != "sha256" and (algo != "xxhash" or _xxh3 is None):
        check_hash_algo(algo)
    block, data = _repeated_block(token_id, block_size)
    lora = _NO_LORA if lora_id is None else lora_id
    parent_value = _root_value(lora, algo) if parent is None else parent.hash_value
    if algo == "xxhash":
        value = _xxh3(data, parent_value)
    else:
        value = int.from_bytes(hashlib.sha256(_HEADER.pack(parent_value, lora) + data).digest()[:8], "little")
    return _new_block_hash((value, block, lora_id))


def extend_block_hashes(
    block_hashes: list[BlockHash],
    token_ids: Sequence[int],
    block_size: int,
    lora_id: int | None,
    num_blocks: int,
    algo: str = "sha256",
) -> list[BlockHash]:
    """Grow ``block_hashes`` (the chain of ``token_ids``' first blocks, by ``algo``) in place to ``num_blocks``
    entries, or to the number of full blocks in ``token_ids`` if that is smaller. Returns it."""
    if algo != "sha256" and (algo != "xxhash" or _xxh3 is None):
        check_hash_algo(algo)
    num_blocks = min(num_blocks, len(token_ids) // block_size)
    i = len(block_hashes)
    if i >= num_blocks:
        return block_hashes
    data = None
    if i == 0 and _recent_chains:  # the same tokens' chain, made moments ago (a router and a node in one process)
        data = _token_bytes(token_ids)
        chain = None if data is None else _recent_chains.get((data, block_size, lora_id, algo))
        if chain is not None:
            block_hashes.extend(chain[:num_blocks])
            return block_hashes
    return _extend(block_hashes, token_ids, block_size, lora_id, i, num_blocks, algo, data)


def _token_bytes(token_ids: Sequence[int]) -> bytes | None:
    """Every token as the int64 ``_chain_value`` hashes (None where one is not an int64): the memo's key, and the
    bytes the chain hashes (a slice of them)."""
    try:
        data = array("Q", token_ids).tobytes()  # ~3x faster than "q", which parses each token as a C argument
    except (TypeError, OverflowError):  # a negative token, or not an integer: "q" decides
        pass
    else:
        if data[_SIGN_BYTES].isascii():  # every token below 2**63: the bytes "q" writes
            return data
    try:
        return array("q", token_ids).tobytes()
    except (TypeError, OverflowError):
        return None


def _extend(
    block_hashes: list[BlockHash],
    token_ids: Sequence[int],
    block_size: int,
    lora_id: int | None,
    i: int,
    num_blocks: int,
    algo: str,
    data: bytes | None = None,
) -> list[BlockHash]:
    """``extend_block_hashes`` from block ``i`` (its length) to ``num_blocks`` (> i, full blocks), computed
    (``data``: ``_token_bytes(token_ids)`` where the caller has them)."""
    lora = _NO_LORA if lora_id is None else lora_id
    parent_value = block_hashes[-1].hash_value if block_hashes else _root_value(lora, algo)
    if num_blocks - i == 1:  # one block (a decoding request's): no shared buffer to slice
        block = tuple(token_ids[i * block_size : num_blocks * block_size])
        if algo == "xxhash":
            tokens = _token_struct(block_size).pack(*block) if _LITTLE_ENDIAN else array("q", block).tobytes()
            value = _xxh3(tokens, parent_value)
        else:
            if _LITTLE_ENDIAN:  # header and int64 tokens in one pack: the bytes _chain_value hashes
                data = _block_struct(block_size).pack(parent_value, lora, *block)
            else:
                data = _HEADER.pack(parent_value, lora) + array("q", block).tobytes()
            value = int.from_bytes(hashlib.sha256(data).digest()[:8], "little")
        block_hashes.append(_new_block_hash((value, block, lora_id)))
        return block_hashes
    span = token_ids[i * block_size : num_blocks * block_size]
    num_bytes = 8 * block_size
    if data is None:
        data = _token_bytes(span)
        if data is None:
            data = array("q", span).tobytes()  # raises: a full block holds a token that is not an int64
    else:
        data = data[i * num_bytes : num_blocks * num_bytes]
    if algo == "xxhash":
        values = _xx_chain_values(parent_value, data, num_bytes)
    else:
        values = _chain_values(parent_value, lora, data, num_bytes)
    # each block's tokens as a tuple (zip of one iterator ``block_size`` times), each BlockHash made in C
    block_hashes.extend(map(_new_block_hash, zip(values, zip(*[iter(span)] * block_size), repeat(lora_id))))
    return block_hashes


@functools.cache
def _block_struct(block_size: int) -> struct.Struct:
    """A block's whole message, header and tokens (little-endian hosts)."""
    return struct.Struct(f"<Qq{block_size}q")


@functools.cache
def _token_struct(block_size: int) -> struct.Struct:
    """A block's tokens as int64s (little-endian hosts: the bytes ``array("q")`` writes)."""
    return struct.Struct(f"<{block_size}q")


def _chain_values(parent_value: int, lora: int, data: bytes, num_bytes: int) -> tuple[int, ...]:
    """The chain values of the blocks of ``data`` (each ``num_bytes`` long: the int64 tokens ``_chain_value``
    hashes) after ``parent_value``: the same bytes hashed, one buffer sliced per block. A block's header is its
    parent's 8-byte little-endian value, which is the first 8 bytes of the parent's digest as they are: they
    chain without an int in between, and the ints are read in one ``unpack`` at the end."""
    sha256 = hashlib.sha256
    lora_bytes = _LORA.pack(lora)
    parent = _VALUE.pack(parent_value)
    digests = []
    append = digests.append
    for first in range(0, len(data), num_bytes):
        parent = sha256(parent + lora_bytes + data[first : first + num_bytes]).digest()[:8]
        append(parent)
    return struct.unpack(f"<{len(digests)}Q", b"".join(digests))


def _xx_chain_values(parent_value: int, data: bytes, num_bytes: int) -> list[int]:
    """``_chain_values`` for xxhash: each block's tokens hashed with its parent's value as the seed."""
    xxh3 = _xxh3
    values: list[int] = []
    append = values.append
    for first in range(0, len(data), num_bytes):
        parent_value = xxh3(data[first : first + num_bytes], parent_value)
        append(parent_value)
    return values


# The chains hash_full_blocks made last, by (tokens, block size, adapter), where the owner of the process turns
# it on (``keep_recent_chains``): where a router and the nodes share a process (the fleet simulator), a node's
# first lookup of a prompt reuses the router's chain instead of hashing it again (a queued request looks its
# prompt up when it reaches the head of its node's queue: under overload, thousands of prompts later). A memo of
# a pure function: it changes no value; bounded by the blocks it holds (~400 bytes each), oldest dropped first.
# keyed by (the tokens as int64 bytes: _token_bytes, block size, adapter, algorithm), oldest first
_recent_chains: OrderedDict[tuple[bytes, int, int | None, str], list[BlockHash]] = OrderedDict()
_recent_chain_blocks_kept = 0  # off
_recent_chain_blocks = 0


def keep_recent_chains(max_blocks: int) -> None:
    """Keep the chains ``hash_full_blocks`` makes, up to ``max_blocks`` blocks in all (0: none, and forget them)."""
    global _recent_chain_blocks_kept, _recent_chain_blocks
    _recent_chain_blocks_kept = max(0, max_blocks)
    _recent_chains.clear()
    _recent_chain_blocks = 0


def hash_full_blocks(
    token_ids: Sequence[int], block_size: int, lora_id: int | None = None, algo: str = "sha256"
) -> list[BlockHash]:
    """The chain (by ``algo``) of every full block of ``token_ids``."""
    global _recent_chain_blocks
    if not _recent_chain_blocks_kept:
        return extend_block_hashes([], token_ids, block_size, lora_id, len(token_ids) // block_size, algo)
    check_hash_algo(algo)
    data = _token_bytes(token_ids)
    if data is None:  # not all int64s: hashed as ever (an error where a full block holds one), not kept
        return extend_block_hashes([], token_ids, block_size, lora_id, len(token_ids) // block_size, algo)
    key = (data, block_size, lora_id, algo)  # bytes: hashed and compared in C, freed without touching a token
    chain = _recent_chains.get(key)
    if chain is None:
        num_blocks = len(token_ids) // block_size
        chain = _extend([], token_ids, block_size, lora_id, 0, num_blocks, algo, data) if num_blocks else []
        _recent_chains[key] = chain
        _recent_chain_blocks += len(chain)
        while _recent_chain_blocks > _recent_chain_blocks_kept and len(_recent_chains) > 1:
            _recent_chain_blocks -= len(_recent_chains.popitem(last=False)[1])  # O(1), unlike a dict's first key
    return list(chain)
