"""An in-process request that gets no chunk for ``chunk_timeout_s`` is failed by the control plane's expiry loop
(RequestTable.time_out_silent) and stopped on its node, in place of a timeout scope around every chunk's wait."""

from __future__ import annotations

import anyio

from controlplane.request_table import TIMED_OUT, Inflight, LocalConsumer, RequestTable, ZmqConsumer
from transport.messages import CancelRequest, ErrorCode, ErrorReply, TokenChunk

S = 1_000_000_000


class _Registry:
    def on_first_token(self, node_id, request_id) -> None:
        pass

    def on_finished(self, node_id, request_id) -> None:
        pass


def _table():
    sent = []
    return RequestTable(_Registry(), lambda msg, node_id: sent.append((msg, node_id))), sent


def test_only_local_requests_silent_past_the_timeout_are_failed_and_stopped_on_their_node():
    table, sent = _table()
    send, receive = anyio.create_memory_object_stream(10)
    local = LocalConsumer(send)
    table.add(Inflight("quiet", "n1", local, arrival_ns=0, num_prompt_tokens=1))
    table.add(Inflight("talking", "n1", local, arrival_ns=0, num_prompt_tokens=1))
    table.add(Inflight("young", "n2", local, arrival_ns=9 * S, num_prompt_tokens=1))
    table.add(Inflight("zmq", "n1", ZmqConsumer(None, b"c"), arrival_ns=0, num_prompt_tokens=1))  # its client's timeout
    table.relay(table.get("talking"), TokenChunk(request_id="talking", token_ids=[1], text="a"), recv_ns=8 * S)
    assert table.time_out_silent(now_ns=10 * S, timeout_s=5.0) == ["quiet"]
    assert "quiet" not in table and all(r in table for r in ("talking", "young", "zmq"))
    assert sent == [(CancelRequest(request_id="quiet"), "n1")]
    assert table.counters["failed"] == 1
    receive.receive_nowait()  # the talking one's chunk
    reply = receive.receive_nowait()
    assert isinstance(reply, ErrorReply) and reply.request_id == "quiet"
    assert (reply.code, reply.message) == (ErrorCode.INTERNAL, TIMED_OUT)
    assert table.time_out_silent(now_ns=int(13.5 * S), timeout_s=5.0) == ["talking"]  # 5.5 s since its last chunk
    assert table.time_out_silent(now_ns=int(14.5 * S), timeout_s=5.0) == ["young"]  # since its arrival: none came


def test_the_timeout_counts_from_the_routing_not_from_a_wait_before_it():
    table, _ = _table()
    send, _receive = anyio.create_memory_object_stream(10)
    # arrived at 0 s at the gateway, routed at 9 s (it waited there): last_chunk_ns is its routing time
    table.add(Inflight("waited", "n1", LocalConsumer(send), arrival_ns=0, num_prompt_tokens=1, last_chunk_ns=9 * S))
    assert table.time_out_silent(now_ns=10 * S, timeout_s=5.0) == []
    assert table.time_out_silent(now_ns=int(14.5 * S), timeout_s=5.0) == ["waited"]
