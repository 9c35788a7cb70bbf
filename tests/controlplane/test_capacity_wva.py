"""llm-d WVA's saturation analyzer (controlplane/capacity_wva.py) on hand-made replicas, against its published
rule (docs/saturation-analyzer.md)."""

from __future__ import annotations

from controlplane.capacity_wva import WvaReplica, wva_targets

COSTS = {"a100": 20.0, "h100": 15.0, "l4": 5.0}.__getitem__
EQUAL = lambda variant: 10.0  # noqa: E731  (the CRD's default cost)


def r(variant: str, kv: float, queue: int = 0) -> WvaReplica:
    return WvaReplica(variant, kv, queue)


def test_all_saturated_scales_the_cheapest_variant_up_by_one():
    replicas = [r("a100", 0.85, 6), r("h100", 0.9, 7), r("l4", 0.95, 5)]
    assert wva_targets(replicas, COSTS) == {"a100": 1, "h100": 1, "l4": 2}


def test_low_spare_kv_scales_up_and_equal_costs_break_ties_by_name():
    # non-saturated spare: 0.8 - 0.75 = 0.05 < 0.1
    replicas = [r("l4", 0.75), r("h100", 0.75)]
    assert wva_targets(replicas, EQUAL) == {"h100": 2, "l4": 1}


def test_low_spare_queue_scales_up():
    replicas = [r("l4", 0.1, 3), r("l4", 0.1, 2)]  # spare queue (2 + 3) / 2 = 2.5 < 3
    assert wva_targets(replicas, COSTS) == {"l4": 3}


def test_a_safe_scale_down_takes_one_off_the_dearest_variant():
    # 4 replicas at kv 0.1: spread over 3, 0.8 - 0.4 / 3 = 0.67 >= 0.1, and queue 5 - 0 >= 3
    replicas = [r("a100", 0.1), r("a100", 0.1), r("h100", 0.1), r("l4", 0.1)]
    assert wva_targets(replicas, COSTS) == {"a100": 1, "h100": 1, "l4": 1}
    assert wva_targets(replicas, EQUAL) == {"a100": 2, "h100": 1, "l4": 1}  # ties: the last name; never below 1


def test_an_unsafe_scale_down_keeps_every_variant():
    # spread over one fewer: 0.8 - (0.5 + 0.5 + 0.5) / 2 = 0.05 < 0.1
    replicas = [r("l4", 0.5), r("l4", 0.5), r("h100", 0.5)]
    assert wva_targets(replicas, COSTS) == {"h100": 1, "l4": 2}


def test_one_non_saturated_replica_never_scales_down():
    replicas = [r("l4", 0.1), r("h100", 0.95, 0)]  # the H100 saturated: only one replica has room
    assert wva_targets(replicas, COSTS) == {"h100": 1, "l4": 1}


def test_every_replica_counts_the_same_whatever_its_gpu():
    """The anchor's blind spot on a mismatched fleet: an idle T4 offsets a saturated H100 one for one."""
    replicas = [r("h100", 0.95, 9), r("t4", 0.0), r("t4", 0.0), r("t4", 0.0)]
    # non-saturated: three T4s, spare kv 0.8, spare queue 5; one fewer: still fine, so it sheds the dearest
    assert wva_targets(replicas, {"h100": 15.0, "t4": 2.0}.__getitem__) == {"h100": 1, "t4": 3}
    assert wva_targets(replicas, {"h100": 1.0, "t4": 2.0}.__getitem__) == {"h100": 1, "t4": 2}


def test_no_replicas_no_targets():
    assert wva_targets([], COSTS) == {}
