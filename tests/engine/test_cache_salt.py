"""vLLM's ``cache_salt``: only requests with the same salt share prefix-cache blocks (engine/prefix_key.py), the
router hashes a prompt under the same key, and a salted request migrates with its KV, keyed under its salt there."""

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


def test_a_salted_request_migrates_with_its_kv_which_lands_under_its_salt():
    engine = build_trivial_engine()
    for request_id, salt in (("plain", None), ("salted", "s")):
        engine.add_request(PROMPT, SamplingParams(max_tokens=50, ignore_eos=True, cache_salt=salt), req_id=request_id)
    engine.step()
    engine.step()
    assert engine.export_request("plain").block_ids  # its computed blocks go with it
    moved = engine.export_request("salted")
    assert len(moved.block_ids) == 4  # and so do a salted one's: the target keys them under the salt
    target = build_trivial_engine()
    assert all(b >= 0 for b in target.import_prefix(moved.token_ids, 4, "s"))
    assert _cached_on(target, "n", moved.token_ids, None) == 0  # no unsalted copy landed
    assert _cached_on(target, "t", moved.token_ids, "t") == 0
    assert _cached_on(target, "s", moved.token_ids, "s") == 64  # the four moved blocks


def _cached_on(engine, request_id: str, tokens: list[int], salt: str | None) -> int:
    engine.add_request(tokens, SamplingParams(max_tokens=1, ignore_eos=True, cache_salt=salt), req_id=request_id)
    (first,) = [out for out in engine.step() if out.req_id == request_id]
    return first.num_cached_tokens


def test_a_lora_request_migrates_with_its_kv_which_lands_under_its_adapter():
    """Its blocks carry its adapter's id (the same on every node: engine/lora.py); the target keys them under that
    adapter, so the same tokens on the base model, another adapter, or the adapter with a salt hit none of them."""
    from backends.sim.engine import build_sim_engine
    from engine.clock import ManualClock
    from engine.lora import LoraConfig, LoraRequest

    def engine_with(*names):
        engine = build_sim_engine(
            "sim:llama-3-8b", "h100-sxm", realtime=False, clock=ManualClock(), lora_config=LoraConfig(max_loras=2)
        )
        for name in names:
            engine.add_lora(LoraRequest(name, f"sim://{name}"))
        return engine

    engine = engine_with("sql")
    params = SamplingParams(max_tokens=50, ignore_eos=True)
    engine.add_request(PROMPT, params, req_id="base")
    engine.add_request(PROMPT, params, req_id="adapted", lora_name="sql", priority=7)
    for _ in range(3):
        engine.step()
    base = engine.export_request("base")
    assert base.block_ids and base.lora_id is None and base.priority == 0
    moved = engine.export_request("adapted")
    sql = LoraRequest("sql", "sim://sql")
    assert moved.lora_id == sql.lora_id and moved.token_ids[: len(PROMPT)] == PROMPT and moved.priority == 7
    assert len(moved.block_ids) >= 4  # the prompt's four full blocks go along

    def cached(target, request_id: str, lora_name: str | None, salt: str | None = None) -> int:
        once = SamplingParams(max_tokens=1, ignore_eos=True, cache_salt=salt)
        target.add_request(moved.token_ids, once, req_id=request_id, lora_name=lora_name)
        (first,) = [out for out in target.step() if out.req_id == request_id]
        return first.num_cached_tokens

    target = engine_with("chat", "sql")  # another adapter first: ids, not load order, key the blocks
    assert all(b >= 0 for b in target.import_prefix(moved.token_ids, 4, None, moved.lora_id))
    assert cached(target, "on-base", None) == 0
    assert cached(target, "on-chat", "chat") == 0
    assert cached(target, "salted", "sql", salt="s") == 0
    assert cached(target, "on-sql", "sql") == 64  # the four moved blocks
