"""NodeAsks: the questions the control plane asks its nodes, and their answers gathered by id.

POST /reset_prefix_cache (ResetPrefixCache, controlplane/prefix_reset.py), POST /start_profile and /stop_profile
(ProfileControl, controlplane/profiling.py), POST /sleep and /wake_up (SleepControl, controlplane/node_sleeps.py) ask
every node one thing and answer with what each node said. A node answers with its question's message type back, the
ask's ``request_id`` kept and its ``node_id`` set; the server's dispatcher hands each such answer, from the node its
routing id names, to ``answer``.

    NodeAsks.ask(node_ids, make(ask_id), send, timeout_s) ─► {node id: its answer | None (none came, or unsent)}
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio

from transport.messages import Envelope, ProfileControl, ResetPrefixCache, SleepControl

# the asks' answers (each its question's type): the server's dispatcher hands them to ``NodeAsks.answer``
NODE_ANSWERS = (ResetPrefixCache, ProfileControl, SleepControl)


@dataclass
class _Pending:
    node_ids: frozenset[str]
    answers: dict[str, Envelope] = field(default_factory=dict)
    done: anyio.Event = field(default_factory=anyio.Event)


class NodeAsks:
    """The asks in flight, by id; ``answer`` takes a node's answer (an unknown id, or a node not asked: dropped)."""

    def __init__(self, prefix: str = "ask") -> None:
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)
        self._prefix = prefix

    def answer(self, msg: Envelope) -> None:
        pending = self._pending.get(msg.request_id)
        node_id = getattr(msg, "node_id", "")
        if pending is None or node_id not in pending.node_ids:
            return
        pending.answers[node_id] = msg
        if len(pending.answers) == len(pending.node_ids):
            pending.done.set()

    async def ask(
        self, node_ids: list[str], make: Callable[[str], Envelope], send, timeout_s: float
    ) -> dict[str, Envelope | None]:
        """Send ``make(ask_id)`` to each of ``node_ids`` (``send(msg, node_id)``) and wait for their answers (at most
        ``timeout_s``); each node's answer, None where none came (or the send failed)."""
        ask_id = f"{self._prefix}-{next(self._ids)}"
        pending = self._pending[ask_id] = _Pending(frozenset(node_ids))
        try:
            for node_id in node_ids:
                try:
                    send(make(ask_id), node_id)
                except Exception:  # a node whose outbox is full, or gone: no answer from it
                    pending.node_ids = pending.node_ids - {node_id}
            if len(pending.answers) < len(pending.node_ids):
                with anyio.move_on_after(timeout_s):
                    await pending.done.wait()
        finally:
            del self._pending[ask_id]
        return {node_id: pending.answers.get(node_id) for node_id in node_ids}
