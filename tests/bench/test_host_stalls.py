"""bench/host_stalls.py: gaps in a clock-reading loop counted as the host's stalls, and the share of calls they hit."""

import math

import pytest

from bench.host_stalls import expected_hit_share, probe_host_stalls


def scripted_clock(steps_ns: list[int]):
    """A clock advancing by each step in turn (then by 100 ns a read)."""
    now = [0]
    steps = iter(steps_ns)

    def clock() -> int:
        now[0] += next(steps, 100)
        return now[0]

    return clock


def test_only_gaps_above_the_threshold_count_as_stalls():
    # reads 100 ns apart, with a 20 µs and a 40 µs gap, and a 4 µs one under the 5 µs threshold; 1 ms in all
    steps = [100] * 10 + [20_000] + [100] * 10 + [4_000] + [100] * 10 + [40_000]
    result = probe_host_stalls(duration_s=0.001, threshold_us=5.0, clock=scripted_clock(steps))
    assert result["num_stalls"] == 2
    assert result["stall_max_us"] == 40.0
    assert result["stalled_share"] == pytest.approx(60_000 / (result["duration_s"] * 1e9))
    assert result["stalls_per_ms"] == pytest.approx(2 / (result["duration_s"] * 1e3))
    assert result["loop_read_ns"] < 200  # the 4 µs gap is a slow read, not a stall


def test_a_quiet_host_reports_no_stall():
    result = probe_host_stalls(duration_s=0.0005, clock=scripted_clock([]))
    assert result["num_stalls"] == 0
    assert result["stalled_share"] == 0.0 and result["stall_p99_us"] == 0.0


def test_the_share_of_calls_hit_is_poisson():
    assert expected_hit_share(0.0, 25.0) == 0.0
    assert expected_hit_share(1.0, 25.0) == pytest.approx(1 - math.exp(-0.025))
    # a longer call is hit more often
    assert expected_hit_share(0.5, 10.0) < expected_hit_share(0.5, 30.0) < 1.0
