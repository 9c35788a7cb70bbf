"""The KV cache events' publisher (agent/kv_events.py): vLLM's --kv-events-config keys, and vLLM's wire format on a
real ZeroMQ PUB socket: (topic, 8-byte sequence, msgpack [ts, events, rank]) with events as "type"-tagged maps that
vLLM's own msgspec schema decodes."""

from __future__ import annotations

import msgspec
import pytest
import zmq

from agent.kv_events import KVEventPublisher, KVEventsConfig, parse_kv_events_config
from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored
from zoo.cli import build_parser, main


# vLLM's event schema as its consumers decode it (vllm/distributed/kv_events.py: tagged structs, map-encoded)
class _VEvent(msgspec.Struct, tag=True, omit_defaults=True):
    pass


class _VBlockStored(_VEvent, tag="BlockStored"):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[list | None] | None = None


class _VBlockRemoved(_VEvent, tag="BlockRemoved"):
    block_hashes: list[int]
    medium: str | None


class _VAllBlocksCleared(_VEvent, tag="AllBlocksCleared"):
    pass


_BATCH = msgspec.msgpack.Decoder(tuple[float, list[_VBlockStored | _VBlockRemoved | _VAllBlocksCleared], int | None])

STORED = BlockStored([11, 12], None, list(range(32)), None)


def test_the_config_takes_vllms_keys_and_refuses_the_rest_by_name():
    config = parse_kv_events_config('{"enable_kv_cache_events": true, "endpoint": "tcp://*:6000", "topic": "kv"}')
    assert config.enabled and config.endpoint == "tcp://*:6000" and config.topic == "kv" and config.hwm == 100_000
    assert not parse_kv_events_config('{"enable_kv_cache_events": true, "publisher": "null"}').enabled
    assert not parse_kv_events_config("{}").enabled
    for text, message in [
        ("{not json", "not JSON"),
        ("[1]", "must be a JSON object"),
        ('{"enable": true}', "unknown keys ['enable']"),
        ('{"replay_endpoint": "localhost:5558"}', "replay_endpoint must be a ZeroMQ address"),
        ('{"publisher": "kafka"}', "publisher must be 'zmq' or 'null'"),
        ('{"hwm": 0}', "hwm must be an integer in [1, 2147483647]"),
        ('{"hwm": 100000000000000000000}', "hwm must be an integer in [1, 2147483647]"),
        ('{"enable_kv_cache_events": "yes"}', "must be true or false"),
        ('{"endpoint": "localhost"}', "must be a ZeroMQ address"),
    ]:
        with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
            parse_kv_events_config(text)


def test_zoo_agent_refuses_a_bad_config_naming_it(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["agent", "--kv-events-config", '{"enable": true}'])
    assert "unknown keys ['enable']" in capsys.readouterr().err


def test_an_endpoint_that_cannot_bind_stops_zoo_agent_with_its_name(capsys, monkeypatch):
    with pytest.raises(ValueError, match="endpoint 'tcp://\\*:notaport'"):
        KVEventPublisher(KVEventsConfig(True, endpoint="tcp://*:notaport"), 16)
    with pytest.raises(ValueError, match="replay_endpoint 'tcp://\\*:nope'"):
        KVEventPublisher(KVEventsConfig(True, endpoint="tcp://127.0.0.1:*", replay_endpoint="tcp://*:nope"), 16)
    monkeypatch.setattr("zoo.agent_cmd.configure_logging_from_args", lambda *a: None)  # the process keeps its logging
    config = '{"enable_kv_cache_events": true, "endpoint": "tcp://*:notaport"}'
    argv = ["agent", "--fake-runner", "--control", "tcp://127.0.0.1:1", "--kv-events-config", config]
    assert main(argv) == 2  # not a traceback
    assert "zoo agent: --kv-events-config: endpoint 'tcp://*:notaport'" in capsys.readouterr().err


def _subscribe(publisher: KVEventPublisher, topic: bytes = b"") -> tuple[zmq.Context, zmq.Socket, list]:
    """A SUB on the publisher's endpoint, past ZeroMQ's slow joiner: batches are published until one arrives
    (bounded); returns the frames of the first received."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.linger = 0
    sub.setsockopt(zmq.SUBSCRIBE, topic)
    sub.connect(publisher.endpoint)
    for _ in range(200):
        publisher.publish([STORED])
        if sub.poll(50):
            return ctx, sub, sub.recv_multipart()
    raise AssertionError("no batch reached the subscriber")


def test_a_batch_is_vllms_frames_and_msgpack():
    publisher = KVEventPublisher(KVEventsConfig(True, endpoint="tcp://127.0.0.1:*", topic="kv@n1"), 16)
    try:
        assert publisher.endpoint.startswith("tcp://127.0.0.1:") and not publisher.endpoint.endswith("*")
        ctx, sub, (topic, seq, payload) = _subscribe(publisher, b"kv@n1")
        assert topic == b"kv@n1" and len(seq) == 8
        raw = msgspec.msgpack.decode(payload)
        assert isinstance(raw, list) and len(raw) == 3 and raw[2] == 0  # [ts, events, data_parallel_rank]
        assert raw[1] == [{"type": "BlockStored", "block_hashes": [11, 12], "parent_block_hash": None,
                           "token_ids": list(range(32)), "block_size": 16, "lora_id": None, "medium": "GPU",
                           "lora_name": None}]  # fmt: skip
        first = int.from_bytes(seq, "big")
        keyed = BlockStored([13], 12, list(range(16)), 77)
        publisher.publish([keyed, BlockRemoved([11, 12]), AllBlocksCleared()])
        while True:  # the slow joiner's extra batches, then ours
            topic, seq, payload = sub.recv_multipart()
            ts, events, _ = _BATCH.decode(payload)  # vLLM's schema takes it
            if len(events) == 3:
                break
        assert int.from_bytes(seq, "big") > first and ts > 0
        stored, removed, cleared = events
        assert stored.parent_block_hash == 12 and stored.extra_keys == [[77]]  # the cache key keeps it apart
        assert removed.block_hashes == [11, 12] and removed.medium == "GPU"
        assert isinstance(cleared, _VAllBlocksCleared)
        sub.close()
        ctx.term()
    finally:
        publisher.close()
    assert publisher.num_sent >= 2 and publisher.num_dropped == 0


def test_sequence_numbers_count_every_batch_in_order():
    publisher = KVEventPublisher(KVEventsConfig(True, endpoint="tcp://127.0.0.1:*"), 16)
    try:
        ctx, sub, (_, seq, _) = _subscribe(publisher)
        start = int.from_bytes(seq, "big")
        for _ in range(5):
            publisher.publish([BlockRemoved([1])])
        seqs = []
        while len(seqs) < 5:
            _, seq, payload = sub.recv_multipart()
            if _BATCH.decode(payload)[1][0].__class__ is _VBlockRemoved:
                seqs.append(int.from_bytes(seq, "big"))
        assert seqs == sorted(seqs) and seqs[-1] - seqs[0] == 4 and seqs[0] > start  # consecutive: no gap
        sub.close()
        ctx.term()
    finally:
        publisher.close()
