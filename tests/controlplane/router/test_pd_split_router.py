"""The prefill/decode split router (controlplane/router/pd_split.py) on hand-made snapshots."""

from __future__ import annotations

import pytest

from backends.kv_link_model import KVLinkModel, KVLinkQueue, KVPlacement
from controlplane.router.pd_split import PDSplitRouter, auto_roles
from controlplane.router.router_config import RouterConfig

CONFIG = RouterConfig(default_model_params_b=8.0)
KV_PER_TOKEN = 131072  # Llama-3-8B, bf16


def test_auto_rule_big_compute_prefills_lean_decodes():
    roles = auto_roles({"h100": 989.0, "a100": 312.0, "l4": 121.0, "t4x2": 130.0})
    assert roles == {"h100": "prefill", "a100": "prefill", "l4": "decode", "t4x2": "decode"}
    assert auto_roles({"h100": 989.0, "a100": 312.0, "l4": 121.0}, prefill_min_share=0.5)["a100"] == "decode"
    assert auto_roles({"a": 121.0, "b": 121.0}) == {"a": "both", "b": "both"}  # nothing to split
    with pytest.raises(ValueError):
        auto_roles({"a": 1.0}, prefill_min_share=0.0)


def _router(placement=None, queue=False):
    links = KVLinkModel(placement or KVPlacement())
    roles = {"big": "prefill", "lean0": "decode", "lean1": "decode"}
    return PDSplitRouter(CONFIG, roles, links, KV_PER_TOKEN, KVLinkQueue(links) if queue else None)


def _fleet(make_node_view):
    return (
        make_node_view("big", "h100-sxm"),
        make_node_view("lean0", "l4", num_device_blocks=2048, num_free_device_blocks=2048),
        make_node_view("lean1", "l4", num_device_blocks=2048, num_free_device_blocks=2048),
    )


def test_sends_to_the_prefill_node_and_plans_a_decode_node(make_node_view, make_snapshot, make_route_request):
    router = _router()
    request = make_route_request(num_prompt_tokens=2000, max_tokens=32, request_id="r1")
    assert router.choose(request, make_snapshot(*_fleet(make_node_view))) == "big"
    router.on_routed(request, "big")
    assert router.decode_target("r1") in ("lean0", "lean1")
    assert all(p == "big" for p, _ in router.last_costs)  # a decode node is never chosen to prefill


def test_the_link_is_priced_a_faster_link_wins_a_tie(make_node_view, make_snapshot, make_route_request):
    # lean1 shares big's rack (InfiniBand), lean0 is across Ethernet: same load, so lean1 wins by the transfer
    router = _router(KVPlacement(racks={"big": "r", "lean1": "r"}))
    big, lean0, lean1 = _fleet(make_node_view)
    request = make_route_request(num_prompt_tokens=2000, max_tokens=32, request_id="r1")
    router.choose(request, make_snapshot(big, lean0, lean1))
    eth, ib = router.transfer_s(big, lean0, 2000), router.transfer_s(big, lean1, 2000)  # nothing planned yet
    router.on_routed(request, "big")
    assert router.decode_target("r1") == "lean1"
    assert router.transfer_s(big, lean1, 2000) == pytest.approx(2 * ib - 2e-5)  # behind r1's planned KV
    nbytes = 2000 // 16 * 16 * KV_PER_TOKEN
    assert eth == pytest.approx(1e-4 + nbytes / 12.5e9) and ib == pytest.approx(2e-5 + nbytes / 50e9)
    costs = router.last_costs
    assert costs[("big", "lean0")] - costs[("big", "lean1")] == pytest.approx(eth - ib)


def test_planned_hand_offs_spread_over_decode_nodes_until_they_land(make_node_view, make_snapshot, make_route_request):
    router = _router()
    snapshot = make_snapshot(*_fleet(make_node_view))
    targets = []
    for i in range(6):
        request = make_route_request(num_prompt_tokens=2000, max_tokens=32, request_id=f"r{i}")
        assert router.choose(request, snapshot) == "big"
        router.on_routed(request, "big")
        targets.append(router.decode_target(f"r{i}"))
    assert targets.count("lean0") == targets.count("lean1") == 3  # the same snapshot: its own books spread them
    for i in range(6):
        router.on_handed_off(f"r{i}")
    assert router._pending == {"lean0": 0, "lean1": 0} and router._pending_tokens == {"lean0": 0, "lean1": 0}
    router.on_finished("r0", "lean0")
    assert router.decode_target("r0") is None


def test_a_busy_nic_is_priced(make_node_view, make_snapshot, make_route_request):
    router = _router(queue=True)
    big, lean0, lean1 = _fleet(make_node_view)
    router.queue.reserve("elsewhere", "lean0", 10e9, 0.0)  # lean0's ingress is busy for 0.8 s
    request = make_route_request(num_prompt_tokens=2000, max_tokens=32, request_id="r1")
    router.choose(request, make_snapshot(big, lean0, lean1, now_s=0.0))
    router.on_routed(request, "big")
    assert router.decode_target("r1") == "lean1"
    assert router.transfer_s(big, lean0, 2000, 0.0) > 0.8


def test_without_a_live_decode_node_the_prefill_node_keeps_its_requests(
    make_node_view, make_snapshot, make_route_request
):
    router = _router()
    request = make_route_request(num_prompt_tokens=500, request_id="r1")
    assert router.choose(request, make_snapshot(make_node_view("big", "h100-sxm"))) == "big"
    router.on_routed(request, "big")
    assert router.decode_target("r1") is None
    assert router.choose(make_route_request(request_id="r2"), make_snapshot(make_node_view("lean0", "l4"))) is None


def test_admission_choosing_another_node_keeps_the_request_there(make_node_view, make_snapshot, make_route_request):
    router = _router()
    request = make_route_request(num_prompt_tokens=500, request_id="r1")
    router.choose(request, make_snapshot(*_fleet(make_node_view)))
    router.on_routed(request, "lean0")  # not the choice: no hand-off planned
    assert router.decode_target("r1") is None
