"""The KV link model: how long moving a request's KV from one node to another takes, per node pair.

Shared by the fleet simulator (sim/split.py: the virtual time of a prefill → decode hand-off) and the router
(controlplane/router/pd_split.py: the transfer priced into the choice of a prefill and a decode node), so
both price a move alike. Framework-free, in the alpha-beta style of backends/link_model.py::

    seconds(src, dst, nbytes) = latency + nbytes / bandwidth      of the pair's link kind
    kind(src, dst)            = loopback   same node (nothing crosses a wire; 0 s in the simulator)
                                nvlink     same host (nodes named on one host by ``nodes_per_host``/``host``)
                                infiniband same rack
                                ethernet   otherwise

The link kinds, their effective bandwidth (what one point-to-point transfer gets, GB/s = 1e9 bytes/s) and
per-transfer latency (the handshake of a transfer: control message, registration, first chunk):

    kind        bandwidth   latency   the part
    nvlink      450 GB/s    10 us     H100 SXM NVLink 4, one direction (900 GB/s bidirectional)
    infiniband  50 GB/s     20 us     400 Gb/s NDR HCA per GPU, RDMA
    ethernet    12.5 GB/s   100 us    100 Gb/s NIC, TCP
    loopback    10 GB/s     30 us     two agents on one host without NVLink: a ZeroMQ copy through host RAM

Placement (which nodes share a host, a rack) is the fleet's: ``KVPlacement`` maps a node id to its host and
rack; ``placement_from_config`` builds one from a fleet TOML's ``[kv_links]`` section (sim/split.py). A node's
NIC carries one transfer at a time in each direction (``KVLinkQueue``): concurrent hand-offs from one prefill
node queue behind each other, they do not each get the full bandwidth.

KV bytes per token follow from the model: K and V of every layer, ``2 * layers * kv_heads * head_dim *
bytes_per_value`` (backends/sim/model_shapes.kv_bytes_per_token). Only full blocks travel (the partial last
block is recomputed by the receiver, as a live migration does).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

LINK_KINDS = ("loopback", "nvlink", "infiniband", "ethernet")
PLACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,254}")  # a host or rack name (a hostname's characters)


def check_place_name(what: str, name: str) -> str:
    """``name`` if it is a valid host or rack name (``what`` says which, for the error), else ValueError."""
    if not isinstance(name, str) or PLACE_NAME.fullmatch(name) is None:
        raise ValueError(
            f"{what} must be 1..255 characters of letters, digits and . _ : - (starting with a letter or digit), "
            f"got {name!r}"
        )
    return name


@dataclass(frozen=True, slots=True)
class LinkSpec:
    """One link kind: effective bandwidth in GB/s (1e9 bytes/s) and latency per transfer in microseconds."""

    kind: str
    gbps: float
    latency_us: float

    def __post_init__(self) -> None:
        if self.kind not in LINK_KINDS:
            raise ValueError(f"unknown link kind {self.kind!r}; known: {', '.join(LINK_KINDS)}")
        if not self.gbps > 0:
            raise ValueError(f"link {self.kind}: gbps must be > 0, got {self.gbps}")
        if not self.latency_us >= 0:
            raise ValueError(f"link {self.kind}: latency_us must be >= 0, got {self.latency_us}")

    def seconds(self, nbytes: float) -> float:
        return self.latency_us * 1e-6 + nbytes / (self.gbps * 1e9)


DEFAULT_LINKS: dict[str, LinkSpec] = {
    "nvlink": LinkSpec("nvlink", 450.0, 10.0),
    "infiniband": LinkSpec("infiniband", 50.0, 20.0),
    "ethernet": LinkSpec("ethernet", 12.5, 100.0),
    "loopback": LinkSpec("loopback", 10.0, 30.0),
}


@dataclass(frozen=True, slots=True)
class KVPlacement:
    """Where nodes are: node id → host and node id → rack. A node absent from ``hosts`` is its own host; one
    absent from ``racks`` is in a rack of its own."""

    hosts: Mapping[str, str] = field(default_factory=dict)
    racks: Mapping[str, str] = field(default_factory=dict)

    def host(self, node_id: str) -> str:
        return self.hosts.get(node_id, node_id)

    def rack(self, node_id: str) -> str:
        return self.racks.get(node_id, "~" + node_id)


@dataclass(frozen=True, slots=True)
class KVLinkModel:
    """The link between every pair of nodes, from their placement and the link kinds' figures."""

    placement: KVPlacement = field(default_factory=KVPlacement)
    links: Mapping[str, LinkSpec] = field(default_factory=lambda: dict(DEFAULT_LINKS))

    def __post_init__(self) -> None:
        missing = [k for k in LINK_KINDS if k not in self.links]
        if missing:
            raise ValueError(f"KV link model: no figures for link kinds {missing}")

    def kind(self, src: str, dst: str) -> str:
        if src == dst:
            return "loopback"
        p = self.placement
        if p.host(src) == p.host(dst):
            return "nvlink"
        if p.rack(src) == p.rack(dst):
            return "infiniband"
        return "ethernet"

    def link(self, src: str, dst: str) -> LinkSpec:
        return self.links[self.kind(src, dst)]

    def seconds(self, src: str, dst: str, nbytes: float) -> float:
        """Time to move ``nbytes`` of KV from node ``src`` to node ``dst`` on an idle link."""
        return self.link(src, dst).seconds(nbytes)

    def describe(self) -> dict:
        """The figures as a report states them."""
        return {k: {"gbps": s.gbps, "latency_us": s.latency_us} for k, s in self.links.items()}


def transferred_kv_bytes(num_tokens: int, kv_bytes_per_token: int, block_size: int) -> int:
    """Bytes a hand-off of a ``num_tokens`` context moves: its full blocks only."""
    return (num_tokens // block_size) * block_size * kv_bytes_per_token


def links_from_config(section: Mapping) -> dict[str, LinkSpec]:
    """The default link figures with a TOML section's overrides: ``{kind = {gbps = .., latency_us = ..}}``."""
    links = dict(DEFAULT_LINKS)
    for kind, figures in section.items():
        if kind not in LINK_KINDS or not isinstance(figures, Mapping):
            raise ValueError(f"[kv_links.kinds]: unknown link kind {kind!r} (known: {', '.join(LINK_KINDS)})")
        unknown = set(figures) - {"gbps", "latency_us"}
        if unknown:
            raise ValueError(f"[kv_links.kinds.{kind}]: unknown keys {sorted(unknown)} (gbps, latency_us)")
        base = DEFAULT_LINKS[kind]
        links[kind] = LinkSpec(
            kind, float(figures.get("gbps", base.gbps)), float(figures.get("latency_us", base.latency_us))
        )
    return links


class KVLinkQueue:
    """Each node's NIC moves one transfer at a time in each direction (FIFO): a transfer starts when the
    sender's egress and the receiver's ingress are both free. Sans-IO, on the caller's clock."""

    def __init__(self, model: KVLinkModel) -> None:
        self.model = model
        self._egress_free_s: dict[str, float] = {}
        self._ingress_free_s: dict[str, float] = {}

    def ready_s(self, src: str, dst: str, now_s: float) -> float:
        """When a transfer src → dst asked for at ``now_s`` could start."""
        return max(now_s, self._egress_free_s.get(src, 0.0), self._ingress_free_s.get(dst, 0.0))

    def reserve(self, src: str, dst: str, nbytes: float, now_s: float) -> float:
        """Book a transfer of ``nbytes``; the time it ends (``now_s`` for a node to itself: nothing moves)."""
        if src == dst:
            return now_s
        end_s = self.ready_s(src, dst, now_s) + self.model.seconds(src, dst, nbytes)
        self._egress_free_s[src] = end_s
        self._ingress_free_s[dst] = end_s
        return end_s
