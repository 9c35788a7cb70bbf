from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from controlplane.router.policies import make_policy
from controlplane.router.policies.hardware_aware import (
    decode_step_s,
    estimate_decode_step_s,
    estimate_prefill_tok_per_s,
    kv_headroom_tokens,
    predict_cost_s,
    predict_tpot_s,
    predict_ttft_s,
)
from controlplane.router.router_config import RouterConfig

CONFIG = RouterConfig(default_model_params_b=1.0, hardware_aware_use_prefix=False)


def test_estimates_follow_the_documented_formulas():
    assert estimate_prefill_tok_per_s(312.0, 1.0, 0.5) == pytest.approx(0.5 * 312e12 / 2e9)
    # 1B params in bf16 = 2 GB read at 0.75 * 2039 GB/s; compute-bound only at very large batches
    read_s = 2e9 / (2039e9 * 0.75)
    assert estimate_decode_step_s(1, 2039.0, 312.0, 1.0, 2.0, 0.75, 0.5) == pytest.approx(read_s)
    assert estimate_decode_step_s(10_000, 2039.0, 312.0, 1.0, 2.0, 0.75, 0.5) == pytest.approx(
        10_000 * 2e9 / (312e12 * 0.5)
    )


def test_predict_ttft_uses_measured_rate_queue_cache_and_decode_wait(make_node_view):
    node = make_node_view(prefill_tok_per_s=1000.0, queued_prefill_tokens=500, inflight_prefill_tokens=500)
    assert predict_ttft_s(node, 1000, CONFIG) == pytest.approx(2.0)
    assert predict_ttft_s(node, 1000, CONFIG, num_cached_tokens=1000) == pytest.approx(1.001)  # >= 1 token
    busy = replace(node, decode_batch_size=4, decode_step_ms=20.0)
    assert predict_ttft_s(busy, 1000, CONFIG) == pytest.approx(2.0 + 0.020)


def test_predict_tpot_scales_the_measured_step_above_the_weight_read_floor(make_node_view):
    node = make_node_view(decode_batch_size=4, decode_step_ms=20.0)
    floor_s = 2e9 / (2039e9 * 0.75)
    assert predict_tpot_s(node, CONFIG) == pytest.approx(floor_s + (0.020 - floor_s) / 4 * 5)
    assert predict_tpot_s(replace(node, num_inflight=9), CONFIG) > predict_tpot_s(node, CONFIG)
    # unmeasured: the roofline estimate
    assert predict_tpot_s(make_node_view(), CONFIG) == pytest.approx(floor_s)
    assert decode_step_s(node, 4, CONFIG) == pytest.approx(0.020)


def test_kv_headroom(make_node_view):
    node = make_node_view(num_free_device_blocks=10, block_size=16, queued_prefill_tokens=30, inflight_prefill_tokens=2)
    assert kv_headroom_tokens(node) == 160 - 32
    assert kv_headroom_tokens(replace(node, num_swapped=1)) == -math.inf


def test_idle_l4_beats_an_a100_with_a_long_prefill_queue(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("hardware_aware", CONFIG)
    a100 = make_node_view("a100", "a100-80gb", prefill_tok_per_s=20_000.0, queued_prefill_tokens=200_000)
    l4 = make_node_view("l4", "l4")
    request = make_route_request(num_prompt_tokens=500, max_tokens=16)
    assert predict_cost_s(l4, request, CONFIG) < predict_cost_s(a100, request, CONFIG)
    assert policy.choose(request, make_snapshot(a100, l4)) == "l4"
    # a short queue: the A100 is faster again
    short = replace(a100, queued_prefill_tokens=100)
    assert policy.choose(request, make_snapshot(short, l4)) == "a100"


def test_idle_h100_beats_idle_a100_and_l4(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("hardware_aware", CONFIG)
    snap = make_snapshot(
        make_node_view("a100", "a100-80gb"), make_node_view("h100", "h100-sxm"), make_node_view("l4", "l4")
    )
    assert policy.choose(make_route_request(num_prompt_tokens=2000, max_tokens=200), snap) == "h100"


def test_a_node_without_kv_room_is_skipped(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("hardware_aware", CONFIG)
    request = make_route_request(num_prompt_tokens=100, max_tokens=16)
    full = make_node_view("h100", "h100-sxm", num_free_device_blocks=3)  # 48 tokens free
    swapping = make_node_view("h200", "h200", num_swapped=2)
    a100 = make_node_view("a100", "a100-80gb")
    assert policy.choose(request, make_snapshot(full, swapping, a100)) == "a100"
    # everyone is full: the least bad one still serves (it will queue)
    assert policy.choose(request, make_snapshot(full, swapping)) == "h200"
    # can never fit: skipped outright
    assert policy.choose(make_route_request(num_prompt_tokens=9000), make_snapshot(full, swapping)) is None
    assert policy.choose(request, make_snapshot()) is None


def test_prefix_cached_tokens_lower_the_predicted_ttft(make_node_view, make_snapshot, make_route_request):
    config = replace(CONFIG, hardware_aware_use_prefix=True)
    policy = make_policy("hardware_aware", config)
    chain = tuple(range(100, 164))  # 64 blocks = 1024 tokens
    request = make_route_request(num_prompt_tokens=1024, max_tokens=1, block_hashes=chain)
    slow = make_node_view("slow", prefill_tok_per_s=1000.0)
    fast = make_node_view("fast", prefill_tok_per_s=1500.0)
    assert policy.choose(request, make_snapshot(slow, fast)) == "fast"
    policy.on_routed(request, "slow")
    assert policy.choose(request, make_snapshot(slow, fast)) == "slow"  # 1 token to prefill instead of 1024
    policy.on_node_removed("slow")
    assert policy.choose(request, make_snapshot(slow, fast)) == "fast"


@pytest.mark.parametrize("seed", range(5))
def test_vectorised_choice_matches_the_scalar_predictions(seed, make_node_view, make_snapshot, make_route_request):
    rng = random.Random(seed)
    gpus = ["h200", "h100-sxm", "a100-80gb", "a100-40gb", "l40s", "l4", "a10", "t4"]
    nodes = [
        make_node_view(
            f"n{i:02d}",
            rng.choice(gpus),
            max_model_len=rng.choice([2048, 8192]),
            num_free_device_blocks=rng.randrange(0, 4096),
            num_running=rng.randrange(0, 32),
            num_swapped=rng.choice([0, 0, 0, 1]),
            queued_prefill_tokens=rng.randrange(0, 20_000),
            decode_batch_size=rng.randrange(0, 32),
            prefill_tok_per_s=rng.choice([0.0, rng.uniform(1e3, 5e4)]),
            decode_step_ms=rng.choice([0.0, rng.uniform(5, 60)]),
            num_inflight=rng.randrange(0, 40),
            inflight_prefill_tokens=rng.randrange(0, 5000),
        )
        for i in range(40)
    ]
    policy = make_policy("hardware_aware", CONFIG)
    for _ in range(20):
        request = make_route_request(num_prompt_tokens=rng.randrange(1, 6000), max_tokens=rng.randrange(1, 1000))
        costs = {
            v.node_id: predict_cost_s(v, request, CONFIG)
            for v in nodes
            if request.num_prompt_tokens <= min(v.max_model_len - 1, v.num_device_blocks * v.block_size)
        }
        chosen = policy.choose(request, make_snapshot(*nodes))
        assert costs[chosen] == pytest.approx(min(costs.values()), rel=1e-9)
        i = rng.randrange(len(nodes))
        nodes[i] = replace(nodes[i], num_inflight=rng.randrange(0, 40))  # the snapshot changes a little
