"""The Dispatcher: handlers by type; rejections counted and answered; a failing handler never ends the loop."""

from __future__ import annotations

from transport.codec import encode
from transport.dispatch import Dispatcher
from transport.messages import CancelRequest, ErrorCode, Heartbeat, Ping
from transport.sockets import Received


def _received(msg_or_frames, peer: bytes | None = b"peer") -> Received:
    frames = msg_or_frames if isinstance(msg_or_frames, list) else encode(msg_or_frames)
    return Received(peer, [bytes(f) for f in frames], recv_ns=123)


def _dispatcher(handlers):
    replies = []
    d = Dispatcher(handlers, reply=lambda peer, reply: replies.append((peer, reply)), name="test")
    return d, replies


def test_routes_by_type_with_the_arrival_stamp():
    seen = []
    d, replies = _dispatcher({Ping: seen.append})
    d.dispatch(_received(Ping(request_id="p")))
    assert [(i.peer, i.msg.request_id, i.recv_ns) for i in seen] == [(b"peer", "p", 123)]
    assert d.received == {"Ping": 1} and replies == [] and d.num_rejected == 0


def test_unhandled_type_is_unknown_here_and_answered():
    d, replies = _dispatcher({Ping: lambda i: None})
    d.dispatch(_received(CancelRequest(request_id="c")))
    assert d.rejected[ErrorCode.UNKNOWN_TYPE] == 1
    assert replies[0][0] == b"peer" and replies[0][1].code is ErrorCode.UNKNOWN_TYPE and replies[0][1].request_id == "c"


def test_decode_errors_are_counted_by_code():
    d, replies = _dispatcher({Ping: lambda i: None})
    d.dispatch(_received([b"\x14"]))
    d.dispatch(_received([b"\x14", b"\xc1"]))
    assert d.rejected[ErrorCode.MALFORMED] == 2 and len(replies) == 2


def test_a_raising_handler_is_logged_counted_as_internal_and_answered(caplog):
    def boom(incoming):
        raise RuntimeError("bug")

    d, replies = _dispatcher({Heartbeat: boom, Ping: lambda i: None})
    d.dispatch(_received(Heartbeat(request_id="h", node_id="n")))
    d.dispatch(_received(Ping()))  # still dispatching
    assert d.rejected[ErrorCode.INTERNAL] == 1 and replies[0][1].code is ErrorCode.INTERNAL
    assert d.received == {"Heartbeat": 1, "Ping": 1}
    assert "handler for Heartbeat failed" in caplog.text


def test_without_a_reply_path_rejections_are_only_counted():
    d = Dispatcher({Ping: lambda i: None})
    d.dispatch(_received([b"\x01"], peer=None))
    assert d.rejected[ErrorCode.MALFORMED] == 1
