"""KV moves priced on the link of real nodes' placement (controlplane/router/placement.py): the split's pair, a
drain's and a rebalance's target change with the hand-made hosts and racks the hellos say."""

from __future__ import annotations

from dataclasses import replace

import pytest

from backends.kv_link_model import KVLinkModel
from controlplane.migrations import Migrations
from controlplane.rebalance import Move, RebalanceConfig, Rebalancer
from controlplane.registry import ClusterRegistry
from controlplane.router.pd_split import PDSplitRouter
from controlplane.router.placement import PlacedLinks, placement_of, request_kv_bytes
from controlplane.router.router_config import RouterConfig
from controlplane.split_handoff import SplitHandoffPolicy
from engine.clock import ManualClock

CONFIG = RouterConfig(default_model_params_b=8.0)
KV_PER_TOKEN = 131072  # Llama-3-8B, bf16
SAME_HOST = {"big": ("h1", "r1"), "lean0": ("h1", "r1"), "lean1": ("h2", "r2")}  # lean0 on NVLink with big
SWAPPED = {"big": ("h1", "r1"), "lean0": ("h3", "r3"), "lean1": ("h1", "r1")}  # now lean1 is


def _placed(views, places):
    return tuple(replace(v, host=places[v.node_id][0], rack=places[v.node_id][1]) for v in views)


def _fleet(make_node_view, places):
    views = (
        make_node_view("big", "h100-sxm"),
        make_node_view("lean0", "l4", num_device_blocks=2048, num_free_device_blocks=2048),
        make_node_view("lean1", "l4", num_device_blocks=2048, num_free_device_blocks=2048),
    )
    return _placed(views, places)


def test_link_kinds_follow_the_said_placement(make_node_view):
    views = _placed((make_node_view("a"), make_node_view("b"), make_node_view("c"), make_node_view("d")),
                    {"a": ("h1", "r1"), "b": ("h1", "r1"), "c": ("h2", "r1"), "d": ("h3", "")})  # fmt: skip
    links = KVLinkModel(placement_of(views))
    assert [links.kind("a", n) for n in "abcd"] == ["loopback", "nvlink", "infiniband", "ethernet"]
    unsaid = (make_node_view("x"), make_node_view("y"))  # no host, no rack: own host, rack of its own
    assert KVLinkModel(placement_of(unsaid)).kind("x", "y") == "ethernet"
    placed = PlacedLinks()
    first = placed.model(views)
    assert placed.model(views) is first  # unchanged placements: the same model
    assert placed.model(_placed(views, {"a": ("h9", ""), "b": ("h1", "r1"), "c": ("h2", "r1"),
                                        "d": ("h3", "")})).kind("a", "b") == "ethernet"  # fmt: skip
    assert placed.model(views[2:]).kind("a", "b") == "ethernet"  # a snapshot of some nodes: the rest stay placed
    placed.forget("a")
    assert placed.model(()).placement.host("a") == "a"  # forgotten: its own host again


@pytest.mark.parametrize(("places", "decode_node"), [(SAME_HOST, "lean0"), (SWAPPED, "lean1")])
def test_the_split_router_picks_the_decode_node_on_the_faster_link(
    make_node_view, make_snapshot, make_route_request, places, decode_node
):
    views = _fleet(make_node_view, places)
    roles = {"big": "prefill", "lean0": "decode", "lean1": "decode"}
    router = PDSplitRouter(CONFIG, roles, KVLinkModel(placement_of(views)), KV_PER_TOKEN)
    request = make_route_request(num_prompt_tokens=2000, max_tokens=32, request_id="r1")
    assert router.choose(request, make_snapshot(*views)) == "big"
    router.on_routed(request, "big")
    assert router.decode_target("r1") == decode_node
    other = "lean1" if decode_node == "lean0" else "lean0"
    nbytes = 2000 * KV_PER_TOKEN
    nvlink, ethernet = 1e-5 + nbytes / 450e9, 1e-4 + nbytes / 12.5e9
    diff = router.last_costs[("big", other)] - router.last_costs[("big", decode_node)]
    assert diff == pytest.approx(ethernet - nvlink)


@pytest.mark.parametrize(("places", "decode_node"), [(SAME_HOST, "lean0"), (SWAPPED, "lean1")])
def test_the_control_planes_split_policy_reads_placement_from_the_node_views(
    make_hello, make_node_view, make_snapshot, make_route_request, places, decode_node
):
    policy = SplitHandoffPolicy(CONFIG)
    hellos = {
        "big": make_hello("big", gpu="h100-sxm", role="prefill"),
        "lean0": make_hello("lean0", gpu="l4", role="decode"),
        "lean1": make_hello("lean1", gpu="l4", role="decode"),
    }

    class _Registry(dict):
        def hello(self, node_id):
            return self[node_id]

    policy.attach(_Registry(hellos), migrations=None)
    request = make_route_request(num_prompt_tokens=2000, max_tokens=32, request_id="r1")
    assert policy.choose(request, make_snapshot(*_fleet(make_node_view, places))) == "big"
    policy.on_routed(request, "big")
    assert policy.decode_target("r1") == decode_node
    assert policy.links.kind("big", decode_node) == "nvlink"


def test_rebalance_prefers_the_peer_on_the_faster_link_when_costs_tie(make_node_view):
    hot = make_node_view("a", kv_usage=0.99, num_waiting=2, host="h1", rack="r1")
    far = make_node_view("b", kv_usage=0.0, host="h2", rack="r2")  # Ethernet from a
    near = make_node_view("c", kv_usage=0.0, host="h3", rack="r1")  # InfiniBand from a
    nodes = [hot, far, near]
    placed = PlacedLinks()

    def move_s(source, target):
        return placed.seconds(nodes, source.node_id, target, request_kv_bytes(source, 4096))

    inflight = {"a": ["r1"]}
    assert Rebalancer(RebalanceConfig(), lambda n: True, move_s).decide(0.0, nodes, inflight) == [Move("r1", "a", "c")]
    assert Rebalancer(RebalanceConfig(), lambda n: True).decide(0.0, nodes, inflight) == [Move("r1", "a", "b")]
    nodes[2] = replace(near, rack="r9")  # c is now across Ethernet too: the tie falls back to the node id
    assert Rebalancer(RebalanceConfig(), lambda n: True, move_s).decide(0.0, nodes, inflight) == [Move("r1", "a", "b")]
    nodes[2] = replace(near, kv_usage=0.1)  # not a tie: the cooler peer wins whatever its link
    assert Rebalancer(RebalanceConfig(), lambda n: True, move_s).decide(0.0, nodes, inflight) == [Move("r1", "a", "b")]


@pytest.mark.parametrize(("near", "target"), [("b", "b"), ("c", "c")])
def test_a_drain_moves_to_the_peer_on_the_faster_link_when_loads_tie(make_hello, near, target):
    registry = ClusterRegistry(ManualClock(), heartbeat_timeout_s=1.0)
    for node_id in "abc":
        host = "h1" if node_id in ("a", near) else f"h-{node_id}"
        registry.join(make_hello(node_id, data_endpoint=f"tcp://{node_id}", host=host, rack="r1"))
    registry.on_routed("a", "r1", 100)
    sent = []
    moves = Migrations(registry, path=None, send_to_node=lambda msg, node_id: sent.append((msg, node_id)))
    assert moves.migrate_off("a", "drain") == 1
    assert [(m.target_node_id, n) for m, n in sent] == [(target, "a")]
    views = {v.node_id: v for v in registry.views()}
    assert moves.move_s(views["a"], near) < moves.move_s(views["a"], "c" if near == "b" else "b")
