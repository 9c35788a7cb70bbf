"""The KV events publisher's replay socket (agent/kv_events.py, vLLM's ``replay_endpoint``): a ROUTER a subscriber
that missed batches asks, over a real ZeroMQ socket, in both of vLLM's protocols: the streamed one (an 8-byte start
sequence; each buffered batch from it, then the end marker), with or without the REQ delimiter, and the
reconciling one (a msgpack ZmqEventReplayRequest; one ZmqEventReplayResponse: the batches, or a snapshot when they
are gone or the publisher is another). Bad requests are ignored and counted, and the publisher goes on."""

from __future__ import annotations

import time

import msgspec
import pytest
import zmq

from agent.kv_events import KVEventPublisher, KVEventsConfig
from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored

END_SEQ = (-1).to_bytes(8, "big", signed=True)


class _ReplayRequest(msgspec.Struct, omit_defaults=True):  # vLLM's ZmqEventReplayRequest, as its consumers send it
    publisher_epoch: str | None = None
    start_seq: int = 0
    force_snapshot: bool = False


class _ReplayResponse(msgspec.Struct, omit_defaults=True):  # vLLM's ZmqEventReplayResponse
    publisher_epoch: str
    next_seq: int
    replayed_batches: list[tuple[int, bytes]]
    snapshot: bytes | None = None


@pytest.fixture
def publisher():
    config = KVEventsConfig(True, endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://127.0.0.1:*", buffer_steps=4)
    publisher = KVEventPublisher(config, 16)
    yield publisher
    publisher.close()


@pytest.fixture
def ask(publisher):
    """``ask(*frames)``: a DEALER's request to the replay socket; the replies' frames until the end marker (the
    streamed protocol) or the one reply (the msgpack one)."""
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(publisher.replay_endpoint)

    def ask(*frames: bytes, one: bool = False) -> list[list[bytes]]:
        dealer.send_multipart(frames)
        replies = []
        while True:
            assert dealer.poll(10_000), "no reply from the replay socket"
            reply = dealer.recv_multipart()
            replies.append(reply)
            if one or reply[-2] == END_SEQ:
                return replies

    yield ask
    dealer.close()
    ctx.term()


def _publish(publisher: KVEventPublisher, *hashes: int) -> None:
    """A batch per hash (a block stored), once every batch published so far is sent (the buffer holds the sent)."""
    for block_hash in hashes:
        publisher.publish([BlockStored([block_hash], None, list(range(16)), None)])
    _sent(publisher, publisher.num_published)


def _sent(publisher: KVEventPublisher, n: int) -> None:
    deadline = time.monotonic() + 30
    while publisher.num_sent + publisher.num_dropped < n:
        assert time.monotonic() < deadline, "the publisher did not send its batches"
        time.sleep(0.001)


def test_the_streamed_replay_sends_each_buffered_batch_from_the_start_then_the_end(publisher, ask):
    _publish(publisher, *range(100, 106))  # the buffer keeps the last 4: sequence numbers 2..5
    replies = ask(b"", (3).to_bytes(8, "big"))  # a REQ's delimiter, then the start
    assert [r[0] for r in replies] == [b""] * 4 and replies[-1] == [b"", END_SEQ, b""]
    assert [int.from_bytes(r[1], "big") for r in replies[:-1]] == [3, 4, 5]
    hashes = [msgspec.msgpack.decode(r[2])[1][0]["block_hashes"] for r in replies[:-1]]
    assert hashes == [[103], [104], [105]]
    replies = ask((0).to_bytes(8, "big"))  # a DEALER without the delimiter: from the oldest kept
    assert [int.from_bytes(r[0], "big", signed=True) for r in replies] == [2, 3, 4, 5, -1]


def test_the_msgpack_replay_answers_batches_or_a_snapshot(publisher, ask):
    _publish(publisher, 100, 101)
    first = msgspec.msgpack.decode(ask(msgspec.msgpack.encode(_ReplayRequest()), one=True)[0][0], type=_ReplayResponse)
    assert first.snapshot is not None and first.next_seq == 2  # another epoch (none given): a snapshot
    epoch = first.publisher_epoch
    request = _ReplayRequest(publisher_epoch=epoch, start_seq=1)
    (reply,) = ask(b"", msgspec.msgpack.encode(request), one=True)
    response = msgspec.msgpack.decode(reply[1], type=_ReplayResponse)
    assert response.snapshot is None and [seq for seq, _ in response.replayed_batches] == [1]
    assert msgspec.msgpack.decode(response.replayed_batches[0][1])[1][0]["block_hashes"] == [101]

    publisher.publish([BlockRemoved([100]), BlockStored([7, 8], 101, list(range(32)), None)])
    _publish(publisher, 102, 103, 104, 105)  # batches 3..6 kept: 2 is gone
    late = _ReplayRequest(publisher_epoch=epoch, start_seq=2)
    response = msgspec.msgpack.decode(ask(msgspec.msgpack.encode(late), one=True)[0][0], type=_ReplayResponse)
    assert response.replayed_batches == [] and response.next_seq == 7
    ts, events, rank = msgspec.msgpack.decode(response.snapshot)
    assert events[0] == {"type": "AllBlocksCleared"} and rank == 0 and ts > 0
    assert sorted(events[1]["block_hashes"]) == [7, 8, 101, 102, 103, 104, 105]  # what the node caches now
    assert events[1]["block_size"] == 16 and events[1]["parent_block_hash"] is None


def test_a_clear_empties_the_snapshot(publisher, ask):
    _publish(publisher, 100)
    publisher.publish([AllBlocksCleared()])
    _sent(publisher, 2)
    forced = _ReplayRequest(start_seq=0, force_snapshot=True)
    response = msgspec.msgpack.decode(ask(msgspec.msgpack.encode(forced), one=True)[0][0], type=_ReplayResponse)
    _, events, _ = msgspec.msgpack.decode(response.snapshot)
    assert events == [{"type": "AllBlocksCleared"}]


def test_bad_requests_are_ignored_counted_and_the_publisher_goes_on(publisher, ask):
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    dealer.linger = 0
    dealer.connect(publisher.replay_endpoint)
    for frames in ([b"x" * 5], [b"a", b"b", b"c"], [b"\xc1" * 9], [b"", b"\x93\x01\x02"], [b""] * 40):
        dealer.send_multipart(frames)
    _publish(publisher, 100)
    assert [int.from_bytes(r[0], "big", signed=True) for r in ask((0).to_bytes(8, "big"))] == [0, -1]
    # the bad ones came on another connection, which a loaded host may deliver after the good one: wait for them
    deadline = time.monotonic() + 30
    while publisher.num_bad_replay_requests < 5 and time.monotonic() < deadline:
        time.sleep(0.005)
    assert publisher.num_bad_replay_requests == 5 and publisher.replays["streamed"] == 1
    dealer.close()
    ctx.term()


def test_without_a_replay_endpoint_there_is_no_socket():
    publisher = KVEventPublisher(KVEventsConfig(True, endpoint="tcp://127.0.0.1:*"), 16)
    try:
        assert publisher.replay_endpoint is None
    finally:
        publisher.close()
