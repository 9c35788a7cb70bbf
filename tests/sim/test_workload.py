from __future__ import annotations

import pytest

from sim.workload import PromptFactory, TraceRequest, load_trace, merge, scale_to_load, synthetic


def test_azure_and_mooncake_traces_load(traces_dir):
    conv = load_trace("conv", traces_dir)
    assert len(conv.requests) == 19366 and conv.requests[0].arrival_s == 0.0
    assert conv.mean_prompt_tokens == pytest.approx(1155, rel=0.01)
    mooncake = load_trace("mooncake", traces_dir)
    assert len(mooncake.requests) == 3993 and all(r.hash_ids for r in mooncake.requests[:10])
    both = merge([conv.window(10), load_trace("code", traces_dir).window(10)])
    assert {r.traffic_class for r in both.requests} == {"conv", "code"}


def test_equal_hash_ids_give_equal_token_blocks_and_others_are_unique():
    factory = PromptFactory(vocab_size=1000, seed=3)
    a = factory.prompt_token_ids(TraceRequest(0, 1100, 1, hash_ids=(7, 8, 9)), 0)
    b = factory.prompt_token_ids(TraceRequest(0, 700, 1, hash_ids=(7, 8)), 1)
    c = factory.prompt_token_ids(TraceRequest(0, 700, 1, hash_ids=(7, 5)), 2)
    assert len(a) == 1100 and len(b) == 700
    assert a[:700] == b and c[:512] == a[:512] and c[512:] != a[512:700]
    assert PromptFactory(1000, seed=3).prompt_token_ids(TraceRequest(0, 1100, 1, hash_ids=(7, 8, 9)), 0) == a
    plain = [factory.prompt_token_ids(TraceRequest(0, 64, 1), i) for i in range(2)]
    assert plain[0] != plain[1] and min(plain[0]) >= 10
    # blocks part at their first tokens, and never spell a request's own tokens (another pool)
    assert len({tuple(factory.block(h)[:16]) for h in range(3000)}) == 3000
    assert all(factory.block(h)[3:16] != factory.own_tokens(h, 16)[3:] for h in range(3000))
    assert min(min(factory.block(h)) for h in range(50)) >= 10 and max(max(factory.block(h)) for h in range(50)) < 1000


def test_own_tokens_never_share_a_first_block_and_wrap_round_the_pool():
    factory = PromptFactory(vocab_size=1000, seed=3)
    firsts = {tuple(factory.own_tokens(i, 16)) for i in range(5000)}
    assert len(firsts) == 5000  # the head spells the index: 5,000 distinct first blocks
    long = factory.own_tokens(12, 3 * (1 << 16) + 5)  # longer than the pool: wraps round, still in range
    assert len(long) == 3 * (1 << 16) + 5 and min(long) >= 10 and max(long) < 1000
    assert factory.own_tokens(12, 2) == long[:2] and PromptFactory(1000, seed=3).own_tokens(12, 700) == long[:700]
    assert PromptFactory(1000, seed=4).own_tokens(12, 700)[3:] != long[3:700]  # the seed picks the pool
    with pytest.raises(ValueError):
        PromptFactory(vocab_size=11)


def test_synthetic_arrivals_hit_their_rate_and_burstiness():
    poisson = synthetic(4000, 20.0, seed=1)
    assert poisson.rate_req_per_s == pytest.approx(20.0, rel=0.1)
    assert synthetic(4000, 20.0, seed=1) == poisson
    gamma = synthetic(4000, 20.0, arrival="gamma", cv=4.0, seed=1)
    gaps = [b.arrival_s - a.arrival_s for a, b in zip(gamma.requests, gamma.requests[1:])]
    mean = sum(gaps) / len(gaps)
    cv = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean
    assert cv > 2.5


def test_scale_to_load_sets_the_offered_rate():
    w = synthetic(1000, 5.0, seed=2)
    scaled = scale_to_load(w, 0.8, 100.0)
    assert scaled.rate_req_per_s == pytest.approx(80.0, rel=1e-6)
    assert scaled.time_scale == pytest.approx(80.0 / w.rate_req_per_s)
    assert len(scaled.window(duration_s=1.0).requests) == pytest.approx(81, abs=20)
