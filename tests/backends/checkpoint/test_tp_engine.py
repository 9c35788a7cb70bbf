"""`zoo agent --tp N` on torch: build_engine starts the follower ranks as child processes and the engine's
greedy output equals TP=1's. (Here because it needs a checkpoint file: the tiny GGUF this folder writes.)"""

from __future__ import annotations

import pytest

from backends.builder import build_engine
from engine.config import CacheConfig, EngineConfig
from engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def _config(path, tp: int, **tp_args) -> EngineConfig:
    cache = CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=16)
    return EngineConfig(model=str(path), num_threads=1, tp=tp, cache=cache, **tp_args)


def _greedy_ids(engine, prompts) -> list[list[int]]:
    ids = [engine.add_request(p, GREEDY) for p in prompts]
    out: dict[str, list[int]] = {i: [] for i in ids}
    while engine.has_unfinished_requests():
        for o in engine.step():
            out[o.req_id] += o.new_token_ids
    return [out[i] for i in ids]


def test_engine_with_tp2_matches_tp1_and_stops_its_followers(tiny_gguf_path):
    prompts = [[5, 6, 7, 8, 9], [10, 11, 12]]
    ref = _greedy_ids(build_engine(_config(tiny_gguf_path, 1), progress=False), prompts)
    engine = build_engine(_config(tiny_gguf_path, 2, tp_allreduce="hierarchical", tp_domain_size=1), progress=False)
    leader = engine.runner
    try:
        assert len(leader.processes) == 1 and leader.processes[0].poll() is None
        got = _greedy_ids(engine, prompts)
    finally:
        leader.close()
    assert got == ref and all(len(ids) == 6 for ids in ref)
    assert leader.processes[0].wait(timeout=30) == 0  # the follower left on "stop", cleanly


def test_engine_refuses_a_split_the_model_cannot_take(tiny_gguf_path):
    with pytest.raises(ValueError, match="num_key_value_heads 2 is not a multiple of tp 3"):
        build_engine(_config(tiny_gguf_path, 3), progress=False)
