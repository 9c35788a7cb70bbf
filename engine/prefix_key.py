"""The key a request's prefix blocks are hashed under (engine/kv/block_hash.py chains every block with it): its LoRA
adapter's id, or, with vLLM's ``cache_salt``, a key of the adapter and the salt together.

A salted key is negative and below -1 (the hashes' "no adapter" key), so it names no adapter, and the same tokens
under another salt, or none, hash to other blocks: a prefix cached for one salt is never a hit for anyone else (the
timing side channel vLLM's ``cache_salt`` closes: a tenant probing whether another's prompt is cached). The router
hashes a prompt under the same key (controlplane/router/block_hashes.py), so its prefix predictions match. 56 bits
of a SHA-256 digest: two salts share a key with probability 2**-56.
"""

from __future__ import annotations

import functools
import hashlib
import struct

_SALT_LABEL = b"silicon-zoo/cache-salt/v1"
_ADAPTER = struct.Struct("<q")


@functools.lru_cache(maxsize=4096)
def cache_key(lora_id: int | None, cache_salt: str | None = None) -> int | None:
    """``lora_id`` when there is no salt; else the salted key (an int64 below -1)."""
    if cache_salt is None:
        return lora_id
    adapter = _ADAPTER.pack(-1 if lora_id is None else lora_id)
    digest = hashlib.sha256(_SALT_LABEL + adapter + cache_salt.encode("utf-8", "surrogatepass")).digest()
    return -2 - int.from_bytes(digest[:7], "little")
