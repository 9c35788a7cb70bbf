"""The one place ZeroMQ sockets are made, and the thin async wrapper every socket owner uses.

Socket roles (each socket is owned by one actor; nothing else touches it)::

    node agent   DEALER ─connect─► ROUTER  bind tcp://127.0.0.1:5555   control plane, agent side
                 routing id = node id      ROUTER_HANDOVER: a restarted agent takes its identity over
    client       DEALER ─connect─► ROUTER  bind tcp://127.0.0.1:5556   control plane, client side
                 routing id: zmq's own     ROUTER_MANDATORY on both: a vanished peer is an error we see
                                           (EHOSTUNREACH), never a silent drop

Options set deliberately on every socket: LINGER 0 (closing never blocks on unsent messages: a peer that
is gone stays gone), send/receive high-water marks (backpressure instead of unbounded memory), TCP
keepalive (a dead host's half-open connection is eventually noticed by the kernel), a short reconnect
interval on connecting sockets. DEALERs queue while disconnected (no IMMEDIATE): a request sent before
the TCP handshake completes is delivered, and stale messages that reach a restarted control plane are
harmless (a heartbeat from an unknown node is answered "send NodeHello"; a chunk of an unknown request
is answered with a CancelRequest).

CURVE (optional; transport/curve.py): a control-plane ROUTER given ``curve=CurveServer`` is a CURVE server
whose peers the context's ZAP handler admits by public key; a DEALER given ``curve=CurveClient`` encrypts
and authenticates to it. On such a ROUTER each received message carries its connection's ZAP User-Id
(``Received.user_id``), and a Channel with ``peers_bound_to_keys`` (the agent socket: routing id = node id
= key name) drops a message whose routing id is not its key's name and sends nothing more to that
routing id until its own key speaks again. ROUTER_HANDOVER is never set on a CURVE ROUTER: a second
connection with a live routing id is ignored by libzmq instead of taking the identity over.

Timestamps: ``send`` stamps ``msg.sent_ns`` with ``time.monotonic_ns()`` right before encoding, and
``recv_batch`` stamps every received message's ``recv_ns`` right after it left the socket. On one host,
``recv_ns - sent_ns`` is the hop latency (CLOCK_MONOTONIC is shared by all processes).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

import zmq
import zmq.asyncio

from transport.codec import Frame, encode
from transport.curve import CurveClient, CurveServer
from transport.messages import MAX_PAYLOAD_BYTES, MAX_TENSOR_BYTES, Envelope

DEFAULT_AGENT_ENDPOINT = "tcp://127.0.0.1:5555"
DEFAULT_CLIENT_ENDPOINT = "tcp://127.0.0.1:5556"

ROUTER_HWM = 100_000  # messages per peer pipe
DEALER_HWM = 100_000
# A frame set above this is dropped by libzmq together with the connection; below it (but above the
# codec's limits) it is read and answered with an OVERSIZED ErrorReply.
CLIENT_MAX_MSG_BYTES = 4 * MAX_PAYLOAD_BYTES
AGENT_MAX_MSG_BYTES = 2 * (MAX_PAYLOAD_BYTES + MAX_TENSOR_BYTES)
RECONNECT_IVL_MS = 100
RECONNECT_IVL_MAX_MS = 2_000
TCP_KEEPALIVE_IDLE_S = 30
TCP_KEEPALIVE_INTVL_S = 5
TCP_KEEPALIVE_CNT = 3
RECV_BATCH = 256  # messages drained per wake-up of a reader
MAX_LOGGED_IMPOSTORS = 1024  # distinct (routing id, key name) pairs logged at WARNING

log = logging.getLogger(__name__)


class PeerUnreachable(Exception):
    """A ROUTER send to a peer that is not connected (ROUTER_MANDATORY turned the silent drop into this)."""


def _common_options(sock: zmq.Socket, sndhwm: int, rcvhwm: int) -> None:
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, sndhwm)
    sock.setsockopt(zmq.RCVHWM, rcvhwm)
    sock.setsockopt(zmq.TCP_KEEPALIVE, 1)
    sock.setsockopt(zmq.TCP_KEEPALIVE_IDLE, TCP_KEEPALIVE_IDLE_S)
    sock.setsockopt(zmq.TCP_KEEPALIVE_INTVL, TCP_KEEPALIVE_INTVL_S)
    sock.setsockopt(zmq.TCP_KEEPALIVE_CNT, TCP_KEEPALIVE_CNT)


def bind_router(
    ctx: zmq.asyncio.Context,
    endpoint: str,
    *,
    handover: bool,
    max_msg_bytes: int = CLIENT_MAX_MSG_BYTES,
    curve: CurveServer | None = None,
) -> tuple[zmq.asyncio.Socket, str]:
    """A bound ROUTER and the endpoint it really bound (``tcp://127.0.0.1:0`` picks a free port).

    curve: make it a CURVE server whose peers the context's ZAP handler (transport/curve.py) admits; the
    handler must already be bound. ``handover`` is then ignored (identities are bound to keys).
    """
    sock = ctx.socket(zmq.ROUTER)
    try:
        _common_options(sock, ROUTER_HWM, ROUTER_HWM)
        sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        if curve is not None:
            sock.setsockopt(zmq.ZAP_ENFORCE_DOMAIN, 1)  # no ZAP handler: nobody is admitted (fail closed)
            sock.setsockopt(zmq.ZAP_DOMAIN, curve.domain.encode())
            sock.setsockopt(zmq.CURVE_SERVER, 1)
            sock.setsockopt(zmq.CURVE_SECRETKEY, curve.keys.secret_key)
        elif handover:
            sock.setsockopt(zmq.ROUTER_HANDOVER, 1)
        sock.setsockopt(zmq.MAXMSGSIZE, max_msg_bytes)
        sock.bind(endpoint)
        bound = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    except BaseException:
        sock.close(linger=0)
        raise
    return sock, bound


def connect_dealer(
    ctx: zmq.asyncio.Context, endpoint: str, *, routing_id: bytes | None = None, curve: CurveClient | None = None
) -> zmq.asyncio.Socket:
    """A DEALER connected (asynchronously: zmq reconnects by itself) to ``endpoint``; with ``curve``, a
    CURVE client of the server whose public key it names."""
    sock = ctx.socket(zmq.DEALER)
    try:
        _common_options(sock, DEALER_HWM, DEALER_HWM)
        if curve is not None:
            sock.setsockopt(zmq.CURVE_SERVERKEY, curve.server_public_key)
            sock.setsockopt(zmq.CURVE_PUBLICKEY, curve.keys.public_key)
            sock.setsockopt(zmq.CURVE_SECRETKEY, curve.keys.secret_key)
        if routing_id is not None:
            if not 0 < len(routing_id) <= 255 or routing_id[0] == 0:
                raise ValueError(f"routing id must be 1..255 bytes not starting with a zero byte: {routing_id!r}")
            sock.setsockopt(zmq.ROUTING_ID, routing_id)
        sock.setsockopt(zmq.RECONNECT_IVL, RECONNECT_IVL_MS)
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, RECONNECT_IVL_MAX_MS)
        sock.connect(endpoint)
    except BaseException:
        sock.close(linger=0)
        raise
    return sock


@dataclass(slots=True)
class Received:
    """One message as it left the socket: ROUTER identity (None on a DEALER), raw frames, arrival time,
    and on a CURVE server the ZAP User-Id of its connection (the name of the peer's key; else None)."""

    peer: bytes | None
    frames: list[bytes]
    recv_ns: int
    user_id: str | None = None


class Channel:
    """A socket and its synchronous shadow; used only by the loops of the actor that owns it.

    The first message of a burst is awaited on the asyncio socket; the rest of the burst is drained with
    non-blocking calls on the shadow socket in the same wake-up.

    peers_bound_to_keys (a CURVE ROUTER whose peers' routing ids are their keys' names: the agent socket):
    a message whose routing id differs from its ZAP User-Id is dropped and counted (``num_impostors``), and
    sends to that routing id raise PeerUnreachable until a message authenticated as it arrives.
    """

    def __init__(self, sock: zmq.asyncio.Socket, *, peers_bound_to_keys: bool = False) -> None:
        self.socket = sock
        self._sync = zmq.Socket.shadow(sock.underlying)
        self.is_router = sock.type == zmq.ROUTER
        self.authenticates = self.is_router and bool(sock.getsockopt(zmq.CURVE_SERVER))
        if peers_bound_to_keys and not self.authenticates:
            raise ValueError("peers_bound_to_keys needs a CURVE server ROUTER (bind_router(..., curve=...))")
        self.peers_bound_to_keys = peers_bound_to_keys
        self.num_sent = 0
        self.num_received = 0
        self.num_impostors = 0  # messages dropped: routing id ≠ the key's name
        self._key_named_peers: set[bytes] = set()  # routing ids seen from their own key (≤ the allow list)
        self._impostor_held: set[bytes] = set()  # of those, the ones whose last message came from another key
        self._logged_impostors: set[tuple[bytes, str]] = set()

    async def recv_batch(self, max_messages: int = RECV_BATCH) -> list[Received]:
        """Wait until at least one message is readable, then return every queued one (up to max).

        Empty when a CURVE channel dropped every message of the wake-up (the owner still hears of it)."""
        if self.authenticates:
            return await self._recv_authenticated_batch(max_messages)
        frames = await self.socket.recv_multipart()
        batch = [self._received(frames, time.monotonic_ns())]
        while len(batch) < max_messages:
            try:
                frames = self._sync.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
            batch.append(self._received(frames, time.monotonic_ns()))
        self.num_received += len(batch)
        return batch

    def _received(self, frames: list[bytes], recv_ns: int) -> Received:
        return Received(frames[0], frames[1:], recv_ns) if self.is_router else Received(None, frames, recv_ns)

    async def _recv_authenticated_batch(self, max_messages: int) -> list[Received]:
        # copy=False: the User-Id is a property of the zmq message (each of its frames carries it)
        batch: list[Received] = []
        self._admit_into(batch, await self.socket.recv_multipart(copy=False))
        for _ in range(max_messages - 1):
            try:
                frames = self._sync.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                break
            self._admit_into(batch, frames)
        self.num_received += len(batch)
        return batch

    def _admit_into(self, batch: list[Received], frames: list[zmq.Frame]) -> None:
        user_id = frames[0].get("User-Id")
        received = Received(frames[0].bytes, [f.bytes for f in frames[1:]], time.monotonic_ns(), user_id)
        if self._admit(received):
            batch.append(received)

    def _admit(self, received: Received) -> bool:
        if not self.peers_bound_to_keys:
            return True
        peer = received.peer
        if received.user_id is not None and peer == received.user_id.encode():
            self._key_named_peers.add(peer)
            self._impostor_held.discard(peer)
            return True
        self.num_impostors += 1
        if peer in self._key_named_peers:
            self._impostor_held.add(peer)
        seen = (peer, received.user_id or "")
        if seen not in self._logged_impostors and len(self._logged_impostors) < MAX_LOGGED_IMPOSTORS:
            self._logged_impostors.add(seen)
            log.warning(
                "dropped a message from routing id %r authenticated as %r: a node id must be its key's name",
                peer,
                received.user_id,
            )
        return False

    def send(self, msg: Envelope, peer: bytes | None = None, tensor_frames: Sequence[Frame] = ()) -> None:
        """Stamp ``sent_ns``, encode and send without blocking.

        Raises PeerUnreachable (ROUTER: no such peer) or zmq.Again (the peer's pipe is at its HWM).
        """
        msg.sent_ns = time.monotonic_ns()
        self.send_frames(encode(msg, tensor_frames), peer)

    def send_frames(self, frames: Sequence[Frame], peer: bytes | None = None) -> None:
        # Through the asyncio socket (with NOBLOCK it sends at once and returns a done future): it then
        # re-arms a waiting reader, whose edge-triggered FD event this send may have consumed.
        if self._impostor_held and peer in self._impostor_held:
            raise PeerUnreachable(peer)
        future = self.socket.send_multipart(frames if peer is None else [peer, *frames], zmq.NOBLOCK, copy=False)
        error = future.exception()
        if error is not None:
            if isinstance(error, zmq.ZMQError) and error.errno == zmq.EHOSTUNREACH:
                raise PeerUnreachable(peer) from None
            raise error
        self.num_sent += 1

    async def wait_writable(self) -> None:
        await self.socket.poll(flags=zmq.POLLOUT)

    def close(self, linger_ms: int = 0) -> None:
        self.socket.close(linger=linger_ms)
