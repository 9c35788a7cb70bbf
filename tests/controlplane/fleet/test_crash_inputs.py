"""The issue's two crash inputs, against a control plane with a real agent process: integers of 2**64 (HTTP) or
2**64-1 (the most msgpack carries) in max_tokens / top_k / stop_token_ids, and msgpack nested 2,000 deep
on the client and the agent port. Each is a 400 or a counted rejection, and a valid request succeeds after."""

from __future__ import annotations

import anyio
import httpx
import msgspec
import pytest
import zmq
import zmq.asyncio

from controlplane.frontend import FrontendError
from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.http_server import serve_gateway
from engine.sampling_params import SamplingParams
from transport.codec import decode, encode
from transport.messages import ClientGenerate, ErrorCode, ErrorReply, MsgType, TokenChunk

pytestmark = pytest.mark.anyio

BIG_FIELDS = [("max_tokens", 2**64), ("top_k", 2**64), ("stop_token_ids", [2**64])]
NESTED = b"\x91" * 2_000 + b"\xc0"


async def _fleet(cp, spawn_agent) -> None:
    spawn_agent(cp.agent_endpoint, "a")
    await cp.wait_until(lambda: "a" in cp.registry, 30)


async def test_huge_integers_over_http_are_400s_and_the_control_plane_keeps_serving(controlplane, spawn_agent):
    async with controlplane() as cp:
        await _fleet(cp, spawn_agent)
        config = GatewayConfig()
        async with anyio.create_task_group() as tg:
            server = await tg.start(serve_gateway, create_app(cp, config=config), "127.0.0.1", 0, config)
            port = server.servers[0].sockets[0].getsockname()[1]
            async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", timeout=30) as c:
                for field, value in BIG_FIELDS:
                    for path, body in (
                        ("/v1/completions", {"prompt": "hi"}),
                        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi"}]}),
                    ):
                        r = await c.post(path, json={**body, field: value})
                        assert r.status_code == 400, r.text
                        assert r.json()["error"]["param"] == field
                deep = b'{"prompt": "hi", "x": ' + b"[" * 2_000 + b"]" * 2_000 + b"}"
                r = await c.post("/v1/completions", content=deep, headers={"content-type": "application/json"})
                assert r.status_code == 400
                r = await c.post("/v1/completions", json={"prompt": "hi", "max_tokens": 3})
                assert r.status_code == 200 and r.json()["usage"]["completion_tokens"] >= 1
            tg.cancel_scope.cancel()
    assert cp._agents.num_send_errors == 0


@pytest.fixture
async def dealer():
    """``await dealer(endpoint, routing_id=None)``: a raw DEALER; all are closed at teardown."""
    ctx = zmq.asyncio.Context()
    socks = []

    async def make(endpoint: str, routing_id: bytes | None = None) -> zmq.asyncio.Socket:
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        if routing_id is not None:
            sock.setsockopt(zmq.ROUTING_ID, routing_id)
        sock.connect(endpoint)
        socks.append(sock)
        return sock

    try:
        yield make
    finally:
        for sock in socks:
            sock.close(linger=0)
        ctx.term()


async def _reply(sock, frames):
    await sock.send_multipart(frames)
    with anyio.fail_after(20):
        msg, _ = decode(await sock.recv_multipart())
    return msg


async def _served(sock, request_id: str) -> TokenChunk:
    good = ClientGenerate(request_id=request_id, prompt="ok", sampling=SamplingParams(max_tokens=1))
    with anyio.fail_after(20):
        await sock.send_multipart(encode(good))
        while True:
            msg, _ = decode(await sock.recv_multipart())
            assert not isinstance(msg, ErrorReply), msg
            if msg.finished:
                return msg


async def test_huge_integers_over_zeromq_are_counted_refusals(controlplane, spawn_agent, dealer):
    async with controlplane() as cp:
        await _fleet(cp, spawn_agent)
        sock = await dealer(cp.client_endpoint)
        for i, (field, value) in enumerate(BIG_FIELDS):
            wire_value = [2**64 - 1] if isinstance(value, list) else 2**64 - 1  # msgpack's largest
            body = {"v": 1, "request_id": f"big-{i}", "prompt": "hi", "sampling": {field: wire_value}}
            reply = await _reply(sock, [bytes((MsgType.CLIENT_GENERATE,)), msgspec.msgpack.encode(body)])
            assert isinstance(reply, ErrorReply)
            assert (reply.code, reply.param, reply.request_id) == (ErrorCode.INVALID_REQUEST, field, f"big-{i}")
        for i, ids in enumerate([[2**64 - 1], [-(2**63)], [5, -1]]):  # prompt ids: the intake's vocabulary check
            body = {"v": 1, "request_id": f"ids-{i}", "prompt_token_ids": ids}
            reply = await _reply(sock, [bytes((MsgType.CLIENT_GENERATE,)), msgspec.msgpack.encode(body)])
            assert isinstance(reply, ErrorReply)
            assert (reply.code, reply.param) == (ErrorCode.INVALID_REQUEST, "prompt_token_ids")
        assert cp.stats()["refused"] == {"invalid_request": len(BIG_FIELDS) + 3}
        assert (await _served(sock, "after")).request_id == "after"
        assert cp._agents.num_send_errors == 0


async def test_msgpack_nested_2000_deep_is_counted_on_both_ports(controlplane, spawn_agent, dealer):
    async with controlplane() as cp:
        await _fleet(cp, spawn_agent)
        client = await dealer(cp.client_endpoint)
        stranger = await dealer(cp.agent_endpoint, routing_id=b"stranger")
        for sock in (client, stranger):
            for msg_type in (MsgType.CLIENT_GENERATE, MsgType.NODE_HELLO, MsgType.TOKENS):
                reply = await _reply(sock, [bytes((msg_type,)), NESTED])
                assert isinstance(reply, ErrorReply) and reply.code is ErrorCode.MALFORMED
        rejected = cp.stats()["rejected_messages"]
        assert rejected == {"agents": {"malformed": 3}, "clients": {"malformed": 3}}
        assert (await _served(client, "after")).request_id == "after"
        assert "a" in cp.registry


@pytest.mark.parametrize("ids", [[2**64], [-(2**63) - 1], [-1]])
async def test_in_process_prompt_ids_out_of_msgpack_range_are_refused_before_encoding(controlplane, spawn_agent, ids):
    async with controlplane() as cp:
        await _fleet(cp, spawn_agent)
        stream = cp.generate("ids", model=None, prompt_token_ids=ids, sampling=SamplingParams(max_tokens=1))
        with anyio.fail_after(20), pytest.raises(FrontendError) as refused:
            async for _ in stream:
                pass
        assert (refused.value.code, refused.value.param) == (ErrorCode.INVALID_REQUEST, "prompt_token_ids")
        assert cp._agents.num_send_errors == 0


async def test_an_unencodable_request_that_got_past_validation_fails_alone(controlplane, spawn_agent):
    """Defence in depth: were validation bypassed, the agent link's writer drops the one message (counted),
    the request fails, the node is not blamed, and the next request is served."""
    async with controlplane() as cp:
        await _fleet(cp, spawn_agent)
        stream = cp.generate("bypass", model=None, prompt="hi", sampling=SamplingParams.unchecked(max_tokens=2**64))
        with anyio.fail_after(20), pytest.raises(FrontendError) as failed:
            async for _ in stream:
                pass
        assert "could not be encoded" in failed.value.message
        assert cp._agents.num_send_errors == 1
        good = cp.generate("good", model=None, prompt="hi", sampling=SamplingParams(max_tokens=2))
        with anyio.fail_after(20):
            chunks = [chunk async for chunk in good]
        assert chunks[-1].finished and chunks[-1].node_id == "a"
