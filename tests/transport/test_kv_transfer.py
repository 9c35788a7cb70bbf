"""The KV transfer protocol, sans-IO: chunking and window, assembly bit for bit, and every refusal counted."""

from __future__ import annotations

import os

import msgspec
import pytest

from transport.kv_transfer import (
    KVAcceptSpec,
    KVReceiver,
    KVRefusal,
    KVSender,
    layout_nbytes,
)
from transport.messages import KVAck, KVWireLayout

SPEC = KVAcceptSpec(num_layers=2, block_size=4, num_kv_heads=2, head_dim=8, max_concurrent=2, stale_after_s=5.0)


def layout(num_blocks: int = 3, **changes) -> KVWireLayout:
    base = dict(num_layers=2, num_blocks=num_blocks, block_size=4, num_kv_heads=2, head_dim=8, dtype="float16")
    return KVWireLayout(**{**base, **changes})


def sender(lay: KVWireLayout, data: bytes, tid: str = "t0", chunk_bytes: int = 100, window: int = 300) -> KVSender:
    return KVSender(
        tid, "req-1", list(range(10, 10 + lay.num_blocks)), lay, memoryview(data), chunk_bytes=chunk_bytes,
        max_inflight_bytes=window,
    )  # fmt: skip


def run(s: KVSender, r: KVReceiver, now_s: float = 0.0, tamper=None):
    """Pump chunks/acks until the sender is done or failed; returns (completed transfer, acks)."""
    done, acks = None, []
    while not s.done and not s.failed:
        chunks = s.next_chunks()
        assert chunks, "the window must let a chunk out when nothing is in flight"
        for header, frame in chunks:
            if tamper is not None:
                header, frame = tamper(header, frame)
            ack, complete = r.on_chunk(b"A", header, frame, now_s)
            if ack is None:
                continue
            acks.append(ack)
            s.on_ack(ack)
            done = complete or done
    return done, acks


def test_transfer_arrives_bit_identical_in_chunks_within_the_window():
    lay = layout()
    data = os.urandom(layout_nbytes(lay))  # 2*2*3*4*2*8*2 = 1536 bytes → 16 chunks of 100 (last 36)
    s, r = sender(lay, data), KVReceiver(SPEC)
    first = s.next_chunks()
    assert len(first) == 3 and s.inflight_bytes == 300  # the window: 300 bytes
    assert s.next_chunks() == []
    for header, frame in first:
        ack, _ = r.on_chunk(b"A", header, frame, 0.0)
        s.on_ack(ack)
    done, _ = run(s, r)
    assert s.done and s.num_chunks == 16
    assert done is not None and done.to_bytes() == data
    assert done.block_ids == [10, 11, 12] and done.request_id == "req-1" and done.layout == lay
    assert r.num_received == 1 and r.num_assembling == 0 and sum(r.refused.values()) == 0


def test_sender_checks_its_own_input():
    lay = layout()
    with pytest.raises(ValueError, match="bytes"):
        sender(lay, b"\0" * 10)
    with pytest.raises(ValueError, match="block ids"):
        KVSender("t", "r", [1], lay, memoryview(b"\0" * layout_nbytes(lay)))


@pytest.mark.parametrize(
    ("changes", "code"),
    [
        ({"num_layers": 3}, KVRefusal.LAYOUT),
        ({"head_dim": 16}, KVRefusal.LAYOUT),
        ({"block_size": 8}, KVRefusal.LAYOUT),
        ({"dtype": "uint8"}, KVRefusal.DTYPE),
    ],
)
def test_a_layout_or_dtype_the_receiver_cannot_hold_is_refused_and_counted(changes, code):
    lay = layout(**changes)
    s, r = sender(lay, os.urandom(layout_nbytes(lay)), chunk_bytes=1 << 20, window=1 << 20), KVReceiver(SPEC)
    done, acks = run(s, r)
    assert done is None and s.failed and s.refusal[0] == code.value
    assert acks[-1].ok is False and r.refused[code] == 1 and r.num_assembling == 0


def test_too_many_blocks_is_refused():
    r = KVReceiver(KVAcceptSpec(num_layers=2, block_size=4, num_kv_heads=2, head_dim=8, max_blocks=2))
    lay = layout(num_blocks=3)
    s = sender(lay, os.urandom(layout_nbytes(lay)))
    run(s, r)
    assert s.refusal[0] == KVRefusal.TOO_LARGE and r.refused[KVRefusal.TOO_LARGE] == 1


def test_a_corrupted_chunk_is_refused_and_later_chunks_are_dropped():
    lay = layout()
    data = os.urandom(layout_nbytes(lay))

    def flip(header, frame):
        if header.chunk_index == 1:
            frame = bytes([frame[0] ^ 1]) + bytes(frame[1:])
        return header, frame

    s, r = sender(lay, data), KVReceiver(SPEC)
    chunks = s.next_chunks()  # 0, 1, 2 in flight: 1 is refused, 2 then dropped
    results = [r.on_chunk(b"A", *flip(h, f), 0.0) for h, f in chunks]
    assert results[0][0].ok and results[1][0].ok is False and results[1][0].code == KVRefusal.CHECKSUM
    assert results[2] == (None, None)
    assert r.refused[KVRefusal.CHECKSUM] == 1 and r.num_dropped_chunks == 1 and r.num_assembling == 0


@pytest.mark.parametrize(
    "tamper",
    [
        lambda h, f: (msgspec.structs.replace(h, chunk_index=99), f),  # index out of range
        lambda h, f: (msgspec.structs.replace(h, num_chunks=h.num_chunks + 1), f),  # count disagrees with size
        lambda h, f: (h, bytes(f[:-1])),  # frame shorter than the header says
    ],
)
def test_inconsistent_chunks_are_refused_as_malformed(tamper):
    lay = layout()
    s, r = sender(lay, os.urandom(layout_nbytes(lay))), KVReceiver(SPEC)
    done, _ = run(s, r, tamper=tamper)
    assert done is None and s.failed and r.refused[KVRefusal.MALFORMED] == 1


@pytest.mark.parametrize("change", [{"request_id": "other"}, {"lora_id": 8}])
def test_a_chunk_whose_header_differs_from_its_first_is_a_mismatch(change):
    lay = layout()
    s, r = sender(lay, os.urandom(layout_nbytes(lay))), KVReceiver(SPEC)
    (h0, f0), (h1, f1), _ = s.next_chunks()
    assert r.on_chunk(b"A", h0, f0, 0.0)[0].ok
    ack, _ = r.on_chunk(b"A", msgspec.structs.replace(h1, **change), f1, 0.0)
    assert ack.ok is False and ack.code == KVRefusal.MISMATCH and r.refused[KVRefusal.MISMATCH] == 1


def test_the_adapter_the_kv_was_computed_under_travels_with_it():
    lay = layout()
    data = os.urandom(layout_nbytes(lay))
    plain, _ = run(sender(lay, data), KVReceiver(SPEC))
    assert plain.lora_id == 0  # the base model's
    tagged = KVSender("t1", "req-1", [10, 11, 12], lay, memoryview(data), chunk_bytes=100, lora_id=7)
    done, _ = run(tagged, KVReceiver(SPEC), tamper=lambda h, f: (h, f) if h.lora_id == 7 else (None, None))
    assert done.lora_id == 7 and done.to_bytes() == data


def test_busy_receiver_refuses_then_expires_silent_transfers():
    lay = layout()
    r = KVReceiver(SPEC)  # two at a time
    for i in range(2):
        h, f = sender(lay, os.urandom(layout_nbytes(lay)), tid=f"t{i}").next_chunks()[0]
        assert r.on_chunk(b"A", h, f, 0.0)[0].ok
    h, f = sender(lay, os.urandom(layout_nbytes(lay)), tid="t2").next_chunks()[0]
    ack, _ = r.on_chunk(b"A", h, f, 1.0)
    assert ack.ok is False and ack.code == KVRefusal.BUSY
    h, f = sender(lay, os.urandom(layout_nbytes(lay)), tid="t3").next_chunks()[0]
    ack, _ = r.on_chunk(b"A", h, f, 10.0)  # the first two are silent for > stale_after_s
    assert ack.ok and r.num_expired == 2 and r.num_assembling == 1


def test_same_transfer_id_from_two_senders_does_not_mix():
    lay = layout()
    a, b = os.urandom(layout_nbytes(lay)), os.urandom(layout_nbytes(lay))
    sa, sb = sender(lay, a, chunk_bytes=1 << 20, window=1 << 20), sender(lay, b, chunk_bytes=1 << 20, window=1 << 20)
    r = KVReceiver(SPEC)
    (ha, fa), (hb, fb) = sa.next_chunks()[0], sb.next_chunks()[0]
    _, got_a = r.on_chunk(b"A", ha, fa, 0.0)
    _, got_b = r.on_chunk(b"B", hb, fb, 0.0)
    assert got_a.to_bytes() == a and got_b.to_bytes() == b and got_b.sender == b"B"


def test_a_refusal_ack_fails_the_sender():
    lay = layout()
    s = sender(lay, os.urandom(layout_nbytes(lay)))
    s.next_chunks()
    s.on_ack(KVAck(transfer_id="t0", chunk_index=0, ok=False, code="busy", message="full"))
    assert s.failed and s.refusal == ("busy", "full") and s.next_chunks() == [] and s.inflight_bytes == 0
