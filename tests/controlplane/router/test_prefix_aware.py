from __future__ import annotations

from dataclasses import replace

from controlplane.router.policies import make_policy
from controlplane.router.router_config import RouterConfig

CHAIN = (11, 12, 13, 14, 15, 16, 17, 18)


def test_sticks_to_the_prefix_holder_until_it_is_overloaded(make_node_view, make_snapshot, make_route_request):
    config = RouterConfig(
        policy="prefix_aware",
        prefix_load_penalty_blocks=0.5,
        prefix_balance_abs_threshold=4,
        prefix_balance_rel_threshold=1.5,
    )
    policy = make_policy("prefix_aware", config)
    nodes = {x: make_node_view(x) for x in "abc"}
    request = make_route_request(num_prompt_tokens=128, block_hashes=CHAIN)

    def snap():
        return make_snapshot(*nodes.values())

    first = policy.choose(request, snap())
    assert first == "a"  # nobody holds it: least loaded, ties by node id
    policy.on_routed(request, "a")
    picks = []
    for load in range(1, 9):  # a holds the prefix; its load grows, b and c stay at 1
        nodes["a"] = replace(nodes["a"], num_inflight=load)
        nodes["b"] = replace(nodes["b"], num_inflight=1)
        nodes["c"] = replace(nodes["c"], num_inflight=1)
        picks.append(policy.choose(request, snap()))
    # stays on a while load(a) - 1 <= 4; past that (load 6: 5 > 4 and 6 > 1.5) falls back to b
    assert picks == ["a", "a", "a", "a", "a", "b", "b", "b"]


def test_score_balances_match_length_against_load(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("prefix_aware", RouterConfig(policy="prefix_aware", prefix_load_penalty_blocks=1.0))
    policy.on_routed(make_route_request(block_hashes=CHAIN[:2]), "short")
    policy.on_routed(make_route_request(block_hashes=CHAIN), "long")
    snap = make_snapshot(
        make_node_view("idle"),
        make_node_view("short", num_inflight=1),  # 2 - 1 = 1
        make_node_view("long", num_inflight=3),  # 8 - 3 = 5
    )
    assert policy.choose(make_route_request(block_hashes=CHAIN), snap) == "long"
    policy.on_node_removed("long")
    assert policy.choose(make_route_request(block_hashes=CHAIN), snap) == "short"


def test_no_prefix_or_unfit_holder_means_least_loaded(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("prefix_aware")
    policy.on_routed(make_route_request(block_hashes=CHAIN), "small")
    snap = make_snapshot(make_node_view("small", max_model_len=100), make_node_view("big", num_inflight=2))
    assert policy.choose(make_route_request(num_prompt_tokens=128, block_hashes=CHAIN), snap) == "big"
    assert policy.choose(make_route_request(num_prompt_tokens=50), snap) == "small"
    assert policy.choose(make_route_request(num_prompt_tokens=9000), snap) is None
