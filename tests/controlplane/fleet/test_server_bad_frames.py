"""Garbage sent to the control plane's sockets is answered with an ErrorReply, counted, and survived."""

from __future__ import annotations

import msgspec
import pytest
import zmq
import zmq.asyncio

from engine.sampling_params import SamplingParams
from transport.codec import decode, encode
from transport.messages import (
    MAX_PAYLOAD_BYTES,
    ClientGenerate,
    ErrorCode,
    ErrorReply,
    HardwareInfo,
    Heartbeat,
    KVInfo,
    MsgType,
    NodeHello,
    TokenChunk,
)

pytestmark = pytest.mark.anyio

_packer = msgspec.msgpack.Encoder()
_HELLO = NodeHello(
    node_id="intruder", model="fake-bytes", backend="torch", max_model_len=64, power_score=1.0,
    hardware=HardwareInfo("x", "cpu", None, 1.0, 1.0, 1.0, "fake"), kv=KVInfo(8, 0, 16, 64),
)  # fmt: skip

BAD_FRAMES = {
    "one frame": ([b"\x0e"], ErrorCode.MALFORMED, ""),
    "long type frame": ([b"\x0e\x0e", _packer.encode({"v": 1})], ErrorCode.MALFORMED, ""),
    "not msgpack": ([bytes((MsgType.CLIENT_GENERATE,)), b"\xc1\xc1\xc1"], ErrorCode.MALFORMED, ""),
    "unknown type": (
        [b"\x63", _packer.encode({"v": 1, "request_id": "r-unknown"})],
        ErrorCode.UNKNOWN_TYPE,
        "r-unknown",
    ),
    "wrong version": (
        [bytes((MsgType.CLIENT_GENERATE,)), _packer.encode({"v": 99, "request_id": "r-v99", "prompt": "x"})],
        ErrorCode.WRONG_VERSION,
        "r-v99",
    ),
    "bad field": (
        [bytes((MsgType.CLIENT_GENERATE,)), _packer.encode({"v": 1, "request_id": "r-bad", "sampling": "hot"})],
        ErrorCode.MALFORMED,
        "r-bad",
    ),
    "oversized": (
        [bytes((MsgType.CLIENT_GENERATE,)), b"\x00" * (MAX_PAYLOAD_BYTES + 1)],
        ErrorCode.OVERSIZED,
        "",
    ),
    "agent message on the client socket": (encode(_HELLO), ErrorCode.UNKNOWN_TYPE, ""),
}


async def _roundtrip(sock: zmq.asyncio.Socket, frames) -> ErrorReply:
    import anyio

    await sock.send_multipart(frames)
    with anyio.fail_after(10):
        reply, _ = decode(await sock.recv_multipart())
    assert isinstance(reply, ErrorReply)
    return reply


@pytest.mark.parametrize("case", list(BAD_FRAMES))
async def test_bad_client_frames_get_an_error_reply_and_the_server_keeps_serving(case, controlplane, spawn_agent):
    frames, code, request_id = BAD_FRAMES[case]
    async with controlplane() as cp:
        spawn_agent(cp.agent_endpoint, "a")
        await cp.wait_until(lambda: "a" in cp.registry, 30)
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(cp.client_endpoint)
        try:
            reply = await _roundtrip(sock, frames)
            assert (reply.code, reply.request_id) == (code, request_id)
            assert cp.client_dispatcher.rejected[code] == 1
            # the same socket, right after: a good request is served
            good = ClientGenerate(request_id="good", prompt="ok", sampling=SamplingParams(max_tokens=1))
            await sock.send_multipart(encode(good))
            import anyio

            with anyio.fail_after(10):
                chunk, _ = decode(await sock.recv_multipart())
            assert isinstance(chunk, TokenChunk) and chunk.finished and chunk.request_id == "good"
        finally:
            sock.close(linger=0)
            ctx.term()


async def test_bad_agent_frames_are_rejected_and_an_unknown_node_is_told_to_join(controlplane, spawn_agent, client):
    async with controlplane() as cp:
        spawn_agent(cp.agent_endpoint, "a")
        await cp.wait_until(lambda: "a" in cp.registry, 30)
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.ROUTING_ID, b"stranger")
        sock.connect(cp.agent_endpoint)
        try:
            for frames, code, _ in (BAD_FRAMES["one frame"], BAD_FRAMES["wrong version"], BAD_FRAMES["unknown type"]):
                assert (await _roundtrip(sock, frames)).code is code
            reply = await _roundtrip(sock, encode(Heartbeat(node_id="stranger")))
            assert reply.code is ErrorCode.INVALID_REQUEST and "NodeHello" in reply.message
            # a node id that is not its routing id cannot join
            reply = await _roundtrip(sock, encode(_HELLO))
            assert reply.code is ErrorCode.INVALID_REQUEST and "intruder" not in cp.registry
            rejected = cp.agent_dispatcher.rejected
            assert rejected[ErrorCode.MALFORMED] == rejected[ErrorCode.WRONG_VERSION] == 1
            assert rejected[ErrorCode.UNKNOWN_TYPE] == 1
            assert cp.stats()["rejected_messages"]["agents"] == {"malformed": 1, "unknown_type": 1, "wrong_version": 1}
        finally:
            sock.close(linger=0)
            ctx.term()
        async with client(cp) as c:
            assert (await c.generate("still here", max_tokens=1)).node_id == "a"


async def test_refusals_carry_their_codes(controlplane, spawn_agent, client):
    from client import (
        ZooInvalidRequestError,
        ZooOverloadedError,
        ZooPromptTooLongError,
        ZooUnknownModelError,
    )
    from controlplane.admission import AdmissionConfig

    async with controlplane(admission=AdmissionConfig(max_queue_per_node=0, retry_after_s=2.5)) as cp:
        spawn_agent(cp.agent_endpoint, "a")
        await cp.wait_until(lambda: "a" in cp.registry, 30)
        async with client(cp) as c:
            with pytest.raises(ZooOverloadedError) as overloaded:
                await c.generate("x", max_tokens=1)
            assert overloaded.value.retry_after_s == 2.5
            with pytest.raises(ZooInvalidRequestError, match="temperature"):
                await c.generate("x", temperature=-1.0)
            with pytest.raises(ZooUnknownModelError):
                await c.generate("x", model="gpt-17")
            with pytest.raises(ZooPromptTooLongError):
                await c.generate("x" * 5000)
            with pytest.raises(ZooInvalidRequestError, match="exactly one"):
                await c.generate("x", prompt_token_ids=[5])
        assert cp.stats()["refused"] == {
            "overloaded": 1,
            "invalid_request": 2,
            "unknown_model": 1,
            "prompt_too_long": 1,
        }
