"""Real nodes' placement for the KV link model: each node's ``host``/``rack`` from its hello (``zoo agent
--host-id/--rack``, zoo.toml ``host``/``rack``) → a ``KVPlacement`` → the ``KVLinkModel`` that prices a KV move
between two nodes (backends/kv_link_model.py: same node loopback, same host NVLink, same rack InfiniBand, else
Ethernet). A node that said no host is its own host; one that said no rack is in a rack of its own.

Used by the control plane's split policy (controlplane/split_handoff.py: the prefill → decode pair) and by
migrations (controlplane/migrations.py, controlplane/rebalance.py: the target of a drain or rebalance move).
Sans-IO; ``PlacedLinks`` rebuilds its model only when some node's placement changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from backends.kv_link_model import DEFAULT_LINKS, KVLinkModel, KVPlacement, LinkSpec
from controlplane.router.policy import NodeView


def placement_of(nodes: Iterable[NodeView]) -> KVPlacement:
    """node id → host and rack, for the nodes that said them."""
    return _placement({v.node_id: (v.host, v.rack) for v in nodes})


def _placement(places: Mapping[str, tuple[str, str]]) -> KVPlacement:
    hosts = {n: host for n, (host, _) in places.items() if host}
    racks = {n: rack for n, (_, rack) in places.items() if rack}
    return KVPlacement(hosts, racks)


def request_kv_bytes(node: NodeView, bytes_per_block: int) -> int:
    """The KV a typical request of ``node`` holds (its used device blocks over its requests, at least one
    block): the bytes a move of one of them is priced with when its own size is not known."""
    used_blocks = node.num_device_blocks - node.num_free_device_blocks
    return max(used_blocks // max(node.num_running, node.num_inflight, 1), 1) * bytes_per_block


class PlacedLinks:
    """The link model of the nodes seen: ``model(nodes)`` places (again) the nodes given and keeps those placed
    before (a snapshot of some of the fleet leaves the others where they were), rebuilding the model only when a
    placement changed; ``forget`` a node that left."""

    def __init__(self, links: Mapping[str, LinkSpec] | None = None) -> None:
        self.links = dict(links or DEFAULT_LINKS)
        self._places: dict[str, tuple[str, str]] = {}  # node id → (host, rack) as last seen
        self._model = KVLinkModel(KVPlacement(), self.links)

    def model(self, nodes: Iterable[NodeView]) -> KVLinkModel:
        changed = False
        for v in nodes:
            place = (v.host, v.rack)
            if self._places.get(v.node_id) != place:
                self._places[v.node_id] = place
                changed = True
        if changed:
            self._model = KVLinkModel(_placement(self._places), self.links)
        return self._model

    def forget(self, node_id: str) -> None:
        if self._places.pop(node_id, None) is not None:
            self._model = KVLinkModel(_placement(self._places), self.links)

    def seconds(self, nodes: Iterable[NodeView], src: str, dst: str, nbytes: float) -> float:
        """Moving ``nbytes`` of KV ``src`` → ``dst`` on an idle link, with the placements of ``nodes``."""
        return self.model(nodes).seconds(src, dst, nbytes)
