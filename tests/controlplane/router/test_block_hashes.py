from __future__ import annotations

import pytest

from controlplane.router.block_hashes import prompt_block_hashes
from engine.kv.block_hash import hash_full_blocks


def test_same_chain_as_the_engine_kv_manager():
    tokens = list(range(1000, 1050))
    chain = prompt_block_hashes(tokens, 16)
    assert chain == tuple(b.hash_value for b in hash_full_blocks(tokens, 16))
    assert len(chain) == 3  # 50 tokens: 3 full blocks, the partial one has no name


def test_shared_prefix_shares_leading_hashes():
    a = prompt_block_hashes([1] * 32 + [2] * 16, 16)
    b = prompt_block_hashes([1] * 32 + [3] * 16, 16)
    assert a[:2] == b[:2] and a[2] != b[2]
    assert prompt_block_hashes([1] * 32, 16, lora_id=3)[0] != a[0]
    assert prompt_block_hashes([1] * 15, 16) == ()
    with pytest.raises(ValueError):
        prompt_block_hashes([1], 0)
