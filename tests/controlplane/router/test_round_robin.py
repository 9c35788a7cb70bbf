from __future__ import annotations

from collections import Counter

from controlplane.router.policies import make_policy


def test_cycles_fairly(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("round_robin")
    snap = make_snapshot(*(make_node_view(f"n{i}") for i in range(3)))
    picks = [policy.choose(make_route_request(), snap) for _ in range(300)]
    assert picks[:4] == ["n0", "n1", "n2", "n0"]
    assert Counter(picks) == {"n0": 100, "n1": 100, "n2": 100}


def test_skips_nodes_that_cannot_fit_the_prompt(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("round_robin")
    snap = make_snapshot(
        make_node_view("short", max_model_len=64),
        make_node_view("ok"),
        make_node_view("tiny_kv", num_device_blocks=4, block_size=16),  # 64 tokens in total
    )
    assert {policy.choose(make_route_request(num_prompt_tokens=100), snap) for _ in range(5)} == {"ok"}
    assert policy.choose(make_route_request(num_prompt_tokens=10_000), snap) is None
    assert policy.choose(make_route_request(), make_snapshot()) is None


def test_continues_after_a_node_leaves(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("round_robin")
    a, b, c = (make_node_view(x) for x in "abc")
    assert policy.choose(make_route_request(), make_snapshot(a, b, c)) == "a"
    assert policy.choose(make_route_request(), make_snapshot(a, b, c)) == "b"
    assert policy.choose(make_route_request(), make_snapshot(a, c)) == "c"  # b left: c is next
    assert policy.choose(make_route_request(), make_snapshot(a, c)) == "a"
