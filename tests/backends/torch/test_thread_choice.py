"""The thread-count chooser of the CPU decode kernel (backends/torch/thread_choice.py), on synthetic timings."""

from __future__ import annotations

import itertools

import pytest

from backends.torch.thread_choice import ThreadChooser, candidate_threads


def test_candidates():
    assert candidate_threads(1) == [1]
    assert candidate_threads(2) == [1, 2]
    assert candidate_threads(6) == [1, 2, 4, 6]
    assert candidate_threads(8) == [1, 2, 4, 8]


def _run(chooser, cost, steps, key="b1", max_threads=2):
    picks = []
    for _ in range(steps):
        t = chooser.pick(key, max_threads)
        picks.append(t)
        chooser.record(key, t, cost(t))
    return picks


def test_runs_on_the_faster_count_and_keeps_trying_the_other():
    chooser = ThreadChooser(explore_every=8, warmup=2)
    picks = _run(chooser, lambda t: {1: 0.022, 2: 0.020}[t], 84)
    assert chooser.best("b1") == 2
    assert picks[:4] == [1, 1, 2, 2]  # each measured twice first
    retries = [i for i, t in enumerate(picks) if t == 1][2:]
    assert len(retries) >= 9 and {b - a for a, b in itertools.pairwise(retries)} == {8}  # close: every 8th step


def test_follows_a_change_of_machine_load():
    chooser = ThreadChooser(explore_every=4, warmup=1)
    _run(chooser, lambda t: 0.02 if t == 2 else 0.03, 20)
    assert chooser.best("b1") == 2
    # another process takes a core: two threads stall at barriers
    picks = _run(chooser, lambda t: 0.2 if t == 2 else 0.03, 40)
    assert chooser.best("b1") == 1 and picks[-12:].count(1) >= 11  # 2 threads retried ever more rarely


def test_keys_are_independent_and_one_thread_needs_no_choice():
    chooser = ThreadChooser(warmup=1)
    _run(chooser, lambda t: 0.01 * t, 10, key="b1")
    _run(chooser, lambda t: 0.01 / t, 10, key="b4")
    assert chooser.best("b1") == 1 and chooser.best("b4") == 2
    assert chooser.pick("b9", 1) == 1 and chooser.best("b9") is None
    assert set(chooser.summary()) == {"b1", "b4"}


def test_bad_settings_rejected():
    with pytest.raises(ValueError):
        ThreadChooser(explore_every=1)
    with pytest.raises(ValueError):
        ThreadChooser(alpha=0.0)


def test_retries_of_a_much_slower_count_back_off():
    chooser = ThreadChooser(explore_every=4, warmup=1, max_backoff=8)
    picks = _run(chooser, lambda t: 1.0 if t == 2 else 0.03, 200)
    retries = [i for i, t in enumerate(picks) if t == 2][1:]  # after the warm-up sample
    gaps = [b - a for a, b in itertools.pairwise(retries)]
    assert gaps[:3] == [8, 16, 32] and set(gaps[3:]) == {32}  # doubling, up to 4 * 8 steps
