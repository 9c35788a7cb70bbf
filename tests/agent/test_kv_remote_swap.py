"""The remote KV tier's agent side without an engine: two data planes on loopback in this process, an owner's
RemoteSwapper and a holder's (agent/kv_remote_swap.py) with its RemoteKVStore (agent/kv_remote_store.py).
KV stored and fetched back is bit-identical; a holder over its budget refuses (counted) and the owner's request
is told to recompute; so is a fetch of KV the holder lost, and a holder that left the peer list; KV held for an
owner gone for owner_timeout_s is freed."""

from __future__ import annotations

import anyio
import numpy as np
import pytest
import zmq.asyncio

from agent.kv_data_plane import DataPlaneConfig, KVDataPlane
from agent.kv_migration import ExportedRequest
from agent.kv_remote_io import RemoteDropAsk, RemoteFetchAsk, RemoteOut, RemoteReport
from agent.kv_remote_store import RemoteKVStore
from agent.kv_remote_swap import RemoteSwapper
from engine.llm_engine import MigratedRequest
from transport.kv_transfer import KVAcceptSpec, KVRefusal, ReceivedKV
from transport.messages import KVWireLayout

pytestmark = pytest.mark.anyio

SPEC = KVAcceptSpec(num_layers=2, block_size=4, num_kv_heads=2, head_dim=8, dtypes=("float32",))
LAYOUT = KVWireLayout(num_layers=2, num_blocks=3, block_size=4, num_kv_heads=2, head_dim=8, dtype="float32")
NBYTES = 2 * 2 * 3 * 4 * 2 * 8 * 4  # 3,072


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _out(req_id: str, seed: int = 0) -> RemoteOut:
    kv = np.random.default_rng(seed).standard_normal((2, 2, 3, 4, 2, 8)).astype(np.float32)
    return RemoteOut(req_id, LAYOUT, ExportedRequest(MigratedRequest(req_id, [], 0, [5, 6, 7]), LAYOUT, kv))


class _Pair:
    """An owner and a holder, each with a data plane and a swapper; the owner's reports in ``reports``."""

    def __init__(self, ctx, holder_budget: int = 1 << 20, fetch_timeout_s: float = 2.0) -> None:
        self.reports: list[RemoteReport] = []
        self._arrived = anyio.Event()
        self.swappers: dict[str, RemoteSwapper] = {}
        self.planes: dict[str, KVDataPlane] = {}
        swappers = self.swappers
        for node_id, budget in (("owner", 1 << 20), ("holder", holder_budget)):
            self.planes[node_id] = plane = KVDataPlane(
                node_id,
                SPEC,
                lambda kv, n=node_id: swappers[n].on_received(kv),
                DataPlaneConfig(transfer_timeout_s=1.0),
                context=ctx,
                on_command=lambda sender, cmd, n=node_id: swappers[n].handle_command(sender, cmd),
                admit=lambda sender, chunk, nbytes, n=node_id: swappers[n].admit(sender, chunk, nbytes),
            )
            sink = self._report if node_id == "owner" else (lambda r: None)
            swappers[node_id] = RemoteSwapper(node_id, plane, sink, RemoteKVStore(budget, 0.2), fetch_timeout_s)
        self.owner, self.holder = self.swappers["owner"], self.swappers["holder"]

    def _report(self, report: RemoteReport) -> None:
        self.reports.append(report)
        self._arrived.set()

    async def next_report(self) -> RemoteReport:
        with anyio.fail_after(10):
            while not self.reports:
                await self._arrived.wait()
                self._arrived = anyio.Event()
        return self.reports.pop(0)

    async def start(self, tg) -> None:
        for node_id in ("owner", "holder"):
            await tg.start(self.planes[node_id].run)
            tg.start_soon(self.swappers[node_id].run)
        self.owner.update_peers({"holder": self.planes["holder"].endpoint, "owner": "self"}, {})
        self.holder.update_peers({"owner": self.planes["owner"].endpoint}, {})


async def test_kv_stored_at_a_peer_comes_back_bit_identical():
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            pair = _Pair(ctx)
            await pair.start(tg)
            out = _out("r1")
            pair.owner.submit(out)
            stored = await pair.next_report()
            assert (stored.kind, stored.req_id, stored.peer_id, stored.handle) == ("stored", "r1", "holder", "r1")
            assert pair.holder.store.holds("owner", "r1") and pair.holder.store.free_bytes == (1 << 20) - NBYTES
            pair.owner.submit(RemoteFetchAsk("r1", "holder", "r1"))
            fetched = await pair.next_report()
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert fetched.kind == "fetched" and isinstance(fetched.kv, ReceivedKV)
    assert fetched.kv.to_bytes() == bytes(out.kv.kv_bytes()) and fetched.kv.block_ids == [5, 6, 7]
    assert pair.holder.store.num_held == 0 and pair.owner.counts == {"out_ok": 1, "in_ok": 1}


async def test_a_full_holder_refuses_and_the_request_recomputes():
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            pair = _Pair(ctx, holder_budget=NBYTES + 100)  # room for one
            await pair.start(tg)
            pair.owner.submit(_out("r1"))
            assert (await pair.next_report()).kind == "stored"
            assert pair.owner.pick_peer(NBYTES) is None  # the owner counts what it sent there
            pair.owner.update_peers({"holder": pair.planes["holder"].endpoint}, {"holder": 1 << 30})  # a stale report
            pair.owner.submit(_out("r2"))
            refused = await pair.next_report()
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert refused.kind == "failed" and refused.req_id == "r2" and "full" in refused.message
    assert pair.holder.store.stats.refused_full == 1
    assert pair.holder.plane.receiver.refused[KVRefusal.FULL] == 1
    assert pair.owner.counts == {"out_ok": 1, "out_failed": 1}


async def test_lost_kv_a_gone_holder_and_no_peer_all_fall_back_to_recompute():
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            pair = _Pair(ctx)
            await pair.start(tg)
            pair.owner.submit(RemoteFetchAsk("never", "holder", "never"))  # the holder has nothing under it
            missing = await pair.next_report()
            pair.owner.submit(_out("r1"))
            assert (await pair.next_report()).kind == "stored"
            pair.owner.update_peers({}, {})  # the control plane no longer lists the holder
            gone = await pair.next_report()
            pair.owner.submit(_out("r2"))  # and now there is no peer at all
            no_peer = await pair.next_report()
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert (missing.kind, missing.req_id) == ("failed", "never") and "has no KV" in missing.message
    assert (gone.kind, gone.req_id) == ("failed", "r1") and "gone" in gone.message
    assert (no_peer.kind, no_peer.req_id) == ("failed", "r2") and "no peer" in no_peer.message


async def test_a_drop_frees_the_holders_copy():
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            pair = _Pair(ctx)
            await pair.start(tg)
            pair.owner.submit(_out("r1"))
            assert (await pair.next_report()).kind == "stored"
            pair.owner.submit(RemoteDropAsk("r1", "holder", "r1"))
            with anyio.fail_after(5):
                while pair.holder.store.num_held:
                    await anyio.sleep(0.01)
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert pair.holder.store.stats.num_dropped == 1 and pair.holder.store.free_bytes == 1 << 20


def test_the_store_frees_kv_of_an_owner_gone_for_the_timeout():
    store = RemoteKVStore(10_000, owner_timeout_s=5.0)
    kv = ReceivedKV("t", "r1", b"a", [0], LAYOUT, [b"x" * 3_072], 0.0, "store")
    assert store.admit("a", "r1", 3_072, now_s=0.0) is None
    assert store.put("a", kv, now_s=1.0) and store.free_bytes == 10_000 - 3_072
    assert store.admit("b", "r9", 8_000, now_s=1.0) is not None and store.stats.refused_full == 1
    store.saw(["a"], now_s=4.0)
    assert store.expire(now_s=8.0) == []  # seen at 4 s: kept until 9 s
    assert store.expire(now_s=9.5) == [("a", "r1")] and store.free_bytes == 10_000
    assert store.take("a", "r1") is None and store.stats.num_missing == 1
