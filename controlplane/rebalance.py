"""Rebalancer: when a node is out of KV while a peer of its model idles, move one of its running requests there
(a live migration, agent/kv_migration.py). Sans-IO: the control plane calls ``decide`` with the registry's
views at each load report and sends the MigrateRequests it returns; the fleet simulator could call it too.

    hot node:  kv_usage >= hot_kv_usage and requests waiting or swapped (it is preempting or queueing for KV)
    cool peer: same model and cell, a data plane, kv_usage <= cool_kv_usage, nothing waiting
    move:      the hot node's most recently routed request (the least progress lost to the pause) to the
               coolest peer (ties: the fewest requests, then the fastest link: ``move_s``, the KV link model's
               price of the move, controlplane/router/placement.py); at most ``max_moves`` per call, and a node
               is left alone for ``cooldown_s`` after it moved one (its next report must show the effect first)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from controlplane.router.policy import NodeView


@dataclass(frozen=True, slots=True)
class RebalanceConfig:
    hot_kv_usage: float = 0.95
    cool_kv_usage: float = 0.5
    cooldown_s: float = 2.0
    max_moves: int = 1

    def __post_init__(self) -> None:
        if not 0.0 <= self.cool_kv_usage < self.hot_kv_usage <= 1.0:
            raise ValueError(f"need 0 <= cool_kv_usage < hot_kv_usage <= 1, got {self}")
        if self.cooldown_s < 0 or self.max_moves < 1:
            raise ValueError(f"cooldown_s must be >= 0 and max_moves >= 1, got {self}")


@dataclass(frozen=True, slots=True)
class Move:
    request_id: str
    source: str
    target: str


class Rebalancer:
    """``has_data_plane(node_id)``: whether a node can send or take KV (its hello named a data endpoint).
    ``move_s(source view, target id)``: seconds a move of one of source's requests takes on their link (None:
    every link alike)."""

    def __init__(
        self,
        config: RebalanceConfig,
        has_data_plane: Callable[[str], bool],
        move_s: Callable[[NodeView, str], float] | None = None,
    ) -> None:
        self.config = config
        self._has_data_plane = has_data_plane
        self._move_s = move_s or (lambda source, target: 0.0)
        self._last_move_s: dict[str, float] = {}
        self.num_moves = 0

    def decide(self, now_s: float, nodes: Sequence[NodeView], inflight: Mapping[str, Sequence[str]]) -> list[Move]:
        """Moves to make now. ``nodes``: the live, routable nodes; ``inflight``: node id → its request ids in
        routing order (oldest first)."""
        c = self.config
        usable = [v for v in nodes if self._has_data_plane(v.node_id)]
        hot = sorted(
            (
                v
                for v in usable
                if v.kv_usage >= c.hot_kv_usage
                and v.num_waiting + v.num_swapped > 0
                and now_s - self._last_move_s.get(v.node_id, -1e18) >= c.cooldown_s
                and inflight.get(v.node_id)
            ),
            key=lambda v: -v.kv_usage,
        )
        moves: list[Move] = []
        taken: set[str] = set()
        for v in hot:
            cool = [
                p
                for p in usable
                if p.node_id != v.node_id
                and p.node_id not in taken
                and (p.model, p.cell) == (v.model, v.cell)
                and p.kv_usage <= c.cool_kv_usage
                and p.num_waiting == 0
            ]
            if not cool:
                continue
            target = min(cool, key=lambda p: (p.kv_usage, p.num_inflight, self._move_s(v, p.node_id), p.node_id))
            moves.append(Move(inflight[v.node_id][-1], v.node_id, target.node_id))
            taken.add(target.node_id)
            self._last_move_s[v.node_id] = now_s
            if len(moves) >= c.max_moves:
                break
        self.num_moves += len(moves)
        return moves

    def forget(self, node_id: str) -> None:
        self._last_move_s.pop(node_id, None)
