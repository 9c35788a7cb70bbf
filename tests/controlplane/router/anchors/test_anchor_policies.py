"""Each anchor's decisions on small hand-made states against its published rule."""

from __future__ import annotations

import pytest

from controlplane.router.policies import make_policy
from controlplane.router.policies.anchors import ANCHOR_POLICIES
from controlplane.router.policies.anchors.dynamo import DynamoKvPolicy
from controlplane.router.policies.anchors.llm_d import LlmdPolicy
from controlplane.router.policies.anchors.sglang import SglangCacheAwarePolicy, SglangConfig


def test_anchors_are_known_by_name():
    for name in ANCHOR_POLICIES:
        assert make_policy(name).name == name


def test_vllm_least_outstanding_is_least_requests(make_node_view, make_snapshot, make_route_request):
    snap = make_snapshot(
        make_node_view("c", num_inflight=1), make_node_view("b", num_inflight=1), make_node_view("a", num_inflight=3)
    )
    assert make_policy("vllm_least_outstanding").choose(make_route_request(), snap) == "b"
    assert make_policy("least_requests").choose(make_route_request(), snap) == "b"


# -- llm-d: 2 x queue + 2 x KV-cache + 3 x prefix, max wins --------------------------------------------------


def test_llm_d_weighs_queue_and_kv_utilisation(make_node_view, make_snapshot, make_route_request):
    policy = LlmdPolicy()
    snap = make_snapshot(
        make_node_view("a", num_waiting=0, kv_usage=0.9),  # 2*1.0 + 2*0.1 = 2.2
        make_node_view("b", num_waiting=4, kv_usage=0.1),  # 2*0.0 + 2*0.9 = 1.8
        make_node_view("c", num_waiting=2, kv_usage=0.5),  # 2*0.5 + 2*0.5 = 2.0
    )
    assert policy.scores(make_route_request(), snap) == pytest.approx({"a": 2.2, "b": 1.8, "c": 2.0})
    assert policy.choose(make_route_request(), snap) == "a"


def test_llm_d_prefix_scorer_pulls_a_request_to_its_prefix(make_node_view, make_snapshot, make_route_request):
    policy = LlmdPolicy()
    snap = make_snapshot(
        make_node_view("a", num_waiting=0, kv_usage=0.2),  # 2 + 1.6 = 3.6
        make_node_view("b", num_waiting=2, kv_usage=0.5),  # 0 + 1.0 + 3 * 4/4 = 4.0 once it holds the prefix
    )
    request = make_route_request(num_prompt_tokens=64, block_hashes=(11, 12, 13, 14))
    policy.on_routed(make_route_request(block_hashes=(11, 12, 13, 14, 15)), "b")
    assert policy.scores(request, snap) == pytest.approx({"a": 3.6, "b": 4.0})
    assert policy.choose(request, snap) == "b"
    half = make_route_request(num_prompt_tokens=64, block_hashes=(11, 12, 99, 98))  # b: 3 * 2/4 = 1.5 -> 2.5
    assert policy.choose(half, snap) == "a"


def test_llm_d_breaks_ties_at_random_but_reproducibly(make_node_view, make_snapshot, make_route_request):
    snap = make_snapshot(*(make_node_view(f"n{i}") for i in range(4)))
    picks = [LlmdPolicy().choose(make_route_request(), snap) for _ in range(3)]
    assert len(set(picks)) == 1
    policy = LlmdPolicy()
    assert len({policy.choose(make_route_request(), snap) for _ in range(40)}) > 1


# -- SGLang cache-aware: balance thresholds, then the tree ------------------------------------------------------


def test_sglang_imbalance_routes_to_the_least_loaded(make_node_view, make_snapshot, make_route_request):
    policy = SglangCacheAwarePolicy(SglangConfig(balance_abs_threshold=4, balance_rel_threshold=1.5))
    policy.on_routed(make_route_request(block_hashes=(1, 2, 3)), "busy")
    request = make_route_request(num_prompt_tokens=48, block_hashes=(1, 2, 3))
    # max - min = 9 > 4 and 10 > 1.5 * 1: imbalanced, the cache is ignored
    snap = make_snapshot(make_node_view("busy", num_inflight=10), make_node_view("idle", num_inflight=1))
    assert policy.choose(request, snap) == "idle" and policy.last_decision == "balance"
    # max - min = 4, not > 4: balanced, the 100% match wins
    snap = make_snapshot(make_node_view("busy", num_inflight=5), make_node_view("idle", num_inflight=1))
    assert policy.choose(request, snap) == "busy" and policy.last_decision == "cache_hit"


def test_sglang_low_match_goes_to_the_smallest_tree(make_node_view, make_snapshot, make_route_request):
    policy = SglangCacheAwarePolicy()  # cache_threshold 0.5
    policy.on_routed(make_route_request(block_hashes=(1, 2, 3, 4, 5, 6)), "a")
    policy.on_routed(make_route_request(block_hashes=(7, 8)), "b")
    snap = make_snapshot(make_node_view("a"), make_node_view("b"), make_node_view("c"))
    # a matches 2 of 5 blocks: 32 / 80 tokens = 0.4 <= 0.5 -> smallest tree (c, empty)
    request = make_route_request(num_prompt_tokens=80, block_hashes=(1, 2, 90, 91, 92))
    assert policy.choose(request, snap) == "c" and policy.last_decision == "smallest_tree"
    # 3 of 5 blocks: 0.6 > 0.5 -> a
    request = make_route_request(num_prompt_tokens=80, block_hashes=(1, 2, 3, 91, 92))
    assert policy.choose(request, snap) == "a" and policy.last_decision == "cache_hit"


def test_sglang_evicts_its_trees_periodically(make_node_view, make_snapshot, make_route_request):
    policy = SglangCacheAwarePolicy(SglangConfig(max_tree_blocks=1, eviction_interval_s=10.0))
    snap = make_snapshot(make_node_view("a"), make_node_view("b"), now_s=0.0)
    policy.choose(make_route_request(), snap)
    policy.on_routed(make_route_request(block_hashes=(1, 2, 3)), "a")
    assert policy.tree.size("a") == 3
    policy.choose(make_route_request(), make_snapshot(make_node_view("a"), make_node_view("b"), now_s=11.0))
    assert policy.tree.size("a") == 1


# -- Dynamo: overlap_weight * prefill blocks + decode blocks, lowest wins --------------------------------------


def test_dynamo_cost_is_prefill_blocks_after_overlap_plus_active_blocks(
    make_node_view, make_snapshot, make_route_request
):
    policy = DynamoKvPolicy()
    policy.on_routed(make_route_request(block_hashes=(1, 2, 3, 4, 5, 6)), "warm")
    request = make_route_request(num_prompt_tokens=160, block_hashes=tuple(range(1, 11)))  # 10 blocks
    snap = make_snapshot(
        # warm: prefill 10 - 6 = 4, decode 30 + 10 = 40 -> 44
        make_node_view("warm", num_device_blocks=100, num_free_device_blocks=70),
        # cold: prefill 10, decode 20 + 2 (32 unreported prompt tokens) + 10 = 32 -> 42
        make_node_view("cold", num_device_blocks=100, num_free_device_blocks=80, inflight_prefill_tokens=32),
    )
    assert policy.costs(request, snap) == {"warm": 44, "cold": 42}
    assert policy.choose(request, snap) == "cold"
    busier_cold = make_snapshot(
        make_node_view("warm", num_device_blocks=100, num_free_device_blocks=70),
        make_node_view("cold", num_device_blocks=100, num_free_device_blocks=75, inflight_prefill_tokens=32),
    )
    assert policy.choose(request, busier_cold) == "warm"  # 44 < 47


def test_dynamo_forgets_routed_prefixes_after_the_ttl(make_node_view, make_snapshot, make_route_request):
    policy = DynamoKvPolicy()
    policy.costs(make_route_request(), make_snapshot(make_node_view("a"), now_s=0.0))
    policy.on_routed(make_route_request(block_hashes=(1, 2)), "a")
    request = make_route_request(num_prompt_tokens=32, block_hashes=(1, 2))
    assert policy.costs(request, make_snapshot(make_node_view("a"), now_s=100.0))["a"] == 0 + 2
    assert policy.costs(request, make_snapshot(make_node_view("a"), now_s=200.0))["a"] == 2 + 2
