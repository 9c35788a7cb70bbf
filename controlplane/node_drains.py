"""Draining a node, and resuming it: the control plane's side of ``NodeDrain`` (transport/messages.py). Synchronous and
without I/O, like Migrations: messages leave through ``send_to_node`` (raises MailboxFull).

    agent at SIGTERM ─NodeDrain─► on_agent_drain: routed nothing new; it leaves once its requests are done
    `zoo drain NODE` ─NodeDrain─► answer ─► drain: routed nothing new, its agent told, its requests moved off where
                                  a data plane lets them (controlplane/migrations.py), else they finish there
    `zoo drain --resume NODE` ──► answer ─► resume: routed to again (an operator's drain undone: `kubectl
                                  uncordon`'s counterpart), its agent told; refused for a node whose agent drains
                                  to stop, which could not take the requests it would be sent

Nothing is cancelled either way: a drain lets the node's requests finish, a resume lets new ones in. The node stays
warm in between (its weights, its prefix cache, its compiled graphs), where stopping and restarting its agent to
undo a drain would lose them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from transport.actor import MailboxFull
from transport.codec import clip
from transport.messages import Envelope, ErrorCode, ErrorReply, NodeDrain

log = logging.getLogger(__name__)


class NodeDrains:
    """``drain``/``resume`` a node by its id; ``answer`` a client's NodeDrain; ``on_agent_drain`` an agent's."""

    def __init__(
        self, registry, send_to_node: Callable[[Envelope, str], None], migrate_off: Callable[[str, str], object]
    ) -> None:
        self.registry = registry
        self._send_to_node = send_to_node
        self._migrate_off = migrate_off  # moves the node's requests elsewhere where live migration allows
        self.num_resumed = 0

    def on_agent_drain(self, msg: NodeDrain) -> None:
        """The agent drains: to stop (``leaving``: SIGTERM; it leaves once its requests are done), or says again after
        a Welcome that an operator drained it. Nothing new goes there."""
        if self.registry.drain(msg.node_id, leaving=msg.leaving):
            num_inflight = len(self.registry.inflight_request_ids(msg.node_id))
            log.info("node %s drains (%s), %d requests there", msg.node_id, clip(msg.reason), num_inflight)

    def drain(self, node_id: str, reason: str = "") -> bool:
        """Route nothing new to ``node_id`` and tell its agent; its requests finish there (or resume elsewhere
        when it leaves). False: no such node."""
        if not self.registry.drain(node_id):
            return False
        log.info("node %s drains (%s)", node_id, clip(reason))
        self._tell(NodeDrain(node_id=node_id, reason=reason), "drain")
        self._migrate_off(node_id, "drain")
        return True

    def resume(self, node_id: str, reason: str = "") -> str | None:
        """Route to a drained node again and tell its agent; None when done (or it was not draining), else why
        not: no such node, or its agent drains to stop."""
        outcome = self.registry.resume(node_id)
        if outcome == "unknown":
            return f"unknown node {node_id!r}"
        if outcome == "leaving":
            return f"node {node_id!r} is shutting down (its agent drains to stop): it cannot take new requests"
        if outcome == "resumed":
            if not self._tell(NodeDrain(node_id=node_id, reason=reason, resume=True), "resume"):
                self.registry.drain(node_id)  # the node and its agent must agree: it stays drained
                return f"node {node_id!r}: its agent could not be told (its outbox is full); it stays drained"
            self.num_resumed += 1
            log.info("node %s resumes (%s)", node_id, clip(reason))
        return None

    def answer(self, msg: NodeDrain) -> Envelope:
        """A client's NodeDrain (`zoo drain [--resume] NODE`): the NodeDrain that answers it (the node's requests
        in flight now), or an ErrorReply naming why not."""
        if msg.resume:
            error = self.resume(msg.node_id, msg.reason or "zoo drain --resume")
        else:
            error = None if self.drain(msg.node_id, msg.reason or "zoo drain") else f"unknown node {msg.node_id!r}"
        if error is not None:
            code = ErrorCode.INVALID_REQUEST
            return ErrorReply(request_id=msg.request_id, code=code, message=error, param="node_id")
        num_inflight = len(self.registry.inflight_request_ids(msg.node_id))
        return NodeDrain(
            request_id=msg.request_id,
            node_id=msg.node_id,
            reason=msg.reason,
            resume=msg.resume,
            num_inflight=num_inflight,
        )

    def _tell(self, msg: NodeDrain, what: str) -> bool:
        try:
            self._send_to_node(msg, msg.node_id)
        except MailboxFull:
            log.warning("node %s: could not tell it to %s (agent outbox full)", msg.node_id, what)
            return False
        return True
