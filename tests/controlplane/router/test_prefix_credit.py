"""hardware_aware's prefix credit on hand-made states where only the credit decides: a holder that wins
through a lifted penalty (its cached prefix brings it under the TTFT SLO, or within its KV room), and exact
ties after the credit (the first node in snapshot order wins, as ``argmin`` over corrected costs would).
Figures are dyadic (a prefill rate of 1024 tok/s) so the tied costs are equal floats. Each case is checked
against the old decision (bench/hardware_aware_baseline.py) and the expected node."""

from __future__ import annotations

import pytest

from bench.hardware_aware_baseline import HardwareAwareBaseline
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig

SHARED = tuple(range(100, 130))  # 30 blocks of 16 tokens: 480 tokens cached on the holder
PROMPT = SHARED + tuple(range(900, 934))  # 64 blocks: 1024 prompt tokens
QUIET = dict(tpot_weight=0.0, slo_ttft_miss_penalty_s=0.0, slo_tpot_miss_penalty_s=0.0, kv_full_penalty_s=0.0)
CASES = {
    # A under the TTFT SLO (1.90625 s); B over it (2.25 s + 10 s) unless its 480 cached tokens count (1.78125 s)
    "ttft_penalty_lifted": (
        RouterConfig(tpot_weight=0.0, kv_full_penalty_s=0.0, slo_ttft_s=2.0),
        dict(queued_prefill_tokens=928),
        dict(queued_prefill_tokens=1280),
        "b",
        "a",
    ),
    # B short of KV room for the whole prompt (704 < 1024 tokens; + 30 s), not for its uncached 544 tokens
    "kv_penalty_lifted": (
        RouterConfig(tpot_weight=0.0, slo_ttft_miss_penalty_s=0.0, kv_reserve_output_tokens=0),
        dict(queued_prefill_tokens=512),
        dict(queued_prefill_tokens=256, num_free_device_blocks=60),
        "b",
        "a",
    ),
    # B (the holder) corrected to exactly A's cost: A, first in snapshot order
    "tie_holder_second": (
        RouterConfig(**QUIET),
        dict(queued_prefill_tokens=100),
        dict(queued_prefill_tokens=580),
        "a",
        "a",
    ),
    # A (the holder) corrected to exactly B's cost, B the least before the credit: A, first in snapshot order
    "tie_holder_first": (
        RouterConfig(**QUIET),
        dict(queued_prefill_tokens=580),
        dict(queued_prefill_tokens=100),
        "a",
        "b",
    ),
}  # name: (config, A's fields, B's fields, the choice, the choice with nothing cached)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_prefix_credit_decides_exactly_as_the_old_decision(case, make_node_view):
    config, a_fields, b_fields, expected, expected_uncached = CASES[case]
    holder = "a" if case == "tie_holder_first" else "b"
    a = make_node_view("a", prefill_tok_per_s=1024.0, **a_fields)
    b = make_node_view("b", prefill_tok_per_s=1024.0, **b_fields)
    snapshot = ClusterSnapshot(0.0, (a, b))
    request = RouteRequest("r", "m", len(PROMPT) * 16, 1, PROMPT)
    for policy in (fast := HardwareAwarePolicy(config), old := HardwareAwareBaseline(config)):
        policy.on_routed(RouteRequest("earlier", "m", len(SHARED) * 16, 1, SHARED), holder)
    assert fast.choose(request, snapshot) == old.choose(request, snapshot) == expected
    unshared = RouteRequest("r2", "m", len(PROMPT) * 16, 1, tuple(range(5000, 5064)))  # nothing cached
    assert fast.choose(unshared, snapshot) == old.choose(unshared, snapshot) == expected_uncached
