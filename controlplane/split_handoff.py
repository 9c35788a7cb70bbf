"""The prefill/decode split in the real control plane: ``zoo controlplane --policy pd_split``.

The routing is controlplane/router/pd_split.py's ``PDSplitRouter``, with each node's role from its hello
(``zoo agent --role prefill|decode|both``, ``role = "..."`` in a zoo.toml ``[[agents]]`` table; an agent that
names none is ``both``) and the KV bytes per token from its hello's KV geometry. The hand-off is a live
migration (controlplane/migrations.py, agent/kv_migration.py) with reason ``split``::

    request ─► choose: a prefill node p (and a decode node d, the transfer priced on their link) ─► p
    p's first token ─► relayed to the client, then on_first_token ─► Migrations.hand_off(request, p, d)
        ─► MigrateRequest(reason="split") ─► p ships the KV to d's data plane ─► MigrationDone ─►
        RequestPath.migrated ─► choose again (the request is known to be landing: d, or another node that
        decodes) ─► d continues the stream from its prefix cache

A request stays where it is (colocated) when p and d are one node, either node has no data plane
(``zoo agent --data-endpoint``), or p's agent outbox is full. The link between two real nodes follows
their hellos' placement (``zoo agent --host-id/--rack``, controlplane/router/placement.py): one host NVLink,
one rack InfiniBand, else Ethernet (a node that said neither is its own host and rack) — unless a fixed link
model is given.
"""

from __future__ import annotations

from backends.kv_link_model import KVLinkModel
from controlplane.router.pd_split import ROLES, PDSplitRouter
from controlplane.router.placement import PlacedLinks
from controlplane.router.policy import ClusterSnapshot, NodeView, RouteRequest
from controlplane.router.router_config import RouterConfig

POLICY_NAME = "pd_split"
MAX_LANDING = 10_000  # requests asked to move and not placed again (one that finished meanwhile never is)


class SplitHandoffPolicy(PDSplitRouter):
    """The split router as the control plane's policy; ``attach(registry, migrations)`` before it routes."""

    def __init__(self, config: RouterConfig, links: KVLinkModel | None = None) -> None:
        super().__init__(config, self._role_of, links or KVLinkModel(), kv_bytes_per_token=1)
        self.placed = PlacedLinks() if links is None else None  # None: the given model, fixed
        self.registry = None
        self.migrations = None
        self._moving: dict[str, str] = {}  # request id → the decode node it was asked to move to
        self.num_handoffs_asked = 0

    def attach(self, registry, migrations) -> None:
        self.registry, self.migrations = registry, migrations

    def _role_of(self, node: NodeView) -> str:
        if self.registry is None or node.node_id not in self.registry:
            return "both"
        role = getattr(self.registry.hello(node.node_id), "role", "both")
        return role if role in ROLES else "both"

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        if self.placed is not None:
            self.links = self.placed.model(snapshot.nodes)
        target = self._moving.pop(request.request_id, None)
        if target is not None:  # a hand-off landing (RequestPath.migrated): a node that decodes, the target first
            nodes = {v.node_id: v for v in snapshot.nodes}
            if target in nodes:
                return target
            decoding = [v for v in snapshot.nodes if self.role(v) != "prefill"] or list(snapshot.nodes)
            if not decoding:
                return None
            return min(decoding, key=lambda v: self.decode_cost_s(v, request)).node_id
        if snapshot.nodes and self.registry is not None and snapshot.nodes[0].node_id in self.registry:
            kv = self.registry.hello(snapshot.nodes[0].node_id).kv
            self.kv_bytes_per_token = max(kv.bytes_per_block // max(kv.block_size, 1), 1)
        return super().choose(request, snapshot)

    def on_first_token(self, request_id: str, node_id: str) -> None:
        target = self.decode_target(request_id)
        if target is None or target == node_id:
            return
        asked = self.migrations is not None and self.migrations.hand_off(request_id, node_id, target)
        if not asked:  # it decodes where it is
            self.on_handed_off(request_id)
            self._plan[request_id] = (node_id, node_id)
            return
        self.num_handoffs_asked += 1
        self._moving[request_id] = target
        while len(self._moving) > MAX_LANDING:  # requests that finished before they could move
            del self._moving[next(iter(self._moving))]

    def on_node_removed(self, node_id: str) -> None:
        super().on_node_removed(node_id)
        if self.placed is not None:
            self.placed.forget(node_id)


def make_control_plane_policy(config: RouterConfig):
    """The policy ``zoo controlplane --policy NAME`` runs: the split's, or one of router/policies by name."""
    if config.policy == POLICY_NAME:
        return SplitHandoffPolicy(config)
    from controlplane.router.policies import make_policy

    return make_policy(config.policy, config)


def attach_split(control_plane) -> None:
    """Give a control plane's split policy its registry and migrations (nothing for other policies)."""
    policy = control_plane.policy
    if isinstance(policy, SplitHandoffPolicy):
        policy.attach(control_plane.registry, control_plane.kv_moves)
