"""A Link's loops survive one bad message: an unencodable one is counted, reported and logged (clipped), and
the next message is sent; an exception of the owner's ``on_receive`` does not end the reader."""

from __future__ import annotations

import itertools
import logging

import anyio
import pytest
import zmq
import zmq.asyncio

from engine.sampling_params import SamplingParams
from transport.codec import decode
from transport.link import WHY_UNENCODABLE, Link
from transport.messages import ClientGenerate, GenerateRequest, Ping
from transport.sockets import Channel

pytestmark = pytest.mark.anyio

_endpoints = itertools.count()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def socket_pair():
    """Two connected DEALERs on inproc (each wrapped by a Channel); closed at teardown."""
    ctx = zmq.asyncio.Context()
    endpoint = f"inproc://link-edges-{next(_endpoints)}"
    a, b = ctx.socket(zmq.DEALER), ctx.socket(zmq.DEALER)
    a.setsockopt(zmq.LINGER, 0)
    b.setsockopt(zmq.LINGER, 0)
    a.bind(endpoint)
    b.connect(endpoint)
    try:
        yield Channel(a), Channel(b)
    finally:
        a.close(linger=0)
        b.close(linger=0)
        ctx.term()


UNENCODABLE = {
    "max_tokens 2**64": GenerateRequest(
        request_id="bad",
        prompt_token_ids=[1],
        sampling=SamplingParams.unchecked(max_tokens=2**64, stop=("x" * 5000,)),
        arrival_ns=0,
        routed_ns=0,
    ),
    "prompt id 2**64": ClientGenerate(request_id="bad", prompt_token_ids=[2**64]),
    "prompt id below -2**63": ClientGenerate(request_id="bad", prompt_token_ids=[-(2**63) - 1]),
}


@pytest.mark.parametrize("case", list(UNENCODABLE))
async def test_an_unencodable_message_is_reported_and_the_writer_goes_on(socket_pair, case, caplog):
    ours, peer = socket_pair
    undeliverable = []
    link = Link(ours, lambda batch: None, lambda item, why: undeliverable.append((item.msg, why)), name="test link")
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.write_loop)
        link.send_nowait(UNENCODABLE[case])
        link.send_nowait(Ping(request_id="after"))
        with anyio.fail_after(10):
            batch = await peer.recv_batch()
        assert [decode(r.frames)[0].request_id for r in batch] == ["after"]
        tg.cancel_scope.cancel()
    assert link.num_send_errors == 1 and link.num_undeliverable == 1
    [(msg, why)] = undeliverable
    assert msg is UNENCODABLE[case] and why.startswith(WHY_UNENCODABLE)
    assert "could not encode" in caplog.text and len(caplog.text) < 2_000


async def test_an_on_receive_exception_does_not_end_the_reader(socket_pair, caplog):
    caplog.set_level(logging.ERROR)
    ours, peer = socket_pair
    batches: list[list[str]] = []
    got = [anyio.Event(), anyio.Event()]

    def on_receive(batch) -> None:
        batches.append([decode(r.frames)[0].request_id for r in batch])
        got[len(batches) - 1].set()
        if len(batches) == 1:
            raise RuntimeError("owner bug " + "y" * 100_000)

    link = Link(ours, on_receive, name="test link")
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.read_loop)
        with anyio.fail_after(10):
            peer.send(Ping(request_id="first"))
            await got[0].wait()
            peer.send(Ping(request_id="second"))
            await got[1].wait()
        tg.cancel_scope.cancel()
    assert batches == [["first"], ["second"]]
    assert link.num_receive_errors == 1
    assert "on_receive failed" in caplog.text and len(caplog.text) < 5_000
