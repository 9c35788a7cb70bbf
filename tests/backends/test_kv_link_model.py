from __future__ import annotations

import pytest

from backends.kv_link_model import (
    DEFAULT_LINKS,
    KVLinkModel,
    KVLinkQueue,
    KVPlacement,
    LinkSpec,
    links_from_config,
    transferred_kv_bytes,
)
from backends.sim.model_shapes import kv_bytes_per_token, sim_model


def _model() -> KVLinkModel:
    placement = KVPlacement(hosts={"a": "h1", "b": "h1", "c": "h2", "d": "h3"}, racks={"a": "r1", "b": "r1", "c": "r1"})
    return KVLinkModel(placement)


@pytest.mark.parametrize(
    ("dst", "kind", "gbps", "latency_us"),
    [("a", "loopback", 10.0, 30.0), ("b", "nvlink", 450.0, 10.0), ("c", "infiniband", 50.0, 20.0),
     ("d", "ethernet", 12.5, 100.0)],
)  # fmt: skip
def test_each_link_kind_prices_latency_plus_bytes_over_bandwidth(dst, kind, gbps, latency_us):
    links = _model()
    assert links.kind("a", dst) == kind
    nbytes = 256 * 2**20
    assert links.seconds("a", dst, nbytes) == pytest.approx(latency_us * 1e-6 + nbytes / (gbps * 1e9), rel=1e-12)


def test_a_2000_token_llama_3_8b_context_takes_its_bytes_over_each_link():
    per_token = kv_bytes_per_token(sim_model("sim:llama-3-8b"))
    assert per_token == 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 KV heads of 128, bf16: 128 KiB
    nbytes = transferred_kv_bytes(2000, per_token, 16)
    assert nbytes == 125 * 16 * per_token  # full blocks only
    links = _model()
    eth, ib = links.seconds("a", "d", nbytes), links.seconds("a", "c", nbytes)
    assert eth == pytest.approx(1e-4 + nbytes / 12.5e9) and ib == pytest.approx(2e-5 + nbytes / 50e9)
    assert eth / ib == pytest.approx(4.0, rel=0.02)


def test_unplaced_nodes_are_hosts_and_racks_of_their_own():
    links = KVLinkModel()
    assert links.kind("x", "y") == "ethernet"
    assert links.kind("x", "x") == "loopback"


def test_queue_serialises_one_nic_and_leaves_other_pairs_alone():
    links = _model()
    queue = KVLinkQueue(links)
    one = links.seconds("a", "d", 1e9)
    assert queue.reserve("a", "d", 1e9, 0.0) == pytest.approx(one)
    assert queue.reserve("a", "d", 1e9, 0.0) == pytest.approx(2 * one)  # behind the first on a's egress
    assert queue.reserve("b", "c", 1e9, 0.0) == pytest.approx(links.seconds("b", "c", 1e9))  # other NICs: free
    assert queue.reserve("c", "d", 1e9, 0.0) == pytest.approx(2 * one + links.seconds("c", "d", 1e9))  # d's ingress
    assert queue.reserve("a", "a", 1e9, 5.0) == 5.0  # nothing moves


def test_config_overrides_and_refusals():
    links = links_from_config({"ethernet": {"gbps": 25.0}})
    assert links["ethernet"] == LinkSpec("ethernet", 25.0, 100.0)
    assert links["nvlink"] == DEFAULT_LINKS["nvlink"]
    with pytest.raises(ValueError, match="unknown link kind"):
        links_from_config({"carrier-pigeon": {"gbps": 1.0}})
    with pytest.raises(ValueError, match="unknown keys"):
        links_from_config({"ethernet": {"bandwidth": 1.0}})
    with pytest.raises(ValueError, match="gbps must be > 0"):
        LinkSpec("ethernet", 0.0, 1.0)
