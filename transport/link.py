"""A socket's owner: one reader loop, one writer loop, one bounded outbox.

    peer ──► socket ──► read_loop ──► on_receive(Received)     (synchronous: dispatch, update state)
    any task ──► outbox (bounded) ──► write_loop ──► socket ──► peer
                                          └─ unreachable / pipe full / cannot be encoded / send failed
                                             ──► on_undeliverable(Outgoing, why)

The Link's two loops are the only code that touches the socket; other tasks reach it through
``send_nowait`` (raises MailboxFull: backpressure the caller must answer, e.g. with OVERLOADED).

Neither loop ends because of one message: a message that fails to encode (EncodeError: an integer out
of msgpack's range) or to send is counted (``num_undeliverable``, ``num_send_errors``), logged (clipped)
and reported to the owner; an exception of ``on_receive`` is counted (``num_receive_errors``) and logged.
Only cancellation (and closing the outbox) ends them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import zmq

from transport.actor import Mailbox
from transport.codec import WHY_UNENCODABLE, EncodeError, Frame, clip, clipped_traceback
from transport.messages import Envelope
from transport.sockets import Channel, PeerUnreachable, Received

log = logging.getLogger(__name__)

OUTBOX_SIZE = 65_536
SEND_BATCH = 256
# ``why`` an Outgoing was not sent, as on_undeliverable hears it (an encode failure is not the peer's fault)
WHY_UNREACHABLE = "peer not connected"
WHY_PIPE_FULL = "peer's pipe is full (high-water mark)"
WHY_SEND_FAILED = "send failed"  # followed by ": <error>"
# and WHY_UNENCODABLE (transport/codec.py), followed by ": <what>"


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
        self.num_undeliverable = 0  # every message not sent, whatever the reason
        self.num_send_errors = 0  # of which: could not be encoded, or the socket raised something unexpected
        self.num_receive_errors = 0  # batches whose on_receive raised

    def send_nowait(self, msg: Envelope, peer: bytes | None = None, tensor_frames: Sequence[Frame] = ()) -> None:
        """Queue ``msg`` for the writer (raises MailboxFull)."""
        self.outbox.put_nowait(Outgoing(peer, msg, tensor_frames))

    async def send(self, msg: Envelope, peer: bytes | None = None, tensor_frames: Sequence[Frame] = ()) -> None:
        """Queue ``msg``, waiting for room in the outbox."""
        await self.outbox.put(Outgoing(peer, msg, tensor_frames))

    async def read_loop(self) -> None:
        while True:
            batch = await self.channel.recv_batch()
            try:
                self._on_receive(batch)
            except Exception as e:  # the owner's bug: count it, keep reading
                self.num_receive_errors += 1
                log.error("%s: on_receive failed on a batch of %d:\n%s", self.name, len(batch), clipped_traceback(e))

    async def write_loop(self) -> None:
        while True:
            first = await self.outbox.get()
            for item in (first, *self.outbox.drain(SEND_BATCH - 1)):
                self._send(item)

    def _send(self, item: Outgoing) -> None:
        try:
            self.channel.send(item.msg, item.peer, item.tensor_frames)
        except PeerUnreachable:
            self._undeliverable(item, WHY_UNREACHABLE)
        except zmq.Again:
            self._undeliverable(item, WHY_PIPE_FULL)
        except EncodeError as e:
            self.num_send_errors += 1
            log.warning("%s: could not encode %s for %r: %s", self.name, type(item.msg).__name__, item.peer, clip(e))
            self._undeliverable(item, f"{WHY_UNENCODABLE}: {clip(e)}")
        except zmq.ZMQError as e:
            if e.errno in (zmq.ENOTSOCK, zmq.ETERM):  # the socket is closed: the link is over, not this message
                raise
            self._send_failed(item, e)
        except Exception as e:  # a send that failed otherwise: this message only
            self._send_failed(item, e)

    def _send_failed(self, item: Outgoing, e: Exception) -> None:
        self.num_send_errors += 1
        log.warning("%s: could not send %s to %r: %s", self.name, type(item.msg).__name__, item.peer, clip(repr(e)))
        self._undeliverable(item, f"{WHY_SEND_FAILED}: {clip(repr(e))}")

    def _undeliverable(self, item: Outgoing, why: str) -> None:
        self.num_undeliverable += 1
        log.debug("%s: could not deliver %s to %r: %s", self.name, type(item.msg).__name__, item.peer, why)
        if self._on_undeliverable is not None:
            try:
                self._on_undeliverable(item, why)
            except Exception as e:
                log.error("%s: on_undeliverable failed:\n%s", self.name, clipped_traceback(e))

    def flush_now(self) -> None:
        """Send everything queued, synchronously, outside the write loop (a shutdown: the loop may be gone);
        what cannot be sent is reported undeliverable as usual."""
        for item in self.outbox.drain(len(self.outbox)):
            self._send(item)

    def close(self, linger_ms: int = 0) -> None:
        self.outbox.close()
        self.channel.close(linger_ms)
