"""vLLM's ``cache_salt``: only requests with the same salt share prefix-cache blocks (engine/prefix_key.py), the
router hashes a prompt under the same key, and a salted request migrates without its KV."""

from __future__ import annotations

import pytest

from backends.fake import build_trivial_engine
from controlplane.router.block_hashes import prompt_block_hashes
from engine.prefix_key import cache_key
from engine.sampling_params import MAX_CACHE_SALT_CHARS, SamplingParams, SamplingParamsError

PROMPT = list(range(10, 74))  # 64 tokens: four full blocks of 16


def _cached(engine, request_id: str, salt: str | None) -> int:
    """Run one request to its end; the prompt tokens its first admission found cached."""
    engine.add_request(PROMPT, SamplingParams(max_tokens=2, ignore_eos=True, cache_salt=salt), req_id=request_id)
    cached = None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.req_id == request_id and cached is None:
                cached = out.num_cached_tokens
    return cached


def test_only_requests_of_the_same_salt_share_cached_blocks():
    engine = build_trivial_engine()
    assert _cached(engine, "a1", "tenant-a") == 0
    assert _cached(engine, "b1", "tenant-b") == 0  # the same tokens, another salt: nothing cached for it
    assert _cached(engine, "n1", None) == 0  # nor for the shared cache
    assert _cached(engine, "a2", "tenant-a") == 48  # its own salt: the full blocks before the last token
    assert _cached(engine, "b2", "tenant-b") == 48
    assert _cached(engine, "n2", None) == 48


def test_the_key_is_the_adapter_without_a_salt_and_a_salted_int64_below_minus_one_with_one():
    assert cache_key(None) is None and cache_key(7) == 7 and cache_key(7, None) == 7
    keys = {cache_key(lora, salt) for lora in (None, 1, 2) for salt in ("a", "b", "x" * MAX_CACHE_SALT_CHARS)}
    assert len(keys) == 9 and all(-(2**63) <= k < -1 for k in keys)
    assert cache_key(1, "a") == cache_key(1, "a")  # deterministic: the router and every node agree


def test_the_router_hashes_a_salted_prompt_as_the_engine_does():
    plain = prompt_block_hashes(PROMPT, 16, None, "sha256")
    salted = prompt_block_hashes(PROMPT, 16, cache_key(None, "s"), "sha256")
    assert len(plain) == len(salted) == 4 and not set(plain) & set(salted)
    assert salted == prompt_block_hashes(PROMPT, 16, cache_key(None, "s"), "sha256")
    xx = prompt_block_hashes(PROMPT, 16, cache_key(None, "s"), "xxhash")
    assert not set(xx) & set(prompt_block_hashes(PROMPT, 16, None, "xxhash"))


def test_a_salt_must_be_a_non_empty_string_within_the_bound():
    for bad in ("", "x" * (MAX_CACHE_SALT_CHARS + 1), 5):
        with pytest.raises(SamplingParamsError, match="cache_salt"):
            SamplingParams(cache_salt=bad)


def test_a_salted_request_migrates_without_its_kv():
    engine = build_trivial_engine()
    for request_id, salt in (("plain", None), ("salted", "s")):
        engine.add_request(PROMPT, SamplingParams(max_tokens=50, ignore_eos=True, cache_salt=salt), req_id=request_id)
    engine.step()
    engine.step()
    assert engine.export_request("plain").block_ids  # its computed blocks go with it
    assert engine.export_request("salted").block_ids == []  # recomputed there: no unsalted copy on another node
