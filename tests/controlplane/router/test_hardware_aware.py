from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from controlplane.router.policies import make_policy
from controlplane.router.policies.cost_reference import lost_cause_fastest_rate, predict_cost_s, triage_spares_capable
from controlplane.router.policies.node_predictions import (
    decode_step_s,
    estimate_decode_step_s,
    estimate_prefill_tok_per_s,
    kv_headroom_tokens,
    predict_tpot_s,
    predict_ttft_s,
)
from controlplane.router.router_config import RouterConfig

CONFIG = RouterConfig(default_model_params_b=1.0, hardware_aware_use_prefix=False, slo_sacrifice_long_share=0.0)


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


def test_predict_tpot_spreads_the_prefill_backlog_over_the_decode_steps(make_node_view):
    # 12,000 prompt tokens/s (an A100-40GB's measured rate): a 2048-token chunk takes ~171 ms
    idle = make_node_view(prefill_tok_per_s=12_000.0, decode_batch_size=4, decode_step_ms=20.0)
    step_s = predict_tpot_s(idle, CONFIG, max_tokens=100)
    assert step_s == pytest.approx(decode_step_s(idle, 5, CONFIG))
    fed = replace(idle, queued_prefill_tokens=4000, inflight_prefill_tokens=2000)  # 0.5 s of prefill
    assert predict_tpot_s(fed, CONFIG, max_tokens=101) == pytest.approx(step_s + 0.5 / 100)
    # a short answer: at most one chunk rides on each of its decode steps
    assert predict_tpot_s(fed, CONFIG, max_tokens=2) == pytest.approx(step_s + 2048 / 12_000.0)


def test_kv_headroom_sets_aside_the_growth_of_running_requests(make_node_view):
    config = replace(CONFIG, kv_reserve_running_tokens=100)
    node = make_node_view(
        num_free_device_blocks=100, block_size=16, queued_prefill_tokens=30, inflight_prefill_tokens=2
    )
    assert kv_headroom_tokens(node, config) == 1600 - 32
    assert kv_headroom_tokens(replace(node, num_running=3, num_waiting=1), config) == 1600 - 32 - 4 * 100
    assert kv_headroom_tokens(replace(node, num_inflight=6, num_running=3), config) == 1600 - 32 - 6 * 100
    assert kv_headroom_tokens(replace(node, num_swapped=1), config) == -math.inf


def test_a_node_whose_running_requests_will_fill_its_kv_loses(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("hardware_aware", CONFIG)
    # room for the prompt and its answer today, not once its 40 running requests grow by 128 tokens each
    h100 = make_node_view("h100", "h100-sxm", num_free_device_blocks=200, num_running=40, num_inflight=40)
    a100 = make_node_view("a100", "a100-80gb", num_running=40, num_inflight=40)
    request = make_route_request(num_prompt_tokens=1000, max_tokens=300)
    assert kv_headroom_tokens(h100, CONFIG) < 1300 <= 200 * 16
    assert policy.choose(request, make_snapshot(h100, a100)) == "a100"
    assert policy.choose(request, make_snapshot(replace(h100, num_running=0, num_inflight=0), a100)) == "h100"


def test_a_slower_node_that_meets_the_ttft_target_beats_a_faster_one_that_misses_it(
    make_node_view, make_snapshot, make_route_request
):
    policy = make_policy("hardware_aware", CONFIG)
    # H100: 1.2 s of queued prefill; L4: idle, 0.4 s for this prompt alone (and a slower decode)
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=40_000.0, queued_prefill_tokens=48_000)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0)
    request = make_route_request(num_prompt_tokens=1600, max_tokens=200)
    assert predict_ttft_s(h100, 1600, CONFIG) > CONFIG.slo_ttft_s >= predict_ttft_s(l4, 1600, CONFIG)
    assert policy.choose(request, make_snapshot(h100, l4)) == "l4"


def test_queued_prefill_that_breaks_the_tpot_target_loses_to_a_slower_idle_node(
    make_node_view, make_snapshot, make_route_request
):
    config = replace(CONFIG, slo_tpot_miss_penalty_s=10.0, tpot_weight=0.0)
    policy = make_policy("hardware_aware", config)
    # A100: 0.25 s of prefill queued; on a 4-token answer its decode steps each carry ~83 ms of it on top
    # of a ~45 ms step: over 100 ms. The idle L4 is slower to the first token but meets both targets.
    a100 = make_node_view(
        "a100", "a100-40gb", prefill_tok_per_s=12_000.0, queued_prefill_tokens=3000, decode_batch_size=8,
        decode_step_ms=40.0,
    )  # fmt: skip
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=2_000.0, decode_step_ms=30.0, decode_batch_size=1)
    request = make_route_request(num_prompt_tokens=800, max_tokens=4)
    assert predict_ttft_s(a100, 800, config) < predict_ttft_s(l4, 800, config) <= config.slo_ttft_s
    assert predict_tpot_s(a100, config, 4) > config.slo_tpot_s >= predict_tpot_s(l4, config, 4)
    assert predict_tpot_s(replace(a100, queued_prefill_tokens=0), config, 4) <= config.slo_tpot_s
    assert policy.choose(request, make_snapshot(a100, l4)) == "l4"
    # without the queue the A100 meets the targets and is quicker to the first token
    assert policy.choose(request, make_snapshot(replace(a100, queued_prefill_tokens=0), l4)) == "a100"


def test_idle_l4_beats_an_a100_with_a_long_prefill_queue(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("hardware_aware", CONFIG)
    a100 = make_node_view("a100", "a100-80gb", prefill_tok_per_s=20_000.0, queued_prefill_tokens=200_000)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0)
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
    # everyone is full: the least bad one still serves (it will queue): both reach the first token as soon
    # (same peak compute) and decode within the TPOT target, so the first listed wins; with the whole TPOT
    # priced (tpot_excess_only off), the H200's faster decode
    assert policy.choose(request, make_snapshot(full, swapping)) == "h100"
    assert policy.choose(request, make_snapshot(swapping, full)) == "h200"
    whole_tpot = make_policy("hardware_aware", replace(CONFIG, tpot_excess_only=False))
    assert whole_tpot.choose(request, make_snapshot(full, swapping)) == "h200"
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


@pytest.mark.parametrize(
    ("sacrifice_weight", "sacrifice_max_ttft_s", "sacrifice_max_rate_ratio"),
    [(0.0, 0.0, 0.0), (10.0, 0.0, 0.0), (10.0, 2.0, 0.0), (10.0, 0.0, 0.2), (10.0, 2.0, 0.4)],
)
@pytest.mark.parametrize("tpot_penalty_s", [0.0, 10.0])
@pytest.mark.parametrize("seed", range(5))
def test_vectorised_choice_matches_the_scalar_predictions(
    seed,
    tpot_penalty_s,
    sacrifice_weight,
    sacrifice_max_ttft_s,
    sacrifice_max_rate_ratio,
    make_node_view,
    make_snapshot,
    make_route_request,
):
    config = replace(
        CONFIG,
        slo_tpot_miss_penalty_s=tpot_penalty_s,
        slo_sacrifice_weight=sacrifice_weight,
        slo_sacrifice_max_ttft_s=sacrifice_max_ttft_s,
        slo_sacrifice_max_rate_ratio=sacrifice_max_rate_ratio,
    )
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
            num_waiting=rng.randrange(0, 8),
            num_inflight=rng.randrange(0, 40),
            inflight_prefill_tokens=rng.randrange(0, 5000),
            lora_resident=tuple(rng.sample(["a", "b", "c"], rng.randrange(0, 3))),
            lora_load_s=rng.choice([0.0, rng.uniform(0.001, 2.0)]),
        )
        for i in range(40)
    ]
    policy = make_policy("hardware_aware", config)
    for _ in range(20):
        request = make_route_request(
            num_prompt_tokens=rng.randrange(1, 6000),
            max_tokens=rng.randrange(1, 1000),
            lora_name=rng.choice([None, "a", "b", "c", "d"]),
        )
        spare = triage_spares_capable(nodes, request.num_prompt_tokens, config, config.slo_ttft_s)
        lost = lost_cause_fastest_rate(nodes, request, config, config.slo_ttft_s)
        costs = {
            v.node_id: predict_cost_s(v, request, config, 0, spare, lost)
            for v in nodes
            if request.num_prompt_tokens <= min(v.max_model_len - 1, v.num_device_blocks * v.block_size)
        }
        chosen = policy.choose(request, make_snapshot(*nodes))
        assert costs[chosen] == pytest.approx(min(costs.values()), rel=1e-9)
        i = rng.randrange(len(nodes))
        nodes[i] = replace(nodes[i], num_inflight=rng.randrange(0, 40))  # the snapshot changes a little


def test_a_cold_adapter_load_is_priced_measured_or_estimated(make_node_view, make_snapshot, make_route_request):
    """Two equal nodes: the one holding the adapter wins; a measured slow load (or, unmeasured, the estimate)
    is what the other would add to the TTFT, and a long enough queue on the holder outweighs it."""
    config = replace(CONFIG, lora_load_estimate_s=0.5)
    holder = make_node_view("holder", "a100-40gb", prefill_tok_per_s=10_000.0, lora_resident=("a",))
    cold = make_node_view("cold", "a100-40gb", prefill_tok_per_s=10_000.0, lora_load_s=0.2)
    policy = make_policy("hardware_aware", config)
    request = make_route_request(num_prompt_tokens=100, max_tokens=1, lora_name="a")
    assert policy.choose(request, make_snapshot(holder, cold)) == "holder"
    assert predict_cost_s(cold, request, config) - predict_cost_s(holder, request, config) == pytest.approx(0.2)
    unmeasured = replace(cold, lora_load_s=0.0)
    assert predict_cost_s(unmeasured, request, config) - predict_cost_s(holder, request, config) == pytest.approx(0.5)
    busy_holder = replace(holder, queued_prefill_tokens=3000)  # 0.3 s of prefill ahead of it > a 0.2 s load
    assert policy.choose(request, make_snapshot(busy_holder, cold)) == "cold"
    base = make_route_request(num_prompt_tokens=100, max_tokens=1)  # no adapter: nothing to load anywhere
    assert predict_cost_s(cold, base, config) == pytest.approx(predict_cost_s(holder, base, config))
