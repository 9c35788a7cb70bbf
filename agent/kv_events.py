"""The node's KV cache events on a ZeroMQ PUB socket, in vLLM's wire format (`zoo agent --kv-events-config`).

A router that keeps an exact index of which node caches which blocks (llm-d's precise prefix-cache scorer, Dynamo's
KV router) subscribes to every engine's events. This publishes the engine's (engine/kv/kv_events.py) as vLLM does
(vllm-project/vllm, vllm/distributed/kv_events.py, ``ZmqEventPublisher``, and ``KVEventsConfig``'s fields):

    frames      (topic, sequence number: 8 bytes big-endian, payload); one message per engine step with events
    payload     msgpack of a batch [ts, [event, ...], data_parallel_rank]: the events as maps tagged by "type"
                (vLLM's map format since vllm-project/vllm#42892; the batch an array, as v0.26 sends it)
    BlockStored {"type", "block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
                 "lora_name", "extra_keys"}   extra_keys: [[key]] per block when the blocks were hashed under a
                 cache key (an adapter, a salt: engine/prefix_key.py), so a consumer keeps them apart; else omitted
    BlockRemoved {"type", "block_hashes", "medium"}      AllBlocksCleared {"type"}
    medium      "GPU": the device tier (the pool a forward pass reads, whatever the backend's device)

The endpoint binds when it has a wildcard ("*", "::") or is ipc:// / inproc://, else it connects (vLLM's rule: a
publisher binds a stable address or connects to a volatile one). The engine thread hands each step's events to
``publish`` (a bounded queue: when it is full the batch is dropped and counted, and the sequence number that
batch would have had is skipped, so a subscriber sees the gap); a thread of its own encodes and sends them. The
hashes are this engine's chain values (engine/kv/block_hash.py), not vLLM's: ``token_ids`` let a consumer with its
own hash recompute them.

With ``replay_endpoint`` a ROUTER socket (always bound) serves a subscriber that missed batches (a gap in the
sequence numbers, a restart), in both of vLLM's protocols, as its ``ZmqEventPublisher._service_replay`` tells them
apart (the same thread serves it, between batches; a DEALER may leave out the REQ's empty delimiter frame):

    streamed    request: the start sequence number, 8 bytes big-endian; reply: one message per batch still in the
                buffer (the last ``buffer_steps`` sent) from it, (sequence number, payload), then (-1 as 8 signed
                bytes, b"") to end it
    reconciling request: msgpack ZmqEventReplayRequest {publisher_epoch, start_seq, force_snapshot}; reply: one
                msgpack ZmqEventReplayResponse {publisher_epoch, next_seq, replayed_batches: [[seq, payload]]}, or,
                when the batches from start_seq are not all kept (gone, dropped, not sent yet), the epoch is another
                publisher's (this one's is new at every start) or a snapshot is forced, {..., snapshot}: one batch
                of AllBlocksCleared then a BlockStored of every block cached now (group_idx 0, no parent, no tokens;
                none when nothing is cached)

Anything else is ignored and counted (``num_bad_replay_requests``); the publisher goes on. The answers are counted
by kind (``replays``), and both are on the agent's /metrics (``zoo:kv_events_replay_requests_total{outcome}``).
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, fields
from typing import Any

import msgspec
import zmq

from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, KVEvent

__all__ = ["KVEventPublisher", "KVEventsConfig", "parse_kv_events_config"]

log = logging.getLogger(__name__)

MEDIUM_GPU = "GPU"
MAX_COUNT = 2**31 - 1  # the largest hwm ZeroMQ takes (a C int); the queue and buffer sizes alike


@dataclass(frozen=True, slots=True)
class KVEventsConfig:
    """vLLM's KVEventsConfig fields (vllm/config/kv_events.py); ``buffer_steps``: the batches kept for replay."""

    enable_kv_cache_events: bool = False
    publisher: str = "zmq"
    endpoint: str = "tcp://*:5557"
    replay_endpoint: str | None = None
    buffer_steps: int = 10_000
    hwm: int = 100_000
    max_queue_size: int = 100_000
    topic: str = ""

    def __post_init__(self) -> None:
        if type(self.enable_kv_cache_events) is not bool:
            enable = self.enable_kv_cache_events
            raise ValueError(f"kv events: enable_kv_cache_events must be true or false, got {enable!r}")
        if not isinstance(self.topic, str):
            raise ValueError(f"kv events: topic must be a string, got {self.topic!r}")
        if self.publisher not in ("zmq", "null"):
            raise ValueError(f"kv events: publisher must be 'zmq' or 'null', got {self.publisher!r}")
        replay = self.replay_endpoint
        if replay is not None and (not isinstance(replay, str) or "://" not in replay):
            raise ValueError(f"kv events: replay_endpoint must be a ZeroMQ address, got {replay!r}")
        for name in ("hwm", "max_queue_size", "buffer_steps"):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= MAX_COUNT:
                raise ValueError(f"kv events: {name} must be an integer in [1, {MAX_COUNT}], got {value!r}")
        if not isinstance(self.endpoint, str) or "://" not in self.endpoint:
            raise ValueError(f"kv events: endpoint must be a ZeroMQ address, got {self.endpoint!r}")

    @property
    def enabled(self) -> bool:
        return self.enable_kv_cache_events and self.publisher == "zmq"


def parse_kv_events_config(text: str) -> KVEventsConfig:
    """``--kv-events-config '{"enable_kv_cache_events": true, ...}'`` (vLLM's flag and keys); ValueError naming
    what is wrong."""
    try:
        raw = msgspec.json.decode(text)
    except (msgspec.DecodeError, RecursionError) as exc:
        raise ValueError(f"--kv-events-config: not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ValueError("--kv-events-config: must be a JSON object")
    known = {f.name for f in fields(KVEventsConfig)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ValueError(f"--kv-events-config: unknown keys {unknown} (known: {sorted(known)})")
    return KVEventsConfig(**raw)


class _Stored(msgspec.Struct, tag="BlockStored", omit_defaults=True):
    block_hashes: list[int]
    parent_block_hash: int | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[list[Any] | None] | None = None
    group_idx: int | None = None  # a snapshot's (vLLM's KV cache group; one here)


class _Removed(msgspec.Struct, tag="BlockRemoved", omit_defaults=True):
    block_hashes: list[int]
    medium: str | None


class _Cleared(msgspec.Struct, tag="AllBlocksCleared"):
    pass


class _Batch(msgspec.Struct, array_like=True):
    ts: float
    events: list[_Stored | _Removed | _Cleared]
    data_parallel_rank: int | None = 0


class _ReplayRequest(msgspec.Struct, omit_defaults=True):  # vLLM's ZmqEventReplayRequest
    publisher_epoch: str | None = None
    start_seq: int = 0
    force_snapshot: bool = False


class _ReplayResponse(msgspec.Struct, omit_defaults=True):  # vLLM's ZmqEventReplayResponse
    publisher_epoch: str
    next_seq: int
    replayed_batches: list[tuple[int, bytes]]
    snapshot: bytes | None = None


END_SEQ = (-1).to_bytes(8, "big", signed=True)  # the streamed replay's last message
REPLAYS_PER_TURN = 16


def wire_events(events: list[KVEvent], block_size: int) -> list[_Stored | _Removed | _Cleared]:
    """The engine's events as vLLM's."""
    out: list[_Stored | _Removed | _Cleared] = []
    for event in events:
        if type(event) is BlockStored:
            key = event.cache_key
            extra = None if key is None else [[key] for _ in event.block_hashes]
            stored = _Stored(event.block_hashes, event.parent_block_hash, event.token_ids, block_size, None, MEDIUM_GPU,
                             None, extra)  # fmt: skip
            out.append(stored)
        elif type(event) is BlockRemoved:
            out.append(_Removed(event.block_hashes, MEDIUM_GPU))
        elif type(event) is AllBlocksCleared:
            out.append(_Cleared())
    return out


class KVEventPublisher:
    """The PUB socket, the replay socket if asked for, and their thread (module docstring). ``endpoint`` /
    ``replay_endpoint``: where they bound or connected (a wildcard port resolved; None: no replay);
    ``num_published`` / ``num_sent`` / ``num_dropped``: batches."""

    def __init__(self, config: KVEventsConfig, block_size: int) -> None:
        self.config, self.block_size = config, block_size
        self._queue: queue.Queue[tuple[int, list[KVEvent]] | None] = queue.Queue(maxsize=config.max_queue_size)
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.linger = 0
        self._replay: zmq.Socket | None = None
        self.replay_endpoint: str | None = None
        endpoint = config.endpoint
        try:
            if "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
                self._pub.bind(endpoint)
                self.endpoint = self._pub.last_endpoint.decode()
            else:
                self._pub.connect(endpoint)
                self.endpoint = endpoint
            if config.replay_endpoint is not None:
                endpoint = config.replay_endpoint
                self._replay = self._ctx.socket(zmq.ROUTER)
                self._replay.linger = 0
                self._replay.bind(endpoint)
                self.replay_endpoint = self._replay.last_endpoint.decode()
        except zmq.ZMQError as e:  # a malformed address, a port taken: refused by name, not a traceback
            self._close_sockets()
            name = "endpoint" if endpoint == config.endpoint else "replay_endpoint"
            raise ValueError(f"--kv-events-config: {name} {endpoint!r}: {e}") from None
        self._topic = config.topic.encode()
        self._seq = 0  # the next batch's sequence number (the engine thread's)
        self.num_sent = self.num_dropped = self.num_bad_replay_requests = 0
        self.replays = {"streamed": 0, "batches": 0, "snapshot": 0}  # replay requests answered, by answer
        self._encoder = msgspec.msgpack.Encoder()
        # replay: the last buffer_steps batches sent, the sequence number after the last handled, what is cached now
        self._buffer: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self._next_seq = 0
        self._cached: set[int] = set()
        self._cached_lock = threading.Lock()
        self._epoch = uuid.uuid4().hex
        self._requests = msgspec.msgpack.Decoder(_ReplayRequest)
        self._thread = threading.Thread(target=self._send_loop, name="zoo-kv-events", daemon=True)
        self._thread.start()

    @property
    def num_published(self) -> int:
        return self._seq

    def publish(self, events: list[KVEvent]) -> None:
        """Queue one step's events (from one thread, the engine's; never blocks: a full queue drops the batch,
        counted, and its sequence number is skipped, so a subscriber sees the gap)."""
        if self._replay is not None:  # a snapshot holds what is cached, dropped batches too
            self._mirror(events)
        seq, self._seq = self._seq, self._seq + 1
        try:
            self._queue.put_nowait((seq, events))
        except queue.Full:
            self.num_dropped += 1

    def close(self, timeout_s: float = 1.0) -> None:
        """Send what is queued (at most ``timeout_s``), then close the sockets."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)
        self._close_sockets()

    def _close_sockets(self) -> None:
        self._pub.close(linger=0)
        if self._replay is not None:
            self._replay.close(linger=0)
        self._ctx.term()

    def _send_loop(self) -> None:
        wait_s = None if self._replay is None else 0.05  # how long a replay request may wait for its turn
        while True:
            if self._replay is not None:
                self._serve_replays()
            try:
                item = self._queue.get(timeout=wait_s)
            except queue.Empty:
                continue
            if item is None:
                return
            seq, events = item
            self._next_seq = seq + 1
            try:
                payload = self._encoder.encode(_Batch(time.time(), wire_events(events, self.block_size)))
                self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
                self.num_sent += 1
                if self._replay is not None:
                    self._buffer.append((seq, payload))
            except zmq.ZMQError:
                if self._pub.closed:
                    return
                log.exception("kv events: a batch was not sent")

    def _mirror(self, events: list[KVEvent]) -> None:
        with self._cached_lock:
            for event in events:
                if type(event) is BlockStored:
                    self._cached.update(event.block_hashes)
                elif type(event) is BlockRemoved:
                    self._cached.difference_update(event.block_hashes)
                elif type(event) is AllBlocksCleared:
                    self._cached.clear()

    def _serve_replays(self) -> None:
        """Answer the replay requests waiting, at most REPLAYS_PER_TURN between two batches (a flood of requests
        does not hold up the publishing); a bad one is counted and ignored."""
        assert self._replay is not None
        for _ in range(REPLAYS_PER_TURN):
            if not self._replay.poll(0):
                return
            try:
                frames = self._replay.recv_multipart()
                if len(frames) not in (2, 3) or (len(frames) == 3 and frames[1] != b""):
                    self.num_bad_replay_requests += 1
                    continue
                head, payload = frames[:-1], frames[-1]  # (identity, [delimiter]), the request
                try:
                    request = self._requests.decode(payload)
                except msgspec.DecodeError:
                    if len(payload) != 8:
                        self.num_bad_replay_requests += 1
                        continue
                    start = int.from_bytes(payload, "big")
                    for seq, batch in list(self._buffer):
                        if seq >= start:
                            self._replay.send_multipart((*head, seq.to_bytes(8, "big"), batch))
                    self._replay.send_multipart((*head, END_SEQ, b""))
                    self.replays["streamed"] += 1
                    continue
                response = self._replay_response(request)
                self._replay.send_multipart((*head, self._encoder.encode(response)))
                self.replays["batches" if response.snapshot is None else "snapshot"] += 1
            except zmq.ZMQError:
                if self._replay.closed:
                    return
                log.exception("kv events: a replay request was not answered")

    def _replay_response(self, request: _ReplayRequest) -> _ReplayResponse:
        """The batches from ``start_seq`` if every one of them is kept, else a snapshot (vLLM's rule)."""
        start, next_seq = request.start_seq, self._next_seq
        batches = [(seq, batch) for seq, batch in self._buffer if seq >= start]
        whole = 0 <= start <= next_seq and len(batches) == next_seq - start
        whole = whole and all(seq == start + i for i, (seq, _) in enumerate(batches))  # none dropped between
        if whole and request.publisher_epoch == self._epoch and not request.force_snapshot:
            return _ReplayResponse(self._epoch, next_seq, batches)
        with self._cached_lock:
            cached = list(self._cached)
        events: list[_Stored | _Removed | _Cleared] = [_Cleared()]
        if cached:
            events.append(_Stored(cached, None, [], self.block_size, None, None, None, group_idx=0))
        snapshot = self._encoder.encode(_Batch(time.time(), events))
        return _ReplayResponse(self._epoch, next_seq, [], snapshot)
