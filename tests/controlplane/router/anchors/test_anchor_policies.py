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


def test_sglang_uses_the_current_router_defaults():
    config = SglangConfig()
    assert (config.cache_threshold, config.balance_abs_threshold, config.balance_rel_threshold) == (0.3, 64, 1.5)
    assert config.eviction_interval_s == 120.0


def test_sglang_low_match_goes_to_the_smallest_tree(make_node_view, make_snapshot, make_route_request):
    policy = SglangCacheAwarePolicy(SglangConfig(cache_threshold=0.5))
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


# -- Dynamo: overlap_weight * (active prefill + new tokens) / block + active blocks, lowest wins ----------------


def test_dynamo_prices_new_tokens_after_overlap_and_its_own_active_books(
    make_node_view, make_snapshot, make_route_request
):
    policy = DynamoKvPolicy()
    nodes = make_snapshot(make_node_view("warm"), make_node_view("cold"))
    first = make_route_request(request_id="r1", num_prompt_tokens=96, block_hashes=(1, 2, 3, 4, 5, 6))
    assert policy.costs(first, nodes) == {"warm": 6 + 6, "cold": 6 + 6}
    policy.on_routed(first, "warm")  # warm: 96 active prefill tokens, 6 active blocks
    request = make_route_request(request_id="r2", num_prompt_tokens=160, block_hashes=tuple(range(1, 11)))
    # warm: overlap 6 -> 64 new tokens; prefill (96 + 64) / 16 = 10; blocks 6 + 10 - 6 shared = 10 -> 20
    # cold: prefill 160 / 16 = 10; blocks 0 + 10 = 10 -> 20
    assert policy.costs(request, nodes) == {"warm": 20, "cold": 20}
    policy.on_first_token("r1", "warm")  # r1's prefill is done: warm's prefill load drops
    assert policy.costs(request, nodes) == {"warm": 4 + 10, "cold": 20}
    assert policy.choose(request, nodes) == "warm"
    policy.on_finished("r1", "warm")  # its blocks leave the books too
    assert policy.costs(request, nodes) == {"warm": 4 + 10, "cold": 20}  # the prefix stays cached (TTL)


def test_dynamo_sees_what_it_routed_before_any_load_report(make_node_view, make_snapshot, make_route_request):
    """No herding: the books grow with every routing decision, whatever the (stale) reports say."""
    policy = DynamoKvPolicy()
    nodes = make_snapshot(*(make_node_view(n) for n in "abc"))
    chosen = []
    for i in range(9):
        request = make_route_request(request_id=f"r{i}", num_prompt_tokens=64, block_hashes=(100 + 4 * i,))
        node_id = policy.choose(request, nodes)
        policy.on_routed(request, node_id)
        chosen.append(node_id)
    assert sorted(chosen.count(n) for n in "abc") == [3, 3, 3]


def test_dynamo_forgets_routed_prefixes_after_the_ttl(make_node_view, make_snapshot, make_route_request):
    policy = DynamoKvPolicy()
    routed = make_route_request(request_id="r1", num_prompt_tokens=32, block_hashes=(1, 2))
    policy.costs(routed, make_snapshot(make_node_view("a"), now_s=0.0))
    policy.on_routed(routed, "a")
    policy.on_finished("r1", "a")
    request = make_route_request(request_id="r2", num_prompt_tokens=32, block_hashes=(1, 2))
    assert policy.costs(request, make_snapshot(make_node_view("a"), now_s=100.0))["a"] == 0 + 2
    assert policy.costs(request, make_snapshot(make_node_view("a"), now_s=200.0))["a"] == 2 + 2


def test_dynamo_temperature_samples_cheaper_workers_more_often(make_node_view, make_snapshot, make_route_request):
    from controlplane.router.policies.anchors.dynamo import DynamoConfig

    policy = DynamoKvPolicy(DynamoConfig(router_temperature=0.5, seed=3))
    nodes = make_snapshot(make_node_view("busy"), make_node_view("idle"))
    policy.on_routed(make_route_request(request_id="load", num_prompt_tokens=320, block_hashes=()), "busy")
    picks = [policy.choose(make_route_request(request_id="q", num_prompt_tokens=16), nodes) for _ in range(400)]
    assert 0 < picks.count("busy") < picks.count("idle")


# -- vLLM production stack: roundrobin, session (lowest QPS without a key), prefixaware ------------------------


def test_production_stack_round_robin_goes_by_sorted_id(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("vllm_ps_roundrobin")
    nodes = make_snapshot(make_node_view("c"), make_node_view("a"), make_node_view("b"))
    assert [policy.choose(make_route_request(), nodes) for _ in range(4)] == ["a", "b", "c", "a"]


def test_production_stack_session_fallback_is_the_lowest_qps(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("vllm_ps_session")
    nodes = make_snapshot(make_node_view("a"), make_node_view("b"), now_s=10.0)
    first = policy.choose(make_route_request(), nodes)
    policy.on_routed(make_route_request(), first)
    second = policy.choose(make_route_request(), nodes)  # the one with no request yet
    assert {first, second} == {"a", "b"}
    policy.on_routed(make_route_request(), second)
    policy.on_routed(make_route_request(), second)
    assert policy.choose(make_route_request(), nodes) == first
    later = make_snapshot(make_node_view("a"), make_node_view("b"), now_s=200.0)  # the window forgot them
    assert policy.choose(make_route_request(), later) == "a"


def test_production_stack_prefixaware_follows_the_longest_prefix_and_ignores_load(
    make_node_view, make_snapshot, make_route_request
):
    policy = make_policy("vllm_ps_prefixaware")
    nodes = make_snapshot(make_node_view("a"), make_node_view("b", num_inflight=500), make_node_view("c"))
    policy.on_routed(make_route_request(block_hashes=(1, 2, 3)), "b")
    policy.on_routed(make_route_request(block_hashes=(1, 9)), "c")
    assert policy.choose(make_route_request(block_hashes=(1, 2, 3, 4)), nodes) == "b"
    assert policy.choose(make_route_request(block_hashes=(1, 9, 9)), nodes) == "c"
    assert {policy.choose(make_route_request(block_hashes=(7,)), nodes) for _ in range(60)} == {"a", "b", "c"}


# -- Envoy weighted least request: EDF over power_score / (active + 1) ----------------------------------------


def test_envoy_wlr_shares_by_weight_over_active_requests(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("envoy_wlr")
    strong = make_node_view("h100", gpu="h100-sxm")
    weak = make_node_view("l4", gpu="l4")
    picks = [policy.choose(make_route_request(), make_snapshot(strong, weak)) for _ in range(100)]
    ratio = strong.power_score / weak.power_score
    assert picks.count("h100") / picks.count("l4") == pytest.approx(ratio, rel=0.15)
    # the strong node's active requests lower its weight: with 9 in flight it weighs ~ratio / 10
    loaded = make_node_view("h100", gpu="h100-sxm", num_inflight=9)
    fresh = make_policy("envoy_wlr")
    picks = [fresh.choose(make_route_request(), make_snapshot(loaded, weak)) for _ in range(100)]
    assert picks.count("l4") > picks.count("h100")


def test_envoy_wlr_is_p2c_on_equal_weights(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("envoy_wlr")
    nodes = make_snapshot(make_node_view("a", num_inflight=5), make_node_view("b", num_inflight=0))
    picks = [policy.choose(make_route_request(), nodes) for _ in range(200)]
    assert picks.count("b") > picks.count("a") > 0  # two random choices: the idle one wins whenever drawn
