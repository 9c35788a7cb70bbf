"""The log-linear histogram's slots (the C side computes the same slot) and its percentiles."""

from __future__ import annotations

import random

from observe.ebpf.histogram import Histogram, slot_bounds, slot_of


def test_every_value_falls_inside_its_slot():
    rng = random.Random(0)
    values = list(range(0, 4096)) + [rng.randrange(1, 1 << 40) for _ in range(10_000)]
    for v in values:
        low, high = slot_bounds(slot_of(v))
        assert low <= v < high
        assert high - low <= max(1, low // 8)  # ≤ 12.5 % wide


def test_percentiles_within_a_bucket_of_the_exact_ones():
    rng = random.Random(1)
    values = sorted(int(rng.lognormvariate(11, 0.6)) for _ in range(20_000))  # ~60 µs, in ns
    h = Histogram.from_values(values)
    assert h.count == len(values)
    assert h.to_dict()["mean_ns"] == sum(values) / len(values)
    for q in (0.5, 0.9, 0.99):
        exact = values[int(q * len(values)) - 1]
        assert abs(h.percentile(q) - exact) <= exact / 8


def test_empty_histogram():
    assert Histogram().to_dict() == {
        "count": 0,
        "mean_ns": None,
        "p50_ns": 0.0,
        "p90_ns": 0.0,
        "p99_ns": 0.0,
        "buckets": [],
    }
