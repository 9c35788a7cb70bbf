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

Left out: vLLM's replay socket (``replay_endpoint``: resend buffered batches from a sequence number); refused
by name.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
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
    """vLLM's KVEventsConfig fields (vllm/config/kv_events.py); ``buffer_steps`` sizes vLLM's replay buffer and is
    accepted for its configs' sake (no replay here)."""

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
        if self.replay_endpoint is not None:
            raise ValueError("kv events: replay_endpoint is not supported (no replay socket here)")
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


class _Removed(msgspec.Struct, tag="BlockRemoved", omit_defaults=True):
    block_hashes: list[int]
    medium: str | None


class _Cleared(msgspec.Struct, tag="AllBlocksCleared"):
    pass


class _Batch(msgspec.Struct, array_like=True):
    ts: float
    events: list[_Stored | _Removed | _Cleared]
    data_parallel_rank: int | None = 0


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
    """The PUB socket and its sending thread (module docstring). ``endpoint``: where it bound or connected (a
    wildcard port resolved); ``num_sent`` / ``num_dropped``: batches."""

    def __init__(self, config: KVEventsConfig, block_size: int) -> None:
        self.config, self.block_size = config, block_size
        self._queue: queue.Queue[tuple[int, list[KVEvent]] | None] = queue.Queue(maxsize=config.max_queue_size)
        self._ctx = zmq.Context()
        self._pub = self._ctx.socket(zmq.PUB)
        self._pub.set_hwm(config.hwm)
        self._pub.linger = 0
        endpoint = config.endpoint
        try:
            if "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://")):
                self._pub.bind(endpoint)
                self.endpoint = self._pub.last_endpoint.decode()
            else:
                self._pub.connect(endpoint)
                self.endpoint = endpoint
        except zmq.ZMQError as e:  # a malformed address, a port taken: refused by name, not a traceback
            self._pub.close(linger=0)
            self._ctx.term()
            raise ValueError(f"--kv-events-config: endpoint {endpoint!r}: {e}") from None
        self._topic = config.topic.encode()
        self._seq = 0
        self.num_sent = self.num_dropped = 0
        self._encoder = msgspec.msgpack.Encoder()
        self._thread = threading.Thread(target=self._send_loop, name="zoo-kv-events", daemon=True)
        self._thread.start()

    def publish(self, events: list[KVEvent]) -> None:
        """Queue one step's events (from one thread, the engine's; never blocks: a full queue drops the batch,
        counted, and its sequence number is skipped, so a subscriber sees the gap)."""
        seq, self._seq = self._seq, self._seq + 1
        try:
            self._queue.put_nowait((seq, events))
        except queue.Full:
            self.num_dropped += 1

    def close(self, timeout_s: float = 1.0) -> None:
        """Send what is queued (at most ``timeout_s``), then close the socket."""
        with contextlib.suppress(queue.Full):
            self._queue.put(None, timeout=timeout_s)
        self._thread.join(timeout_s)
        self._pub.close(linger=0)
        self._ctx.term()

    def _send_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            seq, events = item
            try:
                payload = self._encoder.encode(_Batch(time.time(), wire_events(events, self.block_size)))
                self._pub.send_multipart((self._topic, seq.to_bytes(8, "big"), payload))
                self.num_sent += 1
            except zmq.ZMQError:
                if self._pub.closed:
                    return
                log.exception("kv events: a batch was not sent")
