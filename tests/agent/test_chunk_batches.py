"""An engine pass's TokenChunks in one TokenChunks message (agent/chunk_batches.py), read by the control plane as if
each came alone; an agent welcomed by a control plane that does not say it reads them sends TokenChunk messages."""

from __future__ import annotations

from agent.chunk_batches import MAX_CHUNKS, wire_messages
from transport.codec import decode, encode
from transport.messages import Heartbeat, TokenChunk, TokenChunks


def _chunk(rid: str, **fields) -> TokenChunk:
    return TokenChunk(request_id=rid, token_ids=[1], text="a", **fields)


def _report() -> Heartbeat:
    return Heartbeat(node_id="n")  # any other message of the pass (a LoadReport, an ErrorReply)


def test_consecutive_chunks_go_as_one_message_in_order_around_the_other_messages():
    a, b, c, d = (_chunk(r) for r in "abcd")
    report = _report()
    out = list(wire_messages([a, b, report, c, d]))
    assert [type(m) for m in out] == [TokenChunks, Heartbeat, TokenChunks]  # it stays after a and b
    assert out[0].chunks == [a, b] and out[2].chunks == [c, d]
    assert list(wire_messages([a, report, c])) == [a, report, c]  # a lone chunk goes as it is
    assert list(wire_messages([a, b, report], enabled=False)) == [a, b, report]  # an older control plane


def test_large_chunks_go_alone_and_a_batch_is_bounded():
    big = _chunk("big", embedding=[0.5] * 8)
    first, ids = _chunk("first", prompt_token_ids=[1, 2]), _chunk("x")
    out = list(wire_messages([first, ids, big, _chunk("y")]))
    assert [type(m) for m in out] == [TokenChunk, TokenChunk, TokenChunk, TokenChunk]
    many = [_chunk(f"r{i}") for i in range(MAX_CHUNKS + 3)]
    out = list(wire_messages(many))
    assert [len(m.chunks) for m in out] == [MAX_CHUNKS, 3]
    assert [c for m in out for c in m.chunks] == many


def test_a_batch_crosses_the_wire_whole():
    msg = TokenChunks(chunks=[_chunk("a", finished=True, finish_reason="stop"), _chunk("b", logprobs=[(1, -0.5, [])])])
    decoded, tensor_frames = decode([bytes(f) for f in encode(msg)])
    assert decoded == msg and tensor_frames == []
