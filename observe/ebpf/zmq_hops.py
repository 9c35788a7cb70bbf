"""Router ⇄ agent hop latency of every zmq message, on the host's one monotonic clock (bpf_ktime_get_ns).

Two ways to see a message pass, one BPF program each (``HopMode``)::

    wire    (default)  syscall tracepoints where libzmq's I/O threads move the ZMTP byte stream:
                       sys_enter_sendto (sender) → sys_exit_recvfrom (receiver): the loopback/TCP hop alone.
                       ~4 tracepoint hits per round trip; no cost measurable in `zoo bench observe`.
    libzmq             uprobes on the libzmq that pyzmq bundles: zmq_msg_send entry (sender) → zmq_msg_recv
                       return (receiver): application to application, libzmq's queues and I/O threads
                       included. Every frame traps (identity and type frames too): ~5 µs per frame pair.

Both correlate a payload seen on the sending side with the same payload on the receiving side by a key
parsed from its first bytes (transport/messages.py: frames [ROUTER identity][type: 1 byte][payload][tensors];
a payload is the frame after a 1-byte type frame, parsed as)::

    0x8N | 0xde NN NN     map header (fixmap / map16)
    0xa1 'v'  <fixint>    protocol version
    0xaa 'request_id'     then the id: 0xa0|len (≤ 31 bytes) or 0xd9 len
    <id bytes>
    0xa7 'sent_ns'        then a uint: fixint | 0xcc u8 | 0xcd u16 | 0xce u32 | 0xcf u64 (big endian)

key = fnv1a64(id[:64]) ^ (sent_ns · 0x9E3779B97F4A7C15) (``message_key`` computes it in Python); sent_ns is
re-stamped on every send, so a forwarded request has a fresh key on each hop. The sender stores
inflight[key] = (ktime, role, node); the receiver finds it, and the hop goes into a log-linear histogram per
(direction, node) with an exact sum and counts. Direction = sender role → receiver role, from the ``roles``
map (tgid → role, node index) that user space fills; the node of a hop is the agent's end of it.

libzmq mode reads the zmq_msg_t (libzmq 4.3, 64 bytes; type byte at offset 42)::

    101 vsm    data inline at 8..40, size byte at 41
    102 lmsg   content_t* at 8  → content {void *data; size_t size; ...}
    105 zclmsg content_t* at 8  → same layout
    104 cmsg   void *data at 8, size_t size at 16

wire mode walks ZMTP 3 frames ([flags][size: 1 or 8 bytes][body]) with a cursor per (process, fd, direction)
for frames that straddle two syscalls; a stream it cannot follow (attached mid-frame, a split header, the
greeting) is resynchronised on the next buffer made only of whole frames. Not seen in wire mode: inproc://
sockets (no syscalls) and more than MAX_FRAMES frames in one syscall (counted as a lost sync, not as hops).
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
from dataclasses import dataclass
from pathlib import Path

from observe.ebpf.histogram import HIST_C, Histogram

RID_MAX = 64  # request-id bytes hashed into the key (and reported by trace events)
INFLIGHT_MAX = 65536  # unmatched sends older than this many newer ones are evicted (LRU)
MAX_FRAMES = 32  # ZMTP frames looked at per send()/recv() in "wire" mode (16 two-frame messages)


class Role(enum.IntEnum):
    ROUTER = 1  # the control plane
    AGENT = 2
    CLIENT = 3


class Count(enum.IntEnum):
    SENT = 0  # payload frames sent, group = role << 16 | node
    RECEIVED = 1  # payload frames received, group = role << 16 | node
    MATCHED = 2  # received frames whose send was seen, group = direction << 16 | node
    UNMATCHED = 3  # received payloads whose send was not seen (sent before attach, or by an untraced process)


def direction_code(sender: Role, receiver: Role) -> int:
    return int(sender) * 4 + int(receiver)


def direction_name(code: int) -> str:
    return f"{Role(code // 4).name.lower()}->{Role(code % 4).name.lower()}"


def message_key(request_id: str, sent_ns: int) -> int:
    """The correlation key the probes compute for a payload (u64)."""
    h = 0xCBF29CE484222325
    for b in request_id.encode()[:RID_MAX]:
        h = ((h ^ b) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h ^ ((sent_ns * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF)


BPF_TEXT = (
    (Path(__file__).with_name("zmq_hops.bpf.c").read_text())
    .replace("__HIST_C__", HIST_C)
    .replace("__RID_MAX__", str(RID_MAX))
    .replace("__INFLIGHT_MAX__", str(INFLIGHT_MAX))
    .replace("__MAX_FRAMES__", str(MAX_FRAMES))
)


class _Event(ctypes.Structure):
    _fields_ = [
        ("key", ctypes.c_uint64),
        ("sent_ns", ctypes.c_uint64),
        ("send_ktime_ns", ctypes.c_uint64),
        ("recv_ktime_ns", ctypes.c_uint64),
        ("sender_tgid", ctypes.c_uint32),
        ("receiver_tgid", ctypes.c_uint32),
        ("direction", ctypes.c_uint32),
        ("node", ctypes.c_uint32),
        ("rid_len", ctypes.c_uint32),
        ("rid", ctypes.c_uint8 * RID_MAX),
    ]


@dataclass(frozen=True)
class HopEvent:
    """One matched message (only with ``trace_messages=True``)."""

    request_id: str  # first RID_MAX bytes
    key: int  # message_key(request_id, sent_ns)
    sent_ns: int  # from the payload (time.monotonic_ns of the sender's application)
    hop_ns: int  # zmq_msg_send entry → zmq_msg_recv return
    send_ktime_ns: int
    recv_ktime_ns: int
    sender_pid: int
    receiver_pid: int
    direction: str
    node: int


@dataclass
class HopSnapshot:
    """Histograms by (direction, node) and counts by (what, group); see ``ZmqHopProbe.snapshot``."""

    hops: dict[tuple[str, int], Histogram]
    counts: dict[tuple[str, int], int]


class HopMode(enum.StrEnum):
    LIBZMQ = "libzmq"  # uprobes on zmq_msg_send / zmq_msg_recv: application-to-application, ~5 µs per frame pair
    WIRE = "wire"  # send()/recv() syscall tracepoints of the I/O threads: the loopback hop, ~0.5 µs per syscall


class ZmqHopProbe:
    """Owns one BPF program (``mode`` picks which, see the module docstring). Not thread-safe; one owner."""

    def __init__(self, bcc, *, mode: HopMode = HopMode.WIRE, trace_messages: bool = False) -> None:
        self.mode = HopMode(mode)
        cflags = ["-DMODE_UPROBE" if self.mode is HopMode.LIBZMQ else "-DMODE_SYSCALL"]
        if trace_messages:
            cflags.append("-DTRACE_MESSAGES")
        self._bpf = bcc.BPF(text=BPF_TEXT.encode(), cflags=cflags)  # wire mode: tracepoints attach here
        self._roles = self._bpf[b"roles"]
        self._attached: list[tuple[str, int]] = []  # (libzmq path, pid), libzmq mode
        self._events: list[HopEvent] = []
        self.trace_messages = trace_messages
        if trace_messages:
            self._bpf[b"events"].open_ring_buffer(self._on_event)

    def add_process(self, pid: int, role: Role, node: int, libzmq_path: str) -> None:
        """Trace process ``pid``: its role in the map; in libzmq mode, uprobes restricted to its address space."""
        self._roles[ctypes.c_uint32(pid)] = self._roles.Leaf(int(role), node)
        if self.mode is HopMode.WIRE:
            return
        b, lib = self._bpf, libzmq_path.encode()  # BCC wants bytes
        b.attach_uprobe(name=lib, sym=b"zmq_msg_send", fn_name=b"on_msg_send", pid=pid)
        b.attach_uprobe(name=lib, sym=b"zmq_msg_recv", fn_name=b"on_msg_recv_enter", pid=pid)
        b.attach_uretprobe(name=lib, sym=b"zmq_msg_recv", fn_name=b"on_msg_recv_return", pid=pid)
        self._attached.append((libzmq_path, pid))

    def remove_process(self, pid: int) -> None:
        for path, p in [a for a in self._attached if a[1] == pid]:
            self._detach(path, p)
            self._attached.remove((path, p))
        self._roles.pop(ctypes.c_uint32(pid), None)
        if self.mode is HopMode.WIRE:
            streams = self._bpf[b"streams"]
            for k in [k for k in streams if k.tgid == pid]:
                streams.pop(k, None)

    def _detach(self, path: str, pid: int) -> None:
        b = self._bpf
        for detach, sym in (
            (b.detach_uprobe, b"zmq_msg_send"),
            (b.detach_uprobe, b"zmq_msg_recv"),
            (b.detach_uretprobe, b"zmq_msg_recv"),
        ):
            with contextlib.suppress(Exception):  # a process that exited leaves nothing to detach
                detach(name=path.encode(), sym=sym, pid=pid)

    def snapshot(self) -> HopSnapshot:
        sums = {k.value: v.value for k, v in self._bpf[b"hop_sum"].items()}
        hops: dict[tuple[str, int], Histogram] = {}
        for k, v in self._bpf[b"hop_hist"].items():
            key = (direction_name(k.group >> 16), k.group & 0xFFFF)
            hops.setdefault(key, Histogram()).add_slot(k.slot, v.value)
        for group, total in sums.items():
            key = (direction_name(group >> 16), group & 0xFFFF)
            if key in hops:
                hops[key].sum_ns = total
        counts: dict[tuple[str, int], int] = {}
        for k, v in self._bpf[b"counts"].items():
            what = Count(k.what)
            if what is Count.MATCHED:
                label = direction_name(k.group >> 16)
            else:
                label = Role(k.group >> 16).name.lower()
            counts[(f"{what.name.lower()}:{label}", k.group & 0xFFFF)] = v.value
        return HopSnapshot(hops=hops, counts=counts)

    def clear(self) -> None:
        for name in ("hop_hist", "hop_sum", "counts", "inflight"):
            self._bpf[name.encode()].clear()
        self._events.clear()

    def take_events(self) -> list[HopEvent]:
        """Matched-message events since the last call (``trace_messages=True`` only)."""
        if self.trace_messages:
            self._bpf.ring_buffer_consume()
        out, self._events = self._events, []
        return out

    def _on_event(self, _ctx, data, _size) -> None:
        e = ctypes.cast(data, ctypes.POINTER(_Event)).contents
        n = min(e.rid_len, RID_MAX)
        self._events.append(
            HopEvent(
                request_id=bytes(e.rid[:n]).decode(errors="replace"),
                key=e.key,
                sent_ns=e.sent_ns,
                hop_ns=e.recv_ktime_ns - e.send_ktime_ns,
                send_ktime_ns=e.send_ktime_ns,
                recv_ktime_ns=e.recv_ktime_ns,
                sender_pid=e.sender_tgid,
                receiver_pid=e.receiver_tgid,
                direction=direction_name(e.direction),
                node=e.node,
            )
        )

    def close(self) -> None:
        for path, pid in self._attached:
            self._detach(path, pid)
        self._attached.clear()
        self._bpf.cleanup()
