"""The client's watchdog against a scripted control plane (a bare ROUTER socket in the test): a control plane
that no longer knows a request (it restarted), and one that stopped answering. No client waits for its
timeout: a request that had produced no token is sent again, one that had raises ZooConnectionLostError."""

from __future__ import annotations

import anyio
import pytest

from client import AsyncZooClient, ZooConnectionLostError
from transport.messages import ClientGenerate, Ping, Pong, TokenChunk

pytestmark = pytest.mark.anyio

WAIT_S = 10.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _chunk(request_id: str, n: int, finished: bool = False) -> TokenChunk:
    return TokenChunk(request_id=request_id, token_ids=[100 + n], text="z", num_output_tokens=n, finished=finished)


async def _recv_until(cp, predicate, seen: list | None = None):
    """The next message that ``predicate`` accepts (the others go to ``seen``)."""
    while True:
        msg = await cp.recv()
        if predicate(msg):
            return msg
        if seen is not None:
            seen.append(msg)


@pytest.fixture
def scripted(router_peer):
    return router_peer


def _is(cls, request_id: str | None = None):
    return lambda msg: isinstance(msg, cls) and (request_id is None or msg.request_id == request_id)


async def test_a_restarted_control_plane_resubmits_requests_without_tokens_and_fails_the_others(scripted):
    async with AsyncZooClient(scripted.endpoint, timeout_s=60.0, ping_interval_s=0.05) as c:
        opened: dict = {}

        async def open_stream() -> None:
            opened["stream"] = await c.generate("one", request_id="with-tokens", max_tokens=5, stream=True)

        async def no_token_yet() -> None:
            opened["done"] = await c.generate("two", request_id="no-token", max_tokens=2)

        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as tg:
                tg.start_soon(open_stream)
                await _recv_until(scripted, _is(ClientGenerate, "with-tokens"))
                await scripted.send(_chunk("with-tokens", 1))
            async with anyio.create_task_group() as tg:
                tg.start_soon(no_token_yet)
                await _recv_until(scripted, _is(ClientGenerate, "no-token"))
                pings = []  # two pings that list both requests; the control plane "restarts" before answering
                while len(pings) < 2:
                    ping = await _recv_until(scripted, _is(Ping))
                    if set(ping.request_ids) == {"with-tokens", "no-token"}:
                        pings.append(ping)
                unknown = ["no-token", "with-tokens"]
                await scripted.send(Pong(request_id=pings[0].request_id, unknown_request_ids=unknown))
                again = await _recv_until(scripted, _is(ClientGenerate))
                assert again.request_id == "no-token" and again.prompt == "two"  # sent again, as it was
                # the older second ping's answer says the same: it must not be sent a third time
                await scripted.send(Pong(request_id=pings[1].request_id, unknown_request_ids=unknown))
                await scripted.send(_chunk("no-token", 1))
                await scripted.send(_chunk("no-token", 2, finished=True))
            assert opened["done"].text == "zz"
            chunks = []
            with pytest.raises(ZooConnectionLostError, match=r"no longer knows the request .* after 1 tokens"):
                async for chunk in opened["stream"]:
                    chunks.append(chunk)
            assert [ch.num_output_tokens for ch in chunks] == [1]

            # a user ping goes out after anything the watchdog sent: by its answer, every resend has arrived
            seen: list = []

            async def answer_ping() -> None:
                ping = await _recv_until(scripted, lambda m: isinstance(m, Ping) and not m.request_ids, seen)
                await scripted.send(Pong(request_id=ping.request_id))

            async with anyio.create_task_group() as tg:
                tg.start_soon(answer_ping)
                await c.ping()
        assert not [m for m in seen if isinstance(m, ClientGenerate)]


async def test_a_silent_control_plane_fails_the_streams_after_the_connection_timeout(scripted):
    async with AsyncZooClient(scripted.endpoint, timeout_s=60.0, ping_interval_s=0.05, connection_timeout_s=0.5) as c:
        with anyio.fail_after(WAIT_S):
            async with anyio.create_task_group() as tg:

                async def serve_first_token() -> None:
                    await _recv_until(scripted, _is(ClientGenerate, "r"))
                    await scripted.send(_chunk("r", 1))

                tg.start_soon(serve_first_token)
                stream = await c.generate("x", request_id="r", max_tokens=5, stream=True)
            async with anyio.create_task_group() as tg:  # the control plane reads the pings, answers nothing
                tg.start_soon(_drain_forever, scripted)
                with pytest.raises(ZooConnectionLostError, match=r"has not answered for .* after 1 tokens"):
                    async for _ in stream:
                        pass
                tg.cancel_scope.cancel()


async def _drain_forever(scripted) -> None:
    while True:
        await scripted.recv()
