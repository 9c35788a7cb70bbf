"""ClientSleeps: a ZeroMQ client's SleepControl (``AsyncZooClient.sleep``/``wake``, `zoo top`'s S and W keys): one
node put to sleep or woken through NodeSleeps (controlplane/node_sleeps.py), as POST /sleep and /wake_up do for the
gateway, and the node's answer sent back to that client.

The client socket's handlers run on the loop and may not wait, while a sleep waits for its node (a "wait" sleep until
the node's requests are done), so each ask is queued here and run in a loop of the control plane:

    SleepControl(node_id, action, level, mode | tags) ─► on_ask ─► queue (at most MAX_QUEUED; beyond: OVERLOADED)
                                                          serve ─► NodeSleeps.sleep / wake_up ─► SleepControl answer
    refused at once (ErrorReply): sleep mode off (the control plane started without --enable-sleep-mode), a node not
    in the fleet, a level, mode, tag or action not taken
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import anyio

from controlplane.node_sleeps import NodeSleeps
from engine.sleep_mode import SLEEP_MODES, SleepModeError, check_level, check_tags
from transport.actor import MailboxFull
from transport.dispatch import Incoming
from transport.messages import Envelope, ErrorCode, ErrorReply, SleepControl

log = logging.getLogger(__name__)

MAX_QUEUED = 64  # asks waiting for their turn; beyond, refused as OVERLOADED (a client looping on sleep and wake)


class ClientSleeps:
    """``on_ask``: the client dispatcher's SleepControl handler; ``serve``: the loop that runs the asks."""

    def __init__(
        self, sleeps: NodeSleeps, node_ids: Callable[[], list[str]], send: Callable[[Envelope, bytes], None], on: bool
    ) -> None:
        self.sleeps = sleeps
        self.on = on  # --enable-sleep-mode
        self._node_ids = node_ids
        self._send = send
        self._in, self._out = anyio.create_memory_object_stream[tuple[SleepControl, bytes]](MAX_QUEUED)

    def on_ask(self, incoming: Incoming) -> None:
        msg: SleepControl = incoming.msg
        why, code = self._refusal(msg), ErrorCode.INVALID_REQUEST
        if why is None:
            try:
                self._in.send_nowait((msg, incoming.peer))
                return
            except anyio.WouldBlock:
                why, code = f"{MAX_QUEUED} sleep asks are waiting already", ErrorCode.OVERLOADED
        self._reply(ErrorReply(request_id=msg.request_id, code=code, message=why), incoming.peer)

    async def serve(self) -> None:
        async with anyio.create_task_group() as tg:
            async for msg, peer in self._out:
                tg.start_soon(self._run, msg, peer)

    def _refusal(self, msg: SleepControl) -> str | None:
        if not self.on:
            return "sleep mode is off: start the control plane with --enable-sleep-mode"
        if msg.node_id not in self._node_ids():
            return f"unknown node {msg.node_id[:64]!r}"
        try:
            if msg.action == "sleep":
                check_level(msg.level)
                if msg.mode not in SLEEP_MODES:
                    return f"mode must be one of {', '.join(SLEEP_MODES)}, got {msg.mode[:64]!r}"
            elif msg.action == "wake_up":
                check_tags(msg.tags)
            else:
                return f"unknown action {msg.action[:64]!r}: sleep or wake_up"
        except SleepModeError as e:
            return str(e)
        return None

    async def _run(self, msg: SleepControl, peer: bytes) -> None:
        node_id = msg.node_id
        try:
            if msg.action == "sleep":
                answer = (await self.sleeps.sleep([node_id], msg.level, msg.mode))[node_id]
            else:
                answer = (await self.sleeps.wake_up([node_id], list(msg.tags)))[node_id]
        except Exception:  # a bug of ours: this ask is answered, the loop goes on
            log.exception("a client's %s of node %s failed", msg.action, node_id)
            self._reply(ErrorReply(request_id=msg.request_id, code=ErrorCode.INTERNAL, message="internal error"), peer)
            return
        if answer is None:  # a "wait" sleep still waiting, or a node that did not answer in time
            answer = {"ok": False, "detail": "no answer yet (a wait sleep sleeps once its requests are done)",
                      "sleep_level": self.sleeps.levels.get(node_id, 0), "freed_bytes": 0}  # fmt: skip
        self._reply(SleepControl(request_id=msg.request_id, action=msg.action, node_id=node_id, **answer), peer)

    def _reply(self, msg: Envelope, peer: bytes) -> None:
        try:
            self._send(msg, peer)
        except MailboxFull:
            log.warning("could not answer a client's sleep ask %s: its outbox is full", msg.request_id)
