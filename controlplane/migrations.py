"""Migrations: the control plane's side of live migration — which peers a node is told, which requests move
where (`zoo drain`, rebalancing), and what happens when a move is done. Synchronous and without I/O, like
RequestPath: messages leave through ``send_to_node`` (raises MailboxFull).

    zoo drain NODE ──► migrate_off(node, "drain") ─┐
    a LoadReport ──► rebalance() (controlplane/rebalance.py) ─┴─► MigrateRequest(request, target, endpoint) ─► source
    source ─MigrationDone─► on_done ─► RequestPath.migrated: resume on the target (its KV is there), or
                                       re-prefill elsewhere when the transfer failed

Only nodes whose hello named a data endpoint (`zoo agent --data-endpoint`) take part; the others never see a
MigrateRequest and their requests finish where they are, as before.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from controlplane.rebalance import RebalanceConfig, Rebalancer
from controlplane.request_path import RequestPath
from controlplane.router.placement import PlacedLinks, request_kv_bytes
from controlplane.router.policy import NodeView
from transport.actor import MailboxFull
from transport.codec import clip
from transport.messages import Envelope, Heartbeat, MigrateRequest, MigrationDone, NodeHello

log = logging.getLogger(__name__)


class Migrations:
    """counts: "reason:outcome" → MigrationDones heard (outcome "ok" | "failed" | "refused")."""

    def __init__(
        self,
        registry,
        path: RequestPath,
        send_to_node: Callable[[Envelope, str], None],
        rebalance: RebalanceConfig | None = None,
    ) -> None:
        self.registry = registry
        self.path = path
        self._send_to_node = send_to_node
        self.placed = PlacedLinks()  # the KV link between two nodes, from their hellos' host/rack
        self.rebalancer = Rebalancer(rebalance or RebalanceConfig(), self.has_data_plane, self.move_s)
        self.counts: dict[str, int] = {}
        self.kv_bytes_total = 0  # KV bytes moved by migrations that reached their target (MigrationDone.ok)
        self.seen_data_plane = False  # a node with a data endpoint has joined (else rebalance() returns at once)

    def has_data_plane(self, node_id: str) -> bool:
        return node_id in self.registry and bool(self.registry.hello(node_id).data_endpoint)

    def move_s(self, source: NodeView, target: str) -> float:
        """Seconds moving a typical request of ``source`` to ``target`` takes on their link (placements: the
        registry's nodes, controlplane/router/placement.py)."""
        nbytes = request_kv_bytes(source, self.registry.hello(source.node_id).kv.bytes_per_block)
        return self.placed.seconds(self.registry.views(), source.node_id, target, nbytes)

    def data_peers(self, hello: NodeHello) -> dict[str, str]:
        """The data endpoints a node is told (Welcome.peers): live nodes of its model that have one."""
        self.seen_data_plane |= bool(hello.data_endpoint)
        peers = {}
        for node_id in (v.node_id for v in self.registry.views()):
            if node_id == hello.node_id or self.registry.state(node_id) is None:
                continue
            other = self.registry.hello(node_id)
            if other.model == hello.model and other.data_endpoint:
                peers[node_id] = other.data_endpoint
        return peers

    def heartbeat_echo(self, node_id: str) -> Heartbeat:
        """The answer to a node's heartbeat: with its live data peers and each one's KV store room (the remote KV
        tier, agent/kv_remote_swap.py; peers without a report of it are left out), when it has a data plane."""
        if node_id not in self.registry or not self.has_data_plane(node_id):
            return Heartbeat(node_id=node_id)
        peers = self.data_peers(self.registry.hello(node_id))
        free = {}
        for peer in peers:
            report = self.registry.last_report(peer)
            if report is not None and report.kv_store_free_bytes >= 0:
                free[peer] = report.kv_store_free_bytes
        return Heartbeat(node_id=node_id, peers=peers, peer_kv_free_bytes=free)

    def migrate_off(self, node_id: str, reason: str) -> int:
        """Ask ``node_id`` to move each of its requests, KV and all, to the live peer of its model with a data
        plane and the fewest requests; how many were asked. Nothing when the node or no peer has a data plane
        (its requests then finish there, or resume elsewhere when it leaves)."""
        if not self.has_data_plane(node_id):
            return 0
        peers = self.data_peers(self.registry.hello(node_id))
        load = {p: len(self.registry.inflight_request_ids(p)) for p in peers if str(self.registry.state(p)) == "up"}
        source = next(v for v in self.registry.views() if v.node_id == node_id)
        move_s = {p: self.move_s(source, p) for p in load}
        num_asked = 0
        for request_id in self.registry.inflight_request_ids(node_id):
            if not load:
                break
            target = min(load, key=lambda p: (load[p], move_s[p], p))  # ties: the fastest link
            load[target] += 1
            if not self._ask(request_id, node_id, target, peers[target], reason):
                break
            num_asked += 1
        if num_asked:
            log.info("node %s: %d requests asked to migrate (%s)", node_id, num_asked, reason)
        return num_asked

    def rebalance(self) -> None:
        """A node out of KV while a peer idles: move a request. Free for a fleet without data planes."""
        if not self.seen_data_plane:
            return
        nodes = self.registry.snapshot().nodes
        if not any(self.has_data_plane(v.node_id) for v in nodes):
            return
        inflight = {v.node_id: self.registry.inflight_request_ids(v.node_id) for v in nodes}
        for move in self.rebalancer.decide(self.registry.clock.now(), nodes, inflight):
            endpoint = self.registry.hello(move.target).data_endpoint
            if not self._ask(move.request_id, move.source, move.target, endpoint, "rebalance"):
                return
            log.info("rebalance: request %s %s -> %s (out of KV there)", move.request_id, move.source, move.target)

    def hand_off(self, request_id: str, source: str, target: str) -> bool:
        """The prefill/decode split (controlplane/split_handoff.py): ask ``source`` to move ``request_id`` to
        ``target`` after its first token (reason "split"). False when either has no data plane or the ask failed."""
        if not (self.has_data_plane(source) and self.has_data_plane(target)):
            return False
        return self._ask(request_id, source, target, self.registry.hello(target).data_endpoint, "split")

    def on_done(self, msg: MigrationDone) -> None:
        """A source's MigrationDone (the caller checked it came from ``msg.node_id``)."""
        outcome = "ok" if msg.ok else ("failed" if msg.left else "refused")
        key = f"{msg.reason or 'unknown'}:{outcome}"
        self.counts[key] = self.counts.get(key, 0) + 1
        if not msg.left:
            log.info("request %s stays on %s: %s", msg.request_id, msg.node_id, clip(msg.message))
            return
        why = f"migrating from {msg.node_id!r} to {msg.target_node_id!r} failed: {clip(msg.message)}"
        if msg.ok:
            self.kv_bytes_total += msg.kv_bytes
            log.info(
                "request %s migrated %s -> %s: %d tokens, %d KV bytes in %.1f ms",
                msg.request_id, msg.node_id, msg.target_node_id, msg.num_tokens, msg.kv_bytes, 1e3 * msg.transfer_s,
            )  # fmt: skip
        self.path.migrated(msg.node_id, msg.request_id, msg.target_node_id, msg.ok, why)

    def _ask(self, request_id: str, source: str, target: str, endpoint: str, reason: str) -> bool:
        msg = MigrateRequest(request_id=request_id, target_node_id=target, target_data_endpoint=endpoint, reason=reason)
        try:
            self._send_to_node(msg, source)
        except MailboxFull:
            log.warning("node %s: could not ask it to migrate %s (agent outbox full)", source, request_id)
            return False
        return True
