"""The KV transfer protocol between agents, sans-IO: a sender that cuts a transfer into checksummed chunks
and keeps a bounded number of bytes in flight, and a receiver that checks and assembles them.

One transfer moves one contiguous array ``[num_layers, 2, num_blocks, block_size, Hkv, D]`` (the shared KV
block layout of backends/kv_layout.py; the owner gathers a request's blocks into it) as raw bytes::

    bytes  ├── chunk 0 ──┼── chunk 1 ──┼── ... ──┼─ last (≤ chunk_bytes) ─┤
    sender: KVChunk(i) + memoryview slice i (zero-copy frame) while bytes unacked ≤ max_inflight_bytes
    receiver: check header (layout/dtype it can hold, sizes, index) and xxh3_64 → copy into its buffer → KVAck(i)
              all chunks in → ReceivedKV (the array's bytes, the layout, the sender's block ids)

A receiver refuses a transfer it cannot hold (another model's geometry, an unknown dtype, too large, too
many at once) or one that arrives wrong (checksum, index, sizes that disagree): it answers ``KVAck(ok=False,
code)``, counts the refusal by reason (``refused``), and forgets the transfer; later chunks of it are
dropped and counted (``num_dropped_chunks``). Neither side does I/O or reads a clock: the owner
(agent/kv_data_plane.py) moves the frames and times the transfers.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field

import xxhash

from transport.messages import KVAck, KVChunk, KVWireLayout, TensorRef

DTYPE_ITEMSIZE = {"bfloat16": 2, "float16": 2, "float32": 4, "float8_e4m3fn": 1, "uint8": 1}
DEFAULT_CHUNK_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_INFLIGHT_BYTES = 64 * 1024 * 1024
MAX_REMEMBERED_REFUSALS = 1024  # refused transfer ids kept so their later chunks are dropped quietly


class KVRefusal(enum.StrEnum):
    """Why a receiver refused a transfer (``KVAck.code``; the key of ``KVReceiver.refused``)."""

    LAYOUT = "layout"  # layers / block size / heads / head dim differ from this node's cache
    DTYPE = "dtype"  # a dtype this node's cache does not hold
    TOO_LARGE = "too_large"  # more blocks or bytes than the receiver takes in one transfer
    BUSY = "busy"  # too many transfers being assembled at once
    MALFORMED = "malformed"  # sizes, chunk index or count inconsistent with the header or the frame
    CHECKSUM = "checksum"  # a chunk's bytes do not hash to its checksum
    MISMATCH = "mismatch"  # a chunk's header differs from its transfer's first chunk
    FULL = "full"  # the receiver's store of peers' KV has no room for it (the remote tier)


def checksum(data: bytes | bytearray | memoryview) -> int:
    return xxhash.xxh3_64_intdigest(data)


def layout_nbytes(layout: KVWireLayout) -> int:
    """Bytes of the whole array (raises KeyError for an unknown dtype)."""
    return (
        layout.num_layers
        * 2
        * layout.num_blocks
        * layout.block_size
        * layout.num_kv_heads
        * layout.head_dim
        * DTYPE_ITEMSIZE[layout.dtype]
    )


def num_chunks_of(nbytes: int, chunk_bytes: int) -> int:
    return max(1, -(-nbytes // chunk_bytes))


# --------------------------------------------------------------------------- sender


class KVSender:
    """One outgoing transfer: ``next_chunks()`` yields what the window allows, ``on_ack`` opens it again.

    data: the array's bytes, C-contiguous (a memoryview of a torch/numpy buffer; never copied here).
    """

    def __init__(
        self,
        transfer_id: str,
        request_id: str,
        block_ids: list[int],
        layout: KVWireLayout,
        data: memoryview,
        *,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
        max_inflight_bytes: int = DEFAULT_MAX_INFLIGHT_BYTES,
        purpose: str = "",
        lora_id: int = 0,
    ) -> None:
        data = data.cast("B") if data.format != "B" or data.ndim != 1 else data
        if len(data) != layout_nbytes(layout):
            raise ValueError(f"data has {len(data)} bytes, the layout {layout} needs {layout_nbytes(layout)}")
        if len(block_ids) != layout.num_blocks:
            raise ValueError(f"{len(block_ids)} block ids for {layout.num_blocks} blocks")
        if chunk_bytes < 1 or max_inflight_bytes < chunk_bytes:
            raise ValueError(f"need 1 <= chunk_bytes ({chunk_bytes}) <= max_inflight_bytes ({max_inflight_bytes})")
        self.transfer_id = transfer_id
        self.request_id = request_id
        self.block_ids = list(block_ids)
        self.layout = layout
        self.data = data
        self.nbytes = len(data)
        self.chunk_bytes = chunk_bytes
        self.max_inflight_bytes = max_inflight_bytes
        self.purpose = purpose  # KVChunk.purpose
        self.lora_id = lora_id  # KVChunk.lora_id
        self.num_chunks = num_chunks_of(self.nbytes, chunk_bytes)
        self._next = 0  # next chunk index to send
        self._unacked: dict[int, int] = {}  # chunk index → bytes
        self.num_acked = 0
        self.refusal: tuple[str, str] | None = None  # (code, message) of the receiver's refusal

    @property
    def inflight_bytes(self) -> int:
        return sum(self._unacked.values())

    @property
    def done(self) -> bool:
        """Every chunk acknowledged."""
        return self.num_acked == self.num_chunks

    @property
    def failed(self) -> bool:
        return self.refusal is not None

    def next_chunks(self) -> list[tuple[KVChunk, memoryview]]:
        """The chunks the window lets out now (at least one when nothing is in flight), with their frames."""
        out: list[tuple[KVChunk, memoryview]] = []
        if self.failed:
            return out
        inflight = self.inflight_bytes
        while self._next < self.num_chunks:
            start = self._next * self.chunk_bytes
            frame = self.data[start : start + self.chunk_bytes]
            if inflight and inflight + len(frame) > self.max_inflight_bytes:
                break
            out.append((self._header(self._next, frame), frame))
            self._unacked[self._next] = len(frame)
            inflight += len(frame)
            self._next += 1
        return out

    def _header(self, index: int, frame: memoryview) -> KVChunk:
        return KVChunk(
            request_id=self.request_id,
            transfer_id=self.transfer_id,
            block_ids=self.block_ids if index == 0 else [],
            layout=self.layout,
            chunk_index=index,
            num_chunks=self.num_chunks,
            chunk_bytes=self.chunk_bytes,
            checksum=checksum(frame),
            tensor=TensorRef("uint8", (len(frame),), 0),
            purpose=self.purpose,
            lora_id=self.lora_id,
        )

    def on_ack(self, ack: KVAck) -> None:
        """An ack of this transfer (others are the owner's to route). Unknown or repeated indices are ignored."""
        if not ack.ok:
            self.refusal = (ack.code, ack.message)
            self._unacked.clear()
            return
        if self._unacked.pop(ack.chunk_index, None) is not None:
            self.num_acked += 1


# --------------------------------------------------------------------------- receiver


@dataclass(slots=True, frozen=True)
class KVAcceptSpec:
    """What a receiver's cache holds: its geometry, the dtypes it takes, and how much it takes at once."""

    num_layers: int
    block_size: int
    num_kv_heads: int
    head_dim: int
    dtypes: tuple[str, ...] = ("bfloat16", "float16", "float32")
    max_blocks: int = 1 << 20
    max_transfer_bytes: int = 4 * 1024 * 1024 * 1024
    max_concurrent: int = 8
    stale_after_s: float = 30.0  # a partial transfer silent this long is dropped when room is needed

    def __post_init__(self) -> None:
        unknown = [d for d in self.dtypes if d not in DTYPE_ITEMSIZE]
        if unknown:
            raise ValueError(f"unknown dtypes {unknown}; known: {sorted(DTYPE_ITEMSIZE)}")
        if min(self.num_layers, self.block_size, self.num_kv_heads, self.head_dim, self.max_concurrent) < 1:
            raise ValueError(f"every size of {self} must be >= 1")


@dataclass(slots=True)
class ReceivedKV:
    """A complete transfer: ``chunks`` in order are the bytes of the array ``layout`` describes (C order),
    kept as they arrived (views of the socket's buffers: no copy until the owner writes them where they go)."""

    transfer_id: str
    request_id: str
    sender: bytes  # the sending DEALER's routing id (its node id)
    block_ids: list[int]
    layout: KVWireLayout
    chunks: list[bytes | memoryview]
    seconds: float  # first chunk's arrival → last chunk's (the owner's clock)
    purpose: str = ""  # the transfer's KVChunk.purpose
    lora_id: int = 0  # the transfer's KVChunk.lora_id: the adapter its KV was computed under (0: none)

    @property
    def nbytes(self) -> int:
        return sum(len(c) for c in self.chunks)

    def to_bytes(self) -> bytes:
        """The whole array's bytes, joined (one copy)."""
        return b"".join(self.chunks)

    def copy_into(self, out: memoryview) -> None:
        """Write the array's bytes into ``out`` (a writable buffer of ``nbytes`` bytes, e.g. a pinned staging
        tensor's memory)."""
        out = out.cast("B") if out.format != "B" or out.ndim != 1 else out
        if len(out) != self.nbytes:
            raise ValueError(f"out has {len(out)} bytes, the transfer {self.nbytes}")
        offset = 0
        for c in self.chunks:
            out[offset : offset + len(c)] = c
            offset += len(c)


@dataclass(slots=True)
class _Assembly:
    first: KVChunk
    chunks: list[bytes | memoryview | None]
    block_ids: list[int]
    started_s: float
    last_s: float
    missing: set[int] = field(default_factory=set)


class KVReceiver:
    """Checks and assembles incoming chunks. ``on_chunk`` returns the ack to send and, when the chunk completed
    its transfer, the ReceivedKV (else None)."""

    def __init__(self, spec: KVAcceptSpec, admit=None) -> None:
        """admit: ``admit(sender, first_chunk, nbytes) -> str | None`` asked once per new transfer that passed the
        checks: a reason to refuse it as FULL (a store over its budget), or None to take it."""
        self.spec = spec
        self.admit = admit
        self._assemblies: dict[tuple[bytes, str], _Assembly] = {}
        self._refused_ids: OrderedDict[tuple[bytes, str], None] = OrderedDict()
        self.refused: dict[KVRefusal, int] = dict.fromkeys(KVRefusal, 0)
        self.num_dropped_chunks = 0  # chunks of transfers refused earlier
        self.num_expired = 0  # partial transfers dropped after ``stale_after_s`` of silence
        self.num_received = 0  # complete transfers
        self.num_received_bytes = 0

    @property
    def num_assembling(self) -> int:
        return len(self._assemblies)

    def on_chunk(
        self, sender: bytes, chunk: KVChunk, frame: bytes | memoryview, now_s: float
    ) -> tuple[KVAck | None, ReceivedKV | None]:
        """(ack, completed transfer) for a chunk that arrived at ``now_s`` (the owner's clock, seconds).
        The ack is None for a chunk of a transfer refused before (dropped)."""
        key = (sender, chunk.transfer_id)
        if key in self._refused_ids:
            self.num_dropped_chunks += 1
            return None, None
        assembly = self._assemblies.get(key)
        if assembly is None and len(self._assemblies) >= self.spec.max_concurrent:
            self.expire(now_s - self.spec.stale_after_s)
        problem = self._check(chunk, frame, assembly)
        if problem is None and assembly is None and self.admit is not None:
            reason = self.admit(sender, chunk, layout_nbytes(chunk.layout))
            problem = None if reason is None else (KVRefusal.FULL, reason)
        if problem is not None:
            return self._refuse(key, chunk, *problem), None
        if assembly is None:
            assembly = _Assembly(chunk, [None] * chunk.num_chunks, list(chunk.block_ids), now_s, now_s)
            assembly.missing = set(range(chunk.num_chunks))
            self._assemblies[key] = assembly
        if chunk.chunk_index == 0:
            assembly.block_ids = list(chunk.block_ids)
        assembly.chunks[chunk.chunk_index] = frame
        assembly.missing.discard(chunk.chunk_index)
        assembly.last_s = now_s
        ack = KVAck(request_id=chunk.request_id, transfer_id=chunk.transfer_id, chunk_index=chunk.chunk_index, ok=True)
        if assembly.missing:
            return ack, None
        del self._assemblies[key]
        if len(assembly.block_ids) != chunk.layout.num_blocks:
            return self._refuse(key, chunk, KVRefusal.MALFORMED, "block ids do not match the layout's blocks"), None
        self.num_received += 1
        self.num_received_bytes += layout_nbytes(chunk.layout)
        first = assembly.first
        done = ReceivedKV(
            first.transfer_id,
            first.request_id,
            sender,
            assembly.block_ids,
            first.layout,
            assembly.chunks,
            now_s - assembly.started_s,
            first.purpose,
            first.lora_id,
        )
        return ack, done

    def expire(self, before_s: float) -> int:
        """Drop partial transfers whose last chunk came before ``before_s``; how many."""
        keys = [k for k, a in self._assemblies.items() if a.last_s < before_s]
        for k in keys:
            del self._assemblies[k]
        self.num_expired += len(keys)
        return len(keys)

    def forget_sender(self, sender: bytes) -> int:
        """Drop the partial transfers of a sender that is gone; how many there were."""
        keys = [k for k in self._assemblies if k[0] == sender]
        for k in keys:
            del self._assemblies[k]
        return len(keys)

    def _check(
        self, chunk: KVChunk, frame: bytes | memoryview, assembly: _Assembly | None
    ) -> tuple[KVRefusal, str] | None:
        spec, layout = self.spec, chunk.layout
        if assembly is None:
            geometry = (layout.num_layers, layout.block_size, layout.num_kv_heads, layout.head_dim)
            holds = (spec.num_layers, spec.block_size, spec.num_kv_heads, spec.head_dim)
            if geometry != holds:
                return (
                    KVRefusal.LAYOUT,
                    f"(layers, block size, kv heads, head dim) {geometry}; this node holds {holds}",
                )
            if layout.dtype not in spec.dtypes:
                return KVRefusal.DTYPE, f"dtype {layout.dtype!r}; this node holds {list(spec.dtypes)}"
            if layout.num_blocks < 1 or layout.num_blocks > spec.max_blocks:
                return KVRefusal.TOO_LARGE, f"{layout.num_blocks} blocks; this node takes 1..{spec.max_blocks}"
            nbytes = layout_nbytes(layout)
            if nbytes > spec.max_transfer_bytes:
                return KVRefusal.TOO_LARGE, f"{nbytes} bytes; this node takes at most {spec.max_transfer_bytes}"
            if len(self._assemblies) >= spec.max_concurrent:
                return KVRefusal.BUSY, f"{len(self._assemblies)} transfers already being assembled"
            if chunk.chunk_bytes < 1 or chunk.num_chunks != num_chunks_of(nbytes, chunk.chunk_bytes):
                return KVRefusal.MALFORMED, f"{chunk.num_chunks} chunks of {chunk.chunk_bytes} bytes for {nbytes} bytes"
        elif (chunk.layout, chunk.num_chunks, chunk.chunk_bytes, chunk.request_id, chunk.lora_id) != (
            assembly.first.layout,
            assembly.first.num_chunks,
            assembly.first.chunk_bytes,
            assembly.first.request_id,
            assembly.first.lora_id,
        ):
            return KVRefusal.MISMATCH, f"chunk {chunk.chunk_index}'s header differs from the transfer's first chunk"
        nbytes = layout_nbytes(layout)
        if not 0 <= chunk.chunk_index < chunk.num_chunks:
            return KVRefusal.MALFORMED, f"chunk index {chunk.chunk_index} outside 0..{chunk.num_chunks - 1}"
        if assembly is not None and chunk.chunk_index not in assembly.missing:
            return KVRefusal.MALFORMED, f"chunk {chunk.chunk_index} received twice"
        expected = min(chunk.chunk_bytes, nbytes - chunk.chunk_index * chunk.chunk_bytes)
        if len(frame) != expected or chunk.tensor.shape != (expected,) or chunk.tensor.frame_index != 0:
            return KVRefusal.MALFORMED, f"chunk {chunk.chunk_index} carries {len(frame)} bytes, expected {expected}"
        if checksum(frame) != chunk.checksum:
            return KVRefusal.CHECKSUM, f"chunk {chunk.chunk_index}'s bytes do not match its checksum"
        return None

    def _refuse(self, key: tuple[bytes, str], chunk: KVChunk, code: KVRefusal, message: str) -> KVAck:
        self.refused[code] += 1
        self._assemblies.pop(key, None)
        self._refused_ids[key] = None
        while len(self._refused_ids) > MAX_REMEMBERED_REFUSALS:
            self._refused_ids.popitem(last=False)
        return KVAck(
            request_id=chunk.request_id,
            transfer_id=chunk.transfer_id,
            chunk_index=chunk.chunk_index,
            ok=False,
            code=code.value,
            message=message,
        )
