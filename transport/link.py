"""A socket's owner: one reader loop, one writer loop, one bounded outbox.

    peer ──► socket ──► read_loop ──► on_receive(Received)     (synchronous: dispatch, update state)
    any task ──► outbox (bounded) ──► write_loop ──► socket ──► peer
                                          └─ unreachable / pipe full ──► on_undeliverable(Outgoing, why)

The Link's two loops are the only code that touches the socket; other tasks reach it through
``send_nowait`` (raises MailboxFull: backpressure the caller must answer, e.g. with OVERLOADED).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import zmq

from transport.actor import Mailbox
from transport.codec import Frame
from transport.messages import Envelope
from transport.sockets import Channel, PeerUnreachable, Received

log = logging.getLogger(__name__)

OUTBOX_SIZE = 65_536
SEND_BATCH = 256


@dataclass(slots=True)
class Outgoing:
    peer: bytes | None
    msg: Envelope
    tensor_frames: Sequence[Frame] = ()


class Link:
    def __init__(
        self,
        channel: Channel,
        on_receive: Callable[[list[Received]], None],
        on_undeliverable: Callable[[Outgoing, str], None] | None = None,
        outbox_size: int = OUTBOX_SIZE,
        name: str = "link",
    ) -> None:
        self.channel = channel
        self.name = name
        self._on_receive = on_receive
        self._on_undeliverable = on_undeliverable
        self.outbox: Mailbox[Outgoing] = Mailbox(outbox_size)
        self.num_undeliverable = 0

    def send_nowait(self, msg: Envelope, peer: bytes | None = None, tensor_frames: Sequence[Frame] = ()) -> None:
        """Queue ``msg`` for the writer (raises MailboxFull)."""
        self.outbox.put_nowait(Outgoing(peer, msg, tensor_frames))

    async def send(self, msg: Envelope, peer: bytes | None = None, tensor_frames: Sequence[Frame] = ()) -> None:
        """Queue ``msg``, waiting for room in the outbox."""
        await self.outbox.put(Outgoing(peer, msg, tensor_frames))

    async def read_loop(self) -> None:
        while True:
            self._on_receive(await self.channel.recv_batch())

    async def write_loop(self) -> None:
        while True:
            first = await self.outbox.get()
            for item in (first, *self.outbox.drain(SEND_BATCH - 1)):
                try:
                    self.channel.send(item.msg, item.peer, item.tensor_frames)
                except PeerUnreachable:
                    self._undeliverable(item, "peer not connected")
                except zmq.Again:
                    self._undeliverable(item, "peer's pipe is full (high-water mark)")

    def _undeliverable(self, item: Outgoing, why: str) -> None:
        self.num_undeliverable += 1
        log.debug("%s: could not deliver %s to %r: %s", self.name, type(item.msg).__name__, item.peer, why)
        if self._on_undeliverable is not None:
            try:
                self._on_undeliverable(item, why)
            except Exception:
                log.exception("%s: on_undeliverable failed", self.name)

    def close(self, linger_ms: int = 0) -> None:
        self.outbox.close()
        self.channel.close(linger_ms)
