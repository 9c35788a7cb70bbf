"""KvEvents (transport/messages.py): the engine's KV cache events over the agent link and back, through the codec."""

from __future__ import annotations

from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from transport.codec import decode, encode
from transport.messages import KvEvents, MsgType, kv_events_from_wire, kv_events_to_wire

TOP = 2**64 - 1  # a chain value is an unsigned 64-bit integer


def test_events_cross_the_wire_as_their_hashes_in_order():
    events = [BlockStored([1, 2], None, list(range(32)), 5), BlockRemoved([3]), AllBlocksCleared()]
    events.append(BlockStored([TOP], 2, [], None))
    frames = encode(KvEvents(node_id="n0", events=kv_events_to_wire(events)))
    assert frames[0] == bytes([MsgType.KV_EVENTS])
    back, tensors = decode(frames)
    assert isinstance(back, KvEvents) and back.node_id == "n0" and tensors == []
    expected = [BlockStored([1, 2], None, [], None), BlockRemoved([3]), AllBlocksCleared()]
    assert kv_events_from_wire(back.events) == [*expected, BlockStored([TOP], None, [], None)]


def test_an_unknown_kind_is_skipped():
    assert kv_events_from_wire([(7, [1]), (1, [2])]) == [BlockRemoved([2])]
