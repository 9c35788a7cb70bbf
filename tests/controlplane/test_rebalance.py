"""Rebalancer (sans-IO): a node out of KV with requests waiting moves its newest request to the coolest idle peer
of its model that has a data plane; cooldown and limits keep it from thrashing."""

from __future__ import annotations

import pytest

from controlplane.rebalance import Move, RebalanceConfig, Rebalancer


def _rebalancer(no_data_plane=(), **config) -> Rebalancer:
    return Rebalancer(RebalanceConfig(**config), lambda node_id: node_id not in no_data_plane)


def test_a_hot_node_moves_its_newest_request_to_the_coolest_peer(make_node_view):
    hot = make_node_view("a", kv_usage=0.99, num_waiting=2)
    warm = make_node_view("b", kv_usage=0.4)
    cold = make_node_view("c", kv_usage=0.1)
    r = _rebalancer()
    moves = r.decide(0.0, [hot, warm, cold], {"a": ["r1", "r2", "r3"], "b": ["x"]})
    assert moves == [Move("r3", "a", "c")] and r.num_moves == 1


def test_no_move_without_pressure_a_cool_peer_or_data_planes(make_node_view):
    busy_but_fitting = make_node_view("a", kv_usage=0.99, num_waiting=0)
    idle = make_node_view("b", kv_usage=0.0)
    inflight = {"a": ["r1"]}
    assert _rebalancer().decide(0.0, [busy_but_fitting, idle], inflight) == []
    hot = make_node_view("a", kv_usage=0.99, num_swapped=1)
    assert _rebalancer().decide(0.0, [hot, make_node_view("b", kv_usage=0.8)], inflight) == []
    assert _rebalancer().decide(0.0, [hot, make_node_view("b", kv_usage=0.0, model="other")], inflight) == []
    assert _rebalancer(no_data_plane={"b"}).decide(0.0, [hot, idle], inflight) == []
    assert _rebalancer().decide(0.0, [hot, idle], {}) == []  # nothing of its own to move


def test_cooldown_and_one_move_per_target(make_node_view):
    a = make_node_view("a", kv_usage=0.99, num_waiting=1)
    b = make_node_view("b", kv_usage=0.97, num_waiting=1)
    idle = make_node_view("c", kv_usage=0.0)
    r = _rebalancer(cooldown_s=2.0, max_moves=4)
    inflight = {"a": ["a1", "a2"], "b": ["b1"]}
    assert r.decide(0.0, [a, b, idle], inflight) == [Move("a2", "a", "c")]  # c takes one per round
    assert r.decide(1.0, [a, b, idle], inflight) == [Move("b1", "b", "c")]  # a cools down until t=2
    assert r.decide(2.5, [a, b, idle], inflight) == [Move("a2", "a", "c")]


def test_config_is_validated():
    with pytest.raises(ValueError):
        RebalanceConfig(hot_kv_usage=0.5, cool_kv_usage=0.6)
    with pytest.raises(ValueError):
        RebalanceConfig(max_moves=0)
