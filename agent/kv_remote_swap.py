"""RemoteSwapper: the agent's event-loop half of the remote KV tier, both roles at once.

As an owner (its engine preempted a request and host RAM had no room; agent/kv_remote_io.py read the KV)::

    RemoteOut ──► pick the peer whose store has the most free bytes (the control plane's heartbeat echo says)
              ──► data plane "store" transfer ── acked ──► RemoteReport stored(peer, handle = request id)
                                                └─ refused FULL / timeout / no peer ──► RemoteReport failed
    RemoteFetchAsk ──► "fetch" command ──► the holder's "return" transfer ──► RemoteReport fetched(kv)
                                       └─ "missing", no return within the timeout, holder gone ──► failed
    the holder leaves the control plane's peer list ──► every request it held: failed (recompute now)

As a holder (a peer's KV in this node's host RAM, agent/kv_remote_store.py)::

    "store" transfer: admitted at its first chunk while the budget has room (else refused FULL), held on arrival
    "fetch": sent back as a "return" transfer (or "missing"); "drop": forgotten
    every second: KV of owners the control plane has not listed for owner_timeout_s is freed

Reports reach the engine thread through ``report`` (its inbox). Transfers run as tasks of ``run``'s group.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from agent.kv_data_plane import KVDataPlane, KVTransferError
from agent.kv_remote_io import RemoteDropAsk, RemoteFetchAsk, RemoteOut, RemoteReport
from agent.kv_remote_store import RemoteKVStore
from transport.codec import clip
from transport.kv_transfer import ReceivedKV
from transport.messages import KVChunk, KVStoreCommand

log = logging.getLogger(__name__)

ASK_QUEUE = 1024
EXPIRE_INTERVAL_S = 1.0


class RemoteSwapper:
    """node_id: this agent; plane: its data plane (built with ``on_command=handle_command, admit=admit``);
    report: hands a RemoteReport to the engine thread; store: the KV held for peers; fetch_timeout_s: a fetch
    whose KV has not come back by then fails (the request recomputes)."""

    def __init__(
        self,
        node_id: str,
        plane: KVDataPlane,
        report: Callable[[RemoteReport], None],
        store: RemoteKVStore,
        fetch_timeout_s: float = 10.0,
    ) -> None:
        self.node_id = node_id
        self.plane = plane
        self.report = report
        self.store = store
        self.fetch_timeout_s = fetch_timeout_s
        self.peers: dict[str, str] = {}  # peer node id → data endpoint
        self.peer_free_bytes: dict[str, int] = {}  # peer node id → its store's free bytes (last heard)
        self.held_at: dict[str, str] = {}  # request id → the peer holding its KV (this node as owner)
        self._fetches: dict[str, tuple[str, anyio.Event, list[ReceivedKV | str]]] = {}  # req → (peer, done, result)
        self._send_asks, self._asks = anyio.create_memory_object_stream(ASK_QUEUE)
        self.counts: dict[str, int] = {}  # "out_ok" | "out_failed" | "in_ok" | "in_failed" | "peer_lost" → count

    # -- control plane news ---------------------------------------------------------------------------

    def update_peers(self, peers: dict[str, str], free_bytes: dict[str, int]) -> None:
        """The live peers (the control plane's echo). A holder no longer among them is gone: its requests recompute."""
        self.peers = {p: e for p, e in peers.items() if p != self.node_id}
        self.peer_free_bytes = {p: b for p, b in free_bytes.items() if p in self.peers}
        self.store.saw(self.peers, time.monotonic())
        for req_id, peer in list(self.held_at.items()):
            if peer not in self.peers:
                del self.held_at[req_id]
                self._count("peer_lost")
                fetch = self._fetches.get(req_id)
                if fetch is not None:
                    fetch[2].append(f"holder {peer} is gone")
                    fetch[1].set()
                else:
                    self.report(RemoteReport("failed", req_id, message=f"holder {peer} is gone"))

    def pick_peer(self, nbytes: int) -> str | None:
        """The peer whose store has the most free bytes, if that covers ``nbytes``; else, when no peer reported
        yet, any known one (its store may refuse: counted, the request recomputes)."""
        fitting = {p: b for p, b in self.peer_free_bytes.items() if b >= nbytes}
        if fitting:
            return max(fitting, key=lambda p: (fitting[p], p))
        unreported = sorted(p for p in self.peers if p not in self.peer_free_bytes)
        return unreported[0] if unreported else None

    # -- the loop ---------------------------------------------------------------------------------------

    def submit(self, ask: RemoteOut | RemoteFetchAsk | RemoteDropAsk) -> None:
        """Queue an ask from the engine thread (any task of the loop; never blocks: a full queue fails it)."""
        try:
            self._send_asks.send_nowait(ask)
        except anyio.WouldBlock:
            if not isinstance(ask, RemoteDropAsk):
                self.report(RemoteReport("failed", ask.req_id, message="remote tier queue full"))

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._expire_loop)
            async for ask in self._asks:
                if isinstance(ask, RemoteOut):
                    tg.start_soon(self._store_out, ask)
                elif isinstance(ask, RemoteFetchAsk):
                    tg.start_soon(self._fetch, ask)
                elif isinstance(ask, RemoteDropAsk):
                    tg.start_soon(self._drop, ask)
                else:
                    tg.start_soon(ask.fn, *ask.args)

    async def _expire_loop(self) -> None:
        while True:
            await anyio.sleep(EXPIRE_INTERVAL_S)
            for owner, req_id in self.store.expire(time.monotonic()):
                log.info("agent %s: freed the KV held for %s of %s (owner gone)", self.node_id, req_id, owner)

    async def _store_out(self, ask: RemoteOut) -> None:
        nbytes = ask.kv.kv_nbytes
        peer = self.pick_peer(nbytes)
        if peer is None:
            self._count("out_failed")
            self.report(RemoteReport("failed", ask.req_id, message="no peer with room for the KV"))
            return
        try:
            await self.plane.send(
                self.peers[peer],
                ask.req_id,
                ask.kv.state.block_ids,
                ask.layout,
                ask.kv.kv_bytes(),
                peer_name=peer,
                purpose="store",
            )
        except KVTransferError as e:
            self._count("out_failed")
            if e.code == "full":
                self.peer_free_bytes[peer] = 0  # until its next report
            self.report(RemoteReport("failed", ask.req_id, message=clip(str(e))))
            return
        self._count("out_ok")
        self.peer_free_bytes[peer] = max(0, self.peer_free_bytes.get(peer, nbytes) - nbytes)
        self.held_at[ask.req_id] = peer
        self.report(RemoteReport("stored", ask.req_id, peer_id=peer, handle=ask.req_id))

    async def _fetch(self, ask: RemoteFetchAsk) -> None:
        endpoint = self.peers.get(ask.peer_id)
        result: list[ReceivedKV | str] = []
        done = anyio.Event()
        if endpoint is None:
            result.append(f"holder {ask.peer_id} is gone")
        else:
            self._fetches[ask.req_id] = (ask.peer_id, done, result)
            fetch = KVStoreCommand(request_id=ask.handle, op="fetch", reply_endpoint=self.plane.endpoint)
            try:
                with anyio.move_on_after(self.fetch_timeout_s):
                    await self.plane.command(endpoint, fetch)
                    await done.wait()
            finally:
                self._fetches.pop(ask.req_id, None)
        self.held_at.pop(ask.req_id, None)
        kv = next((r for r in result if isinstance(r, ReceivedKV)), None)
        if kv is not None:
            self._count("in_ok")
            self.report(RemoteReport("fetched", ask.req_id, peer_id=ask.peer_id, kv=kv))
            return
        self._count("in_failed")
        message = str(result[0]) if result else f"no KV back from {ask.peer_id} within {self.fetch_timeout_s} s"
        self.report(RemoteReport("failed", ask.req_id, message=message))

    async def _drop(self, ask: RemoteDropAsk) -> None:
        self.held_at.pop(ask.req_id, None)
        endpoint = self.peers.get(ask.peer_id)
        if endpoint is not None:
            await self.plane.command(endpoint, KVStoreCommand(request_id=ask.handle, op="drop"))

    # -- the data plane's callbacks (its router task) --------------------------------------------------

    def admit(self, sender: bytes, chunk: KVChunk, nbytes: int) -> str | None:
        if chunk.purpose != "store":
            return None
        return self.store.admit(sender.decode(errors="replace"), chunk.request_id, nbytes, time.monotonic())

    def on_received(self, kv: ReceivedKV) -> None:
        """A complete "store" or "return" transfer."""
        sender = kv.sender.decode(errors="replace")
        if kv.purpose == "store":
            if not self.store.put(sender, kv, time.monotonic()):
                log.warning("agent %s: no room left for %s's KV of %s", self.node_id, sender, kv.request_id)
            return
        fetch = self._fetches.get(kv.request_id)
        if kv.purpose == "return" and fetch is not None and fetch[0] == sender:
            fetch[2].append(kv)
            fetch[1].set()

    def handle_command(self, sender: str, cmd: KVStoreCommand) -> None:
        if cmd.op == "fetch":
            kv = self.store.take(sender, cmd.request_id)
            if kv is None:
                self.submit_soon(self._send_command, cmd.reply_endpoint, KVStoreCommand(request_id=cmd.request_id,
                                                                                        op="missing"))  # fmt: skip
            else:
                self.submit_soon(self._return, cmd.reply_endpoint, sender, kv)
        elif cmd.op == "drop":
            self.store.drop(sender, cmd.request_id)
        elif cmd.op == "missing":
            fetch = self._fetches.get(cmd.request_id)
            if fetch is not None and fetch[0] == sender:
                fetch[2].append(f"holder {sender} has no KV for it")
                fetch[1].set()

    def submit_soon(self, fn, *args) -> None:
        try:
            self._send_asks.send_nowait(_Call(fn, args))
        except anyio.WouldBlock:  # the owner's fetch times out and its request recomputes
            log.warning("agent %s: remote tier queue full; a holder's reply is dropped", self.node_id)

    async def _send_command(self, endpoint: str, cmd: KVStoreCommand) -> None:
        if endpoint:
            await self.plane.command(endpoint, cmd)

    async def _return(self, endpoint: str, owner: str, kv: ReceivedKV) -> None:
        try:
            await self.plane.send(
                endpoint, kv.request_id, kv.block_ids, kv.layout, memoryview(kv.to_bytes()), owner, purpose="return"
            )
        except KVTransferError as e:
            log.warning("agent %s: returning %s's KV of %s failed: %s", self.node_id, owner, kv.request_id, e)

    def _count(self, key: str) -> None:
        self.counts[key] = self.counts.get(key, 0) + 1


class _Call:
    """A holder's reply, run as a task of ``run``'s group."""

    __slots__ = ("args", "fn")

    def __init__(self, fn, args) -> None:
        self.fn, self.args = fn, args
