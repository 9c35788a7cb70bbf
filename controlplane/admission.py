"""Admission control: refuse a request at once, with a reason and a retry hint, when queues are full.

Never drops silently: ``check`` either admits (None) or returns a ``Refusal`` that the caller turns into an
``ErrorReply(code=OVERLOADED, retry_after_s=...)`` / HTTP 429 with Retry-After.

A node's queue is the requests waiting there to start::

    queued(node) = max(num_waiting + num_swapped, num_inflight - num_running)

(the report's count, or, if higher, what the control plane routed there beyond the report's running
batch). The global queue is the sum over the snapshot's nodes; both are kept incrementally per snapshot
(router/policies/node_table.py), so a check costs a few microseconds even with 1,024 nodes.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from controlplane.router.policies.node_table import NodeTable, max_prompt_tokens
from controlplane.router.policy import ClusterSnapshot, NodeView
from transport.messages import ErrorCode

_COL_BACKLOG_S = 1
_COL_QUEUED = 2


@dataclass(slots=True)
class AdmissionConfig:
    """max_queue_per_node: requests waiting on one node before that node refuses more.
    max_queue_global: requests waiting over every node of the snapshot before the cluster refuses more.
    retry_after_s: what a refused client is told to wait before retrying."""

    max_queue_per_node: int = 256
    max_queue_global: int = 4096
    retry_after_s: float = 1.0

    def __post_init__(self) -> None:
        if self.max_queue_per_node < 0:
            raise ValueError(f"max_queue_per_node must be >= 0, got {self.max_queue_per_node}")
        if self.max_queue_global < 0:
            raise ValueError(f"max_queue_global must be >= 0, got {self.max_queue_global}")
        if self.retry_after_s <= 0:
            raise ValueError(f"retry_after_s must be > 0, got {self.retry_after_s}")


class RefusalReason(enum.StrEnum):
    NODE_QUEUE_FULL = "node_queue_full"
    GLOBAL_QUEUE_FULL = "global_queue_full"
    SLO_UNREACHABLE = "slo_unreachable"  # the node's prefill backlog alone exceeds the class's TTFT SLO


@dataclass(frozen=True, slots=True)
class Refusal:
    reason: RefusalReason
    message: str
    retry_after_s: float
    node_id: str | None = None
    code: ErrorCode = ErrorCode.OVERLOADED


def queued_requests(node: NodeView) -> int:
    """Requests waiting to start on ``node`` (see the module docstring)."""
    return max(node.num_waiting + node.num_swapped, node.num_inflight - node.num_running)


def prefill_backlog_s(node: NodeView) -> float:
    """Seconds of prompt tokens ahead of a new request on ``node`` (queued + routed there and not yet
    reported) at its measured prefill rate; 0 before it has measured one."""
    rate = node.prefill_tok_per_s
    return (node.queued_prefill_tokens + node.inflight_prefill_tokens) / rate if rate > 0 else 0.0


def _derive(node: NodeView) -> tuple[float, float, float]:
    return (max_prompt_tokens(node), prefill_backlog_s(node), queued_requests(node))


class AdmissionControl:
    def __init__(self, config: AdmissionConfig | None = None) -> None:
        self.config = AdmissionConfig() if config is None else config
        self._tables: dict[object, NodeTable] = {}  # snapshot change-mark group (None: unmarked) -> its table
        self.num_admitted_total = 0
        self.num_refused_total: dict[RefusalReason, int] = {reason: 0 for reason in RefusalReason}

    def check(
        self,
        snapshot: ClusterSnapshot,
        node_id: str | None = None,
        max_queue_per_node: int | None = None,
        max_backlog_s: float | None = None,
    ) -> Refusal | None:
        """None: admit. Checks the global queue of ``snapshot`` and, if given, ``node_id``'s own queue
        (the node the router chose; a node not in the snapshot is not checked) against ``max_queue_per_node``
        (a traffic class's limit, controlplane/cells.py; None: the config's) and, if given, its prefill
        backlog against ``max_backlog_s`` (a class that sheds past its TTFT SLO). The totals are kept per
        snapshot group (a registry snapshot's change mark: only the nodes logged since are re-derived);
        an unmarked snapshot of other nodes than the last unmarked one rebuilds them (O(N))."""
        config = self.config
        node_limit = config.max_queue_per_node if max_queue_per_node is None else max_queue_per_node
        changes = snapshot.changes
        group = None if changes is None else changes.group
        table = self._tables.get(group)
        if table is None:
            table = self._tables[group] = NodeTable(_derive, 3)
        table.sync(snapshot.nodes, changes)
        total = int(table.columns[_COL_QUEUED].sum()) if len(table) else 0
        if total >= config.max_queue_global:
            return self._refuse(
                RefusalReason.GLOBAL_QUEUE_FULL,
                f"the cluster is overloaded: {total} requests queued over {len(table)} nodes "
                f"(limit {config.max_queue_global}); retry after {config.retry_after_s:g} s",
                None,
            )
        if node_id is not None:
            i = table.index_of.get(node_id)
            if i is not None:
                queued = int(table.values.item(_COL_QUEUED, i))
                if queued >= node_limit:
                    return self._refuse(
                        RefusalReason.NODE_QUEUE_FULL,
                        f"node {node_id!r} is overloaded: {queued} requests queued there "
                        f"(limit {node_limit}); retry after {config.retry_after_s:g} s",
                        node_id,
                    )
                backlog_s = table.values.item(_COL_BACKLOG_S, i)
                if max_backlog_s is not None and backlog_s > max_backlog_s:
                    return self._refuse(
                        RefusalReason.SLO_UNREACHABLE,
                        f"node {node_id!r} has {backlog_s:.2f} s of prefill queued, past this class's TTFT SLO "
                        f"({max_backlog_s:g} s); retry after {config.retry_after_s:g} s",
                        node_id,
                    )
        self.num_admitted_total += 1
        return None

    def make_stats(self) -> dict[str, int]:
        stats = {"num_admitted_total": self.num_admitted_total}
        for reason, count in self.num_refused_total.items():
            stats[f"num_refused_{reason.value}_total"] = count
        return stats

    def _refuse(self, reason: RefusalReason, message: str, node_id: str | None) -> Refusal:
        self.num_refused_total[reason] += 1
        return Refusal(reason, message, self.config.retry_after_s, node_id)
