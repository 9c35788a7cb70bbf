"""The control plane's heartbeat echo feeds the remote KV tier (agent/kv_remote_swap.py): a node with a data plane
hears its live same-model data peers and the room their KV stores last reported; others hear a bare echo."""

from __future__ import annotations

from controlplane.migrations import Migrations
from controlplane.registry import ClusterRegistry
from engine.clock import ManualClock


def test_echo_names_live_data_peers_and_their_store_room(make_hello, make_report):
    registry = ClusterRegistry(ManualClock(), heartbeat_timeout_s=1.0)
    for node_id, endpoint, model in (("a", "tcp://a", "m"), ("b", "tcp://b", "m"), ("c", "tcp://c", "m"),
                                     ("d", "", "m"), ("e", "tcp://e", "other")):  # fmt: skip
        registry.join(make_hello(node_id, model=model, data_endpoint=endpoint))
    registry.report(make_report("b", kv_store_free_bytes=5_000))
    registry.report(make_report("c"))  # no store reported (-1): left out of the room map
    moves = Migrations(registry, path=None, send_to_node=lambda msg, node_id: None)

    echo = moves.heartbeat_echo("a")
    assert echo.node_id == "a" and echo.peers == {"b": "tcp://b", "c": "tcp://c"}
    assert echo.peer_kv_free_bytes == {"b": 5_000}
    bare = moves.heartbeat_echo("d")  # no data plane
    assert bare.peers == {} and bare.peer_kv_free_bytes == {}
    assert moves.heartbeat_echo("nope").peers == {}
    registry.leave("b")
    assert moves.heartbeat_echo("a").peers == {"c": "tcp://c"}
