"""KVDataPlane: an agent's data socket for KV between agents, apart from its control socket.

    this agent                                               a peer agent
    send(peer, ...) ─► peer task (one per peer endpoint) ─ DEALER (routing id = node id) ─► peer's ROUTER
                       KVSender window: chunks out while unacked bytes ≤ max_inflight_bytes; acks back
    peers' DEALERs ─► ROUTER (bound at data_endpoint) ─► router task: KVReceiver checks/assembles, acks
                                                                   └─ complete ─► on_received(ReceivedKV)

A transfer is its own sockets' business: the control socket (agent/node_agent.py's Link) never waits behind
KV bytes. Each socket has one owner task (the router task; one task per peer endpoint); ``send`` only
queues a job to the peer's task and waits for its result. Frames go out zero-copy (memoryview slices of
the caller's buffer; pyzmq keeps a reference until sent) and come in without a copy (``copy=False``) until
the receiver writes them into the transfer's buffer. A peer that stops acknowledging fails the transfer at
``transfer_timeout_s`` (KVTransferError): the caller falls back (re-prefill), nothing waits forever.
"""

from __future__ import annotations

import itertools
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import anyio
import zmq
import zmq.asyncio

from transport.codec import EncodeError, WireError, clip, decode, encode
from transport.dispatch import Dispatcher, Incoming
from transport.kv_transfer import (
    DEFAULT_CHUNK_BYTES,
    DEFAULT_MAX_INFLIGHT_BYTES,
    KVAcceptSpec,
    KVReceiver,
    KVSender,
    ReceivedKV,
)
from transport.messages import MAX_PAYLOAD_BYTES, ErrorReply, KVAck, KVChunk, KVStoreCommand, KVWireLayout
from transport.sockets import Received, bind_router, connect_dealer

log = logging.getLogger(__name__)

PEER_QUEUE = 64  # transfers waiting for one peer's task


class KVTransferError(Exception):
    """A transfer that did not complete: refused by the receiver (``code`` its KVRefusal), or timed out."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code
        self.message = message


@dataclass(slots=True)
class DataPlaneConfig:
    """endpoint: where the ROUTER binds (``tcp://127.0.0.1:0``: a free port; the bound one is announced).
    chunk_bytes / max_inflight_bytes: the sender's chunking and window (transport/kv_transfer.py).
    transfer_timeout_s: a transfer whose acks stop for this long fails (the peer or the link is gone)."""

    endpoint: str = "tcp://127.0.0.1:0"
    chunk_bytes: int = DEFAULT_CHUNK_BYTES
    max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES
    transfer_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.chunk_bytes <= self.max_inflight_bytes:
            raise ValueError(f"need 1 <= chunk_bytes <= max_inflight_bytes, got {self.chunk_bytes}")
        if self.transfer_timeout_s <= 0:
            raise ValueError(f"transfer_timeout_s must be > 0, got {self.transfer_timeout_s}")


@dataclass(slots=True)
class TransferStats:
    """What the plane moved, for an exporter: bytes by (direction "out" | "in", peer), completed transfers'
    seconds (recent, drained by ``take_seconds``), failures by code."""

    bytes_total: dict[tuple[str, str], int] = field(default_factory=dict)
    num_transfers: dict[str, int] = field(default_factory=lambda: {"out": 0, "in": 0})
    failed: dict[str, int] = field(default_factory=dict)
    seconds: list[tuple[str, float]] = field(default_factory=list)

    def add(self, direction: str, peer: str, nbytes: int, seconds: float | None) -> None:
        key = (direction, peer)
        self.bytes_total[key] = self.bytes_total.get(key, 0) + nbytes
        if seconds is not None:
            self.num_transfers[direction] += 1
            self.seconds.append((direction, seconds))
            del self.seconds[:-4096]

    def take_seconds(self) -> list[tuple[str, float]]:
        out, self.seconds = self.seconds, []
        return out


@dataclass(slots=True)
class _Job:
    sender: KVSender | None  # None: a one-way ``message`` (a KVStoreCommand)
    message: KVStoreCommand | None = None
    done: anyio.Event = field(default_factory=anyio.Event)
    error: KVTransferError | None = None
    seconds: float = 0.0


class _PeerTask:
    """One peer endpoint: its DEALER and the jobs queued for it (owned by the task running ``run``)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.send_jobs, self.jobs = anyio.create_memory_object_stream[_Job](PEER_QUEUE)


class KVDataPlane:
    """Start with ``await tg.start(plane.run)`` (reports the bound endpoint); ``send`` from any task of the loop.

    node_id: this agent's id, the routing id its DEALERs present to peers.
    accept: what this node's cache holds (transfers it cannot hold are refused and counted).
    on_received: called in the router task with every complete incoming transfer (synchronous: queue it).
    on_transfer: (direction, peer, nbytes, seconds) per completed transfer (an exporter's hook), optional.
    on_command: called in the router task with (sender node id, KVStoreCommand) for each remote-tier command.
    admit: the receiver's admission hook (``KVReceiver``): refuse a transfer as FULL (a store over budget).
    """

    def __init__(
        self,
        node_id: str,
        accept: KVAcceptSpec,
        on_received: Callable[[ReceivedKV], None],
        config: DataPlaneConfig | None = None,
        *,
        context: zmq.asyncio.Context | None = None,
        on_transfer: Callable[[str, str, int, float], None] | None = None,
        on_command: Callable[[str, KVStoreCommand], None] | None = None,
        admit: Callable[[bytes, KVChunk, int], str | None] | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config or DataPlaneConfig()
        self.receiver = KVReceiver(accept, admit)
        self._on_command = on_command
        self.stats = TransferStats()
        self.endpoint = ""  # bound endpoint, once running
        self._on_received = on_received
        self._on_transfer = on_transfer
        self._ctx = context
        self._peers: dict[str, _PeerTask] = {}
        self._tg: anyio.abc.TaskGroup | None = None
        self._ids = itertools.count()
        self._router: zmq.asyncio.Socket | None = None
        self._dispatcher = Dispatcher(
            {KVChunk: self.handle_chunk, KVStoreCommand: self.handle_store_command},
            reply=self._reply,
            name=f"kv data {node_id}",
        )
        self.num_acks_dropped = 0

    @property
    def rejected(self) -> dict:
        """Malformed messages on the data socket, by ErrorCode (the receiver's refusals are ``receiver.refused``)."""
        return self._dispatcher.rejected

    def bind(self) -> str:
        """Bind the ROUTER now (before ``run``: the endpoint goes into the agent's hello); the bound endpoint."""
        if self._router is None:
            ctx = self._ctx or zmq.asyncio.Context.instance()
            max_msg = self.config.chunk_bytes + 2 * MAX_PAYLOAD_BYTES
            self._router, self.endpoint = bind_router(ctx, self.config.endpoint, handover=True, max_msg_bytes=max_msg)
        return self.endpoint

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        self.bind()
        try:
            async with anyio.create_task_group() as tg:
                self._tg = tg
                tg.start_soon(self._router_loop)
                task_status.started(self.endpoint)
        finally:
            self._router.close(linger=0)
            self._router = None
            self._tg = None

    # -- sending ------------------------------------------------------------------------------------

    async def send(
        self,
        peer_endpoint: str,
        request_id: str,
        block_ids: list[int],
        layout: KVWireLayout,
        data: memoryview,
        peer_name: str | None = None,
        purpose: str = "",
        lora_id: int = 0,
    ) -> float:
        """Move ``data`` (``layout``'s array, C-contiguous) to the peer's data endpoint; returns the seconds it
        took. Raises KVTransferError (refused, or no ack within ``transfer_timeout_s``). ``data`` must stay
        unchanged until this returns. ``peer_name``: the peer's node id for the stats (default: the endpoint).
        ``lora_id``: the LoRA adapter the KV was computed under (0: none); the receiver keys it under no other."""
        if self._tg is None:
            raise RuntimeError("the data plane is not running")
        sender = KVSender(
            f"{self.node_id}:{next(self._ids)}",
            request_id,
            block_ids,
            layout,
            data,
            chunk_bytes=self.config.chunk_bytes,
            max_inflight_bytes=self.config.max_inflight_bytes,
            purpose=purpose,
            lora_id=lora_id,
        )
        job = _Job(sender)
        await self._queue(peer_endpoint, job)
        await job.done.wait()
        if job.error is not None:
            self.stats.failed[job.error.code] = self.stats.failed.get(job.error.code, 0) + 1
            raise job.error
        self._record("out", peer_name or peer_endpoint, sender.nbytes, job.seconds)
        return job.seconds

    async def command(self, peer_endpoint: str, msg: KVStoreCommand) -> None:
        """Send a remote-tier command to a peer's data endpoint, in order with this plane's transfers to it
        (one-way: the answer, if any, comes as a transfer or a command to this plane's ROUTER)."""
        job = _Job(None, msg)
        await self._queue(peer_endpoint, job)
        await job.done.wait()

    async def _queue(self, peer_endpoint: str, job: _Job) -> None:
        if self._tg is None:
            raise RuntimeError("the data plane is not running")
        peer = self._peers.get(peer_endpoint)
        if peer is None:
            peer = self._peers[peer_endpoint] = _PeerTask(peer_endpoint)
            self._tg.start_soon(self._peer_loop, peer)
        await peer.send_jobs.send(job)

    async def _peer_loop(self, peer: _PeerTask) -> None:
        ctx = self._ctx or zmq.asyncio.Context.instance()
        sock = connect_dealer(ctx, peer.endpoint, routing_id=self.node_id.encode())
        try:
            async for job in peer.jobs:
                if job.sender is None:  # a command: queued on the pipe (dropped with it if the peer is gone)
                    with anyio.move_on_after(self.config.transfer_timeout_s):
                        await sock.send_multipart(encode(job.message))
                    job.done.set()
                    continue
                start = time.perf_counter()
                try:
                    with anyio.fail_after(self.config.transfer_timeout_s):
                        await self._run_job(sock, job.sender)
                except TimeoutError:
                    job.error = KVTransferError("timeout", f"no ack from {peer.endpoint} within the timeout")
                    # a fresh socket: the old pipe may hold this transfer's chunks and late acks
                    sock.close(linger=0)
                    sock = connect_dealer(ctx, peer.endpoint, routing_id=self.node_id.encode())
                except KVTransferError as e:
                    job.error = e
                job.seconds = time.perf_counter() - start
                job.done.set()
        finally:
            sock.close(linger=0)

    async def _run_job(self, sock: zmq.asyncio.Socket, sender: KVSender) -> None:
        while not sender.done:
            for header, frame in sender.next_chunks():
                await sock.send_multipart(encode(header, (frame,)), copy=False)
            frames = await sock.recv_multipart()
            for ack in self._acks(frames):
                if ack.transfer_id == sender.transfer_id:
                    sender.on_ack(ack)
            if sender.failed:
                code, message = sender.refusal
                raise KVTransferError(code, message)

    def _acks(self, frames: list[bytes]) -> list[KVAck]:
        try:
            msg, _ = decode(frames)
        except WireError as e:
            log.warning("kv data %s: undecodable reply from a peer: %s", self.node_id, clip(e.message))
            return []
        if isinstance(msg, ErrorReply):
            log.warning("kv data %s: peer says %s: %s", self.node_id, msg.code, clip(msg.message))
            return []
        return [msg] if isinstance(msg, KVAck) else []

    # -- receiving ----------------------------------------------------------------------------------

    async def _router_loop(self) -> None:
        sock = self._router
        while True:
            frames = await sock.recv_multipart(copy=False)
            now_ns = time.monotonic_ns()
            if len(frames) < 2:
                continue
            # payload frames as bytes, the tensor frame as a view of zmq's own buffer (no copy)
            body = [f.bytes for f in frames[1:3]] + [f.buffer for f in frames[3:]]
            self._dispatcher.dispatch(Received(frames[0].bytes, body, now_ns))

    def handle_chunk(self, incoming: Incoming) -> None:
        chunk: KVChunk = incoming.msg
        frame = incoming.tensor_frames[0] if len(incoming.tensor_frames) == 1 else b""  # else: refused (size)
        ack, done = self.receiver.on_chunk(incoming.peer, chunk, frame, time.monotonic())
        if ack is not None:
            self._send_reply(incoming.peer, ack)
            if not ack.ok:
                log.warning("kv data %s: refused transfer %s: %s", self.node_id, clip(chunk.transfer_id), ack.message)
        if done is not None:
            self._record("in", done.sender.decode(errors="replace"), done.nbytes, done.seconds)
            self._on_received(done)

    def handle_store_command(self, incoming: Incoming) -> None:
        if self._on_command is not None and incoming.peer is not None:
            self._on_command(incoming.peer.decode(errors="replace"), incoming.msg)

    def _reply(self, peer: bytes | None, reply: ErrorReply) -> None:
        self._send_reply(peer, reply)

    def _send_reply(self, peer: bytes | None, msg) -> None:
        if peer is None:
            return
        try:
            error = self._router.send_multipart([peer, *encode(msg)], zmq.NOBLOCK).exception()
        except EncodeError as e:
            error = e
        if error is not None:  # the peer is gone (EHOSTUNREACH) or its pipe is full
            self.num_acks_dropped += 1
            log.debug("kv data %s: reply to %r dropped: %s", self.node_id, peer, error)

    def _record(self, direction: str, peer: str, nbytes: int, seconds: float) -> None:
        self.stats.add(direction, peer, nbytes, seconds)
        if self._on_transfer is not None:
            try:
                self._on_transfer(direction, peer, nbytes, seconds)
            except Exception:
                log.exception("kv data %s: on_transfer failed", self.node_id)


def throughput_gbps(nbytes: int, seconds: float) -> float:
    """GB/s (1e9 bytes) of ``nbytes`` in ``seconds`` (inf for 0 s)."""
    return nbytes / seconds / 1e9 if seconds > 0 else math.inf


def dtype_name(dtype: object) -> str:
    """A torch / numpy / JAX dtype's name as the wire says it ("bfloat16", "float32")."""
    if type(dtype).__module__.startswith("torch"):
        return str(dtype).removeprefix("torch.")
    return getattr(dtype, "name", None) or getattr(dtype, "__name__", None) or str(dtype)


def accept_spec_for(engine, max_concurrent: int = 8) -> KVAcceptSpec | None:
    """What an engine's KV cache holds (its runner's model config, block size and dtype); None for a runner
    without a model config (a fake runner: such a node takes no KV)."""
    runner = engine.runner
    config = getattr(runner, "config", None)
    if config is None or not hasattr(config, "num_key_value_heads"):
        return None
    cache = engine.cache_config
    return KVAcceptSpec(
        num_layers=config.num_hidden_layers,
        block_size=cache.block_size,
        num_kv_heads=config.num_key_value_heads,
        head_dim=config.head_dim,
        dtypes=(dtype_name(getattr(runner, "dtype", "float32")),),
        max_blocks=cache.num_device_blocks,
        max_concurrent=max_concurrent,
    )
