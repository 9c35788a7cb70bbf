"""Two KV data planes over real TCP sockets on loopback: bytes arrive bit-identical, transfers a node cannot
hold are refused with a counted error, garbage on the data socket is answered and counted, and a peer that is
gone fails the transfer instead of hanging it."""

from __future__ import annotations

import os

import anyio
import pytest
import zmq
import zmq.asyncio

from agent.kv_data_plane import DataPlaneConfig, KVDataPlane, KVTransferError
from transport.codec import decode
from transport.kv_transfer import KVAcceptSpec, KVRefusal, layout_nbytes
from transport.messages import ErrorCode, ErrorReply, KVWireLayout

pytestmark = pytest.mark.anyio

SPEC = KVAcceptSpec(num_layers=4, block_size=16, num_kv_heads=2, head_dim=64)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def layout(num_blocks: int, **changes) -> KVWireLayout:
    base = dict(num_layers=4, num_blocks=num_blocks, block_size=16, num_kv_heads=2, head_dim=64, dtype="bfloat16")
    return KVWireLayout(**{**base, **changes})


async def _planes(tg, ctx, received: list, **config):
    cfg = DataPlaneConfig(chunk_bytes=64 * 1024, max_inflight_bytes=256 * 1024, **config)
    a = KVDataPlane("node-a", SPEC, lambda kv: None, cfg, context=ctx)
    b = KVDataPlane("node-b", SPEC, received.append, cfg, context=ctx)
    await tg.start(a.run)
    await tg.start(b.run)
    return a, b


async def test_kv_sent_a_to_b_arrives_bit_identical():
    received: list = []
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            a, b = await _planes(tg, ctx, received)
            lay = layout(num_blocks=24)  # 4*2*24*16*2*64*2 = 786432 bytes: 12 chunks
            data = os.urandom(layout_nbytes(lay))
            seconds = await a.send(b.endpoint, "req-7", list(range(100, 124)), lay, memoryview(data))
            small = layout(num_blocks=1)
            data2 = os.urandom(layout_nbytes(small))
            await a.send(b.endpoint, "req-8", [5], small, memoryview(data2))
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert seconds > 0
    assert [kv.request_id for kv in received] == ["req-7", "req-8"]
    assert received[0].to_bytes() == data and received[1].to_bytes() == data2
    assert received[0].block_ids == list(range(100, 124)) and received[0].sender == b"node-a"
    assert received[0].layout == lay
    assert a.stats.bytes_total == {("out", b.endpoint): len(data) + len(data2)}
    assert b.stats.bytes_total == {("in", "node-a"): len(data) + len(data2)}
    assert sum(b.receiver.refused.values()) == 0


async def test_a_layout_the_receiver_cannot_hold_is_refused_with_a_counted_error():
    received: list = []
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            a, b = await _planes(tg, ctx, received)
            for changes, code in (({"num_kv_heads": 3}, KVRefusal.LAYOUT), ({"dtype": "uint8"}, KVRefusal.DTYPE)):
                lay = layout(num_blocks=2, **changes)
                with pytest.raises(KVTransferError) as e:
                    await a.send(b.endpoint, "req-x", [1, 2], lay, memoryview(bytes(layout_nbytes(lay))))
                assert e.value.code == code.value
            ok = layout(num_blocks=1)
            await a.send(b.endpoint, "req-y", [3], ok, memoryview(bytes(layout_nbytes(ok))))  # the plane goes on
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert b.receiver.refused[KVRefusal.LAYOUT] == 1 and b.receiver.refused[KVRefusal.DTYPE] == 1
    assert a.stats.failed == {"layout": 1, "dtype": 1}
    assert [kv.request_id for kv in received] == ["req-y"]


async def test_garbage_on_the_data_socket_is_answered_and_counted():
    received: list = []
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            _, b = await _planes(tg, ctx, received)
            raw = ctx.socket(zmq.DEALER)
            raw.setsockopt(zmq.LINGER, 0)
            raw.connect(b.endpoint)
            await raw.send_multipart([b"\x1f", b"\x93not msgpack of a chunk"])
            with anyio.fail_after(10):
                reply, _ = decode(await raw.recv_multipart())
            raw.close()
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert isinstance(reply, ErrorReply) and reply.code is ErrorCode.MALFORMED
    assert b.rejected[ErrorCode.MALFORMED] == 1 and received == []


async def test_a_peer_that_is_gone_fails_the_transfer():
    ctx = zmq.asyncio.Context()
    try:
        async with anyio.create_task_group() as tg:
            cfg = DataPlaneConfig(chunk_bytes=4096, max_inflight_bytes=8192, transfer_timeout_s=0.3)
            a = KVDataPlane("node-a", SPEC, lambda kv: None, cfg, context=ctx)
            await tg.start(a.run)
            # a bound ROUTER that never answers: the chunks go out, no ack comes back
            silent = ctx.socket(zmq.ROUTER)
            silent.setsockopt(zmq.LINGER, 0)
            silent.bind("tcp://127.0.0.1:0")
            lay = layout(num_blocks=2)
            with pytest.raises(KVTransferError) as e:
                await a.send(silent.getsockopt_string(zmq.LAST_ENDPOINT), "r", [1, 2], lay, memoryview(bytes(65536)))
            silent.close()
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert e.value.code == "timeout" and a.stats.failed == {"timeout": 1}
