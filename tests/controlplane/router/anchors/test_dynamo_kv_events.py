"""Dynamo's KV router at its default (controlplane/router/policies/anchors/dynamo.py): the overlap comes from the
workers' KV cache events (stored, removed, cleared), a worker without events yet is priced by what it was routed,
and ``dynamo_kv_approx`` (Dynamo's --no-kv-events) ignores events."""

from __future__ import annotations

from controlplane.router.policies import make_policy
from controlplane.router.policies.anchors.dynamo import DynamoKvPolicy
from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored


def _stored(*hashes: int) -> BlockStored:
    return BlockStored(list(hashes), None, [0] * 16 * len(hashes), None)


def test_the_overlap_is_what_the_events_say(make_node_view, make_snapshot, make_route_request):
    policy = DynamoKvPolicy()
    assert policy.name == "dynamo_kv" and policy.wants_kv_events
    nodes = make_snapshot(make_node_view("a"), make_node_view("b"))
    request = make_route_request(request_id="q", num_prompt_tokens=64, block_hashes=(1, 2, 3, 4))
    assert policy.costs(request, nodes) == {"a": 4 + 4, "b": 4 + 4}
    policy.on_kv_events("a", [_stored(1, 2, 3)])
    assert policy.costs(request, nodes)["a"] == 1 + 4  # 3 blocks cached: 16 new tokens
    policy.on_kv_events("a", [BlockRemoved([3])])
    assert policy.costs(request, nodes)["a"] == 2 + 4
    policy.on_kv_events("a", [AllBlocksCleared()])
    assert policy.costs(request, nodes)["a"] == 4 + 4


def test_routing_to_an_evented_worker_adds_nothing_until_its_events_do(
    make_node_view, make_snapshot, make_route_request
):
    policy = DynamoKvPolicy()
    nodes = make_snapshot(make_node_view("a"), make_node_view("b"))
    sent = make_route_request(request_id="r1", num_prompt_tokens=32, block_hashes=(7, 8))
    policy.on_routed(sent, "b")  # b has sent no event: its routed record stands in (--no-kv-events)
    policy.on_finished("r1", "b")
    request = make_route_request(request_id="r2", num_prompt_tokens=32, block_hashes=(7, 8))
    assert policy.costs(request, nodes)["b"] == 0 + 2
    policy.on_kv_events("b", [_stored(9)])  # its first event: the record gives way to what it says it caches
    assert policy.costs(request, nodes)["b"] == 2 + 2
    policy.on_kv_events("a", [_stored(5)])
    policy.on_routed(make_route_request(request_id="r3", num_prompt_tokens=32, block_hashes=(7, 8)), "a")
    policy.on_finished("r3", "a")
    assert policy.costs(request, nodes)["a"] == 2 + 2  # routed, not yet cached: no overlap
    policy.on_kv_events("a", [BlockStored([7, 8], None, [0] * 32, None)])
    assert policy.costs(request, nodes)["a"] == 0 + 2


def test_the_approx_mode_ignores_events(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("dynamo_kv_approx")
    assert isinstance(policy, DynamoKvPolicy) and policy.name == "dynamo_kv_approx" and not policy.wants_kv_events
    nodes = make_snapshot(make_node_view("a"))
    request = make_route_request(request_id="q", num_prompt_tokens=32, block_hashes=(1, 2))
    policy.on_kv_events("a", [_stored(1, 2)])
    assert policy.costs(request, nodes)["a"] == 2 + 2
