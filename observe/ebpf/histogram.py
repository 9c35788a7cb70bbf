"""Log-linear latency histograms kept in kernel maps, and their decoding in user space.

A plain log2 histogram is too coarse to compare a p50 (a bucket is a factor of 2 wide), so every
power of two is split into 8 linear sub-buckets (HdrHistogram with 3 bits of mantissa: ≤ 12.5 % wide)::

    value v (ns)          slot
    0 ≤ v < 8             v                                   exact
    2^k ≤ v < 2^(k+1)     8·k + ((v >> (k-3)) & 7)    (k ≥ 3)  [(8+m)·2^(k-3), (9+m)·2^(k-3))

``HIST_C`` is the C side (one ``struct hist_key {u32 group; u32 slot;}`` hash map per histogram family,
``group`` chosen by the program: direction, node, kind); ``Histogram`` is the Python side.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

HIST_C = r"""
struct hist_key {
    u32 group;
    u32 slot;
};

static __always_inline u32 hist_slot(u64 v) {
    if (v < 8)
        return (u32)v;
    u32 k = bpf_log2l(v) - 1;   /* BCC's bpf_log2l(v) is floor(log2 v) + 1 */
    return (k << 3) | (u32)((v >> (k - 3)) & 7);
}
"""


def slot_bounds(slot: int) -> tuple[int, int]:
    """[low, high) in the histogram's unit (ns) of one slot."""
    if slot < 8:
        return slot, slot + 1
    k, m = slot >> 3, slot & 7
    return (8 + m) << (k - 3), (9 + m) << (k - 3)


def slot_of(value: int) -> int:
    """The slot ``value`` falls into (the C code's ``hist_slot``), for tests and the benchmark."""
    if value < 8:
        return max(value, 0)
    k = value.bit_length() - 1
    return (k << 3) | ((value >> (k - 3)) & 7)


@dataclass
class Histogram:
    """Counts per slot; ``sum_ns`` is exact when the program keeps it (else 0)."""

    counts: dict[int, int] = field(default_factory=dict)
    sum_ns: int = 0

    @classmethod
    def from_values(cls, values_ns: Iterable[int]) -> Histogram:
        h = cls()
        for v in values_ns:
            h.add(v)
        return h

    def add(self, value_ns: int, count: int = 1) -> None:
        s = slot_of(value_ns)
        self.counts[s] = self.counts.get(s, 0) + count
        self.sum_ns += value_ns * count

    def add_slot(self, slot: int, count: int) -> None:
        self.counts[slot] = self.counts.get(slot, 0) + count

    def merge(self, other: Histogram) -> None:
        for s, c in other.counts.items():
            self.counts[s] = self.counts.get(s, 0) + c
        self.sum_ns += other.sum_ns

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def percentile(self, q: float) -> float:
        """Value (ns) at quantile ``q`` in 0..1, linearly interpolated inside its bucket; 0.0 when empty."""
        total = self.count
        if total == 0:
            return 0.0
        rank = q * total
        seen = 0
        for s in sorted(self.counts):
            c = self.counts[s]
            if seen + c >= rank:
                low, high = slot_bounds(s)
                return low + (high - low) * max(rank - seen, 0) / c
            seen += c
        low, high = slot_bounds(max(self.counts))
        return float(high)

    def to_dict(self) -> dict:
        """Plain snapshot: count, mean/p50/p90/p99 in ns, and non-empty buckets as [low_ns, high_ns, count]."""
        n = self.count
        return {
            "count": n,
            "mean_ns": self.sum_ns / n if n and self.sum_ns else None,
            "p50_ns": self.percentile(0.50),
            "p90_ns": self.percentile(0.90),
            "p99_ns": self.percentile(0.99),
            "buckets": [[*slot_bounds(s), self.counts[s]] for s in sorted(self.counts)],
        }


def read_groups(table: Mapping) -> dict[int, Histogram]:
    """A BCC hash map keyed by ``struct hist_key`` → {group: Histogram}."""
    out: dict[int, Histogram] = {}
    for k, v in table.items():
        out.setdefault(k.group, Histogram()).add_slot(k.slot, v.value)
    return out
