"""Which nodes changed since a snapshot: the registry's change log, so a policy's table re-derives only them.

A policy keeps per-node terms in a NodeTable (router/policies/node_table.py) and must bring it up to date
with every snapshot. Without help it finds the changed nodes by comparing the old and new tuples of views
(~25 µs at 1,024 nodes, most of a decision's budget). The registry knows what it changed, so it logs it::

    NodeChangeLog (one per registry)
      ids:    node id, node id, ...      one entry each time a node's view is replaced (report, routed, ...)
      seq:    number of entries ever logged (an entry's position is its sequence number)
      epoch:  bumped whenever a snapshot group's membership or order changes (join, leave, suspect, ...)

    ChangeMark (one per snapshot): (log, group, epoch, seq) when the snapshot was taken

Watchers: ``watch(callback)`` has ``callback(view)`` called with every new view as it is logged (inside the
registry's update: a report, a routed or finished request), so a policy can derive that node's row then,
off the decision's path (the control plane handles reports between decisions); the decision then only
checks that the rows it finds were derived from the views its snapshot holds.

Contract (what a table may rely on): two snapshots with marks of the same log, the same ``group`` and the
same ``epoch`` hold the same node ids in the same order, and a position whose node id is not logged between
their ``seq`` holds the very same view object. A snapshot built or filtered by hand carries no mark (None),
and a table then compares tuples as before. The log keeps at least ``capacity`` entries; ``since`` answers
None for a position it has forgotten (the table falls back to the comparison).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple, Protocol


class NodeView(Protocol):
    """What the log needs of a view (router/policy.py's NodeView; not imported: policy.py imports this)."""

    @property
    def node_id(self) -> str: ...


class NodeChangeLog:
    def __init__(self, capacity: int = 4096) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self.epoch = 0
        self._ids: list[str] = []
        self._first_seq = 0  # sequence number of _ids[0]
        self._watchers: list[Callable[[NodeView], None]] = []

    @property
    def seq(self) -> int:
        """Entries logged so far: the position the next entry will take."""
        return self._first_seq + len(self._ids)

    def record(self, view: NodeView) -> None:
        """``view`` replaced its node's view."""
        ids = self._ids
        ids.append(view.node_id)
        if len(ids) >= 2 * self.capacity:  # amortised O(1): drop the older half at once
            del ids[: self.capacity]
            self._first_seq += self.capacity
        for watcher in self._watchers:
            watcher(view)

    def watch(self, callback: Callable[[NodeView], None]) -> None:
        """Call ``callback(view)`` with every view logged from now on (it must not raise)."""
        self._watchers.append(callback)

    def unwatch(self, callback: Callable[[NodeView], None]) -> None:
        """Stop calling ``callback`` (a policy replaced at run time: controlplane/router_reload.py)."""
        self._watchers = [w for w in self._watchers if w is not callback]

    def reorder(self) -> None:
        """A snapshot group gained, lost or reordered nodes: marks taken before are not comparable."""
        self.epoch += 1

    def since(self, seq: int) -> list[str] | None:
        """Node ids logged from position ``seq`` on (repeats possible), or None when forgotten."""
        start = seq - self._first_seq
        if start < 0 or seq > self.seq:
            return None
        return self._ids[start:]

    def mark(self, group: object) -> ChangeMark:
        """Where the log stands now, for a snapshot of ``group``."""
        return ChangeMark(self, group, self.epoch, self._first_seq + len(self._ids))


class ChangeMark(NamedTuple):
    """A snapshot's place in a NodeChangeLog (see the module docstring for what it promises). A named
    tuple: one is made per snapshot, and a tuple is made faster than a frozen dataclass."""

    log: NodeChangeLog
    group: object  # the registry's snapshot group: (model | None, cell | None)
    epoch: int
    seq: int

    def subgroup(self, tag: object) -> ChangeMark:
        """The mark of a snapshot holding the nodes of this one that pass a filter ``tag`` names, in the same
        order. Valid only for a filter on a node's hello facts (e.g. ``max_loras > 0``): those change only when
        the node re-joins, which bumps the epoch, so within an epoch the filter keeps the same members and the
        contract above holds for the subgroup. Never for a filter on load (a report could change who passes)."""
        return ChangeMark(self.log, (self.group, tag), self.epoch, self.seq)

    def changed_since(self, older: ChangeMark | None, to_now: bool = False) -> list[str] | None:
        """Node ids whose views may differ between a snapshot marked ``older`` and this one (``to_now``: and
        those logged since this one was taken); None when the two are not comparable (no mark, another log,
        group or epoch, or the log forgot)."""
        if older is None or older.log is not self.log or older.epoch != self.epoch or older.group != self.group:
            return None
        log = self.log
        start, stop = older.seq - log._first_seq, self.seq - log._first_seq
        if start < 0 or start > stop:
            return None  # forgotten, or taken out of order
        return log._ids[start:] if to_now else log._ids[start:stop]
