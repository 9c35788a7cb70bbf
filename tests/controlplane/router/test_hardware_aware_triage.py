"""hardware_aware's SLO triage, decode protection and bin packing on hand-made states: each decision checked against the
scalar formula (predict_cost_s), the old decision (bench/hardware_aware_baseline.py) and the expected node,
with the mechanism on and off (off: the node it moves the request away from wins). Every test runs on both
implementations of the decision: the numpy passes and the compiled kernel (cost_kernel.py; its Python source,
uncompiled, where numba is missing)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from bench.hardware_aware_baseline import HardwareAwareBaseline
from controlplane.router.policies.cost_kernel import CostKernel, least_cost_index
from controlplane.router.policies.cost_reference import lost_cause_fastest_rate, predict_cost_s, triage_spares_capable
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policies.node_predictions import (
    kv_headroom_tokens,
    predict_decoders_tpot_s,
    predict_tpot_s,
    predict_ttft_s,
    predict_wait_s,
)
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig

BASE = RouterConfig(  # each test turns on the one mechanism it checks
    default_model_params_b=1.0,
    hardware_aware_use_prefix=False,
    tpot_weight=0.0,
    slo_triage_penalty_s=0.0,
    slo_tpot_harm_penalty_s=0.0,
    slo_tpot_miss_penalty_s=0.0,
    slo_sacrifice_weight=0.0,
    slo_sacrifice_long_share=0.0,  # long prompts sacrificed: test_overload.py and test_cost_kernel.py
    slo_tpot_harm_count=False,  # decode protection's flat charge where a test turns it on (the count: test_harm_count)
    slo_ttft_late_weight=0.0,  # a miss's step penalty alone (lateness priced: test_ttft_lateness.py)
)


@pytest.fixture(params=["numpy", "kernel"], autouse=True)
def implementation(request, monkeypatch):
    """Every HardwareAwarePolicy these tests build decides on the numpy path, or on the kernel."""
    kernel = request.param == "kernel"
    real_init = HardwareAwarePolicy.__init__

    def init(self, config, use_kernel=True):
        real_init(self, config, use_kernel=kernel)
        if kernel and self.kernel_name == "numpy":  # no numba: the kernel's source, run by CPython
            self._kernel = CostKernel(config, least_cost_index)
            self._kernel_overload = CostKernel(self._overload_config, least_cost_index)  # overload mode's
            self.choose = self._choose_compiled
        assert ("_kernel" in vars(self)) == kernel

    monkeypatch.setattr(HardwareAwarePolicy, "__init__", init)
    return request.param


def _decide(config: RouterConfig, request: RouteRequest, *nodes) -> str:
    """The fast policy's choice, checked equal to the old decision's and to the least scalar cost."""
    snapshot = ClusterSnapshot(0.0, tuple(nodes))
    policy = HardwareAwarePolicy(config)
    chosen = policy.choose(request, snapshot)
    assert chosen == HardwareAwareBaseline(config).choose(request, snapshot)
    spare = triage_spares_capable(nodes, request.num_prompt_tokens, config, config.slo_ttft_s)
    long_ok = policy._long_ok  # the long-prompt gate's answer (RouterConfig.slo_sacrifice_long_vs_late)
    lost = lost_cause_fastest_rate(nodes, request, config, config.slo_ttft_s, long_ok)
    costs = {v.node_id: predict_cost_s(v, request, config, 0, spare, lost, long_ok) for v in nodes}
    assert costs[chosen] == pytest.approx(min(costs.values()), rel=1e-9)
    return chosen


def test_a_request_that_misses_everywhere_goes_to_the_least_late_node_not_to_one_within_the_slo(
    make_node_view, make_route_request
):
    config = replace(BASE, slo_triage_penalty_s=5.0)
    # H100s measured at 10k tok/s: "fresh" waits 0.8 s (still meets the 1 s target for prompts under 2k
    # tokens), "late" waits 2 s, "later" 3 s
    fresh = make_node_view("fresh", "h100-sxm", prefill_tok_per_s=10_000.0, queued_prefill_tokens=8_000)
    late = make_node_view("late", "h100-sxm", prefill_tok_per_s=10_000.0, queued_prefill_tokens=20_000)
    later = make_node_view("later", "h100-sxm", prefill_tok_per_s=10_000.0, queued_prefill_tokens=30_000)
    assert predict_wait_s(fresh, config) <= config.slo_ttft_s < predict_wait_s(late, config)
    hopeless = make_route_request(num_prompt_tokens=4_000, max_tokens=16)  # 0.4 s of prefill: misses on all
    assert all(predict_ttft_s(v, 4_000, config) > config.slo_ttft_s for v in (fresh, late, later))
    assert _decide(config, hopeless, later, fresh, late) == "late"
    assert _decide(replace(config, slo_triage_penalty_s=0.0), hopeless, later, fresh, late) == "fresh"
    # a request the fresh node still serves within the SLO goes there: triage only moves the hopeless
    short = make_route_request(num_prompt_tokens=1_000, max_tokens=16)
    assert predict_ttft_s(fresh, 1_000, config) <= config.slo_ttft_s
    assert _decide(config, short, later, fresh, late) == "fresh"
    # with every node still within the SLO for others, the hopeless request takes the least TTFT as before
    slow = make_node_view("slow", "l4", prefill_tok_per_s=4_000.0)
    assert _decide(config, make_route_request(num_prompt_tokens=7_000), fresh, slow) == "fresh"


def test_triage_sparing_the_capable_sends_a_long_hopeless_prompt_to_a_node_that_could_never_meet_it(
    make_node_view, make_route_request
):
    """The Mooncake case: only the H100s prefill a 12k-token prompt within the 1 s target; one is late, one
    still within it for others. By wait, the hopeless prompt goes to the late H100 (which then stays late for
    the long prompts only it can serve); sparing the capable nodes, to the idle L4, which never could."""
    config = replace(BASE, slo_triage_penalty_s=5.0, slo_triage_spare_capable_below=0.5)
    room = dict(max_model_len=32_768)
    fresh = make_node_view("fresh", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=24_000, **room)
    late = make_node_view("late", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=45_000, **room)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, **room)
    l4s = (l4, replace(l4, node_id="l4b", queued_prefill_tokens=4_000), replace(l4, node_id="l4c", num_inflight=1))
    hopeless = make_route_request(num_prompt_tokens=12_000, max_tokens=16)  # 0.4 s on an H100, 3 s on an L4
    assert all(predict_ttft_s(v, 12_000, config) > config.slo_ttft_s for v in (fresh, late, l4))
    assert predict_wait_s(fresh, config) <= config.slo_ttft_s < predict_wait_s(late, config)
    assert triage_spares_capable((fresh, late, *l4s), 12_000, config, config.slo_ttft_s)  # 2 of 5 < 0.5
    assert _decide(config, hopeless, fresh, late, *l4s) == "l4"
    assert _decide(replace(config, slo_triage_spare_capable_below=0.0), hopeless, fresh, late, *l4s) == "late"
    # 2 of 3 nodes could: not scarce under 0.5 (the rule by wait), scarce under 1
    assert _decide(config, hopeless, fresh, late, l4) == "late"
    assert _decide(replace(config, slo_triage_spare_capable_below=1.0), hopeless, fresh, late, l4) == "l4"
    # every node could serve it in time when empty (no L4): the rule by wait, the late H100
    assert not triage_spares_capable((fresh, late), 12_000, config, config.slo_ttft_s)
    assert _decide(config, hopeless, fresh, late) == "late"
    # a prompt that meets the SLO somewhere goes where it is quickest, sparing or not (the L4: 0.75 s)
    short = make_route_request(num_prompt_tokens=3_000, max_tokens=16)
    off = replace(config, slo_triage_spare_capable_below=0.0)
    assert _decide(config, short, fresh, late, *l4s) == _decide(off, short, fresh, late, *l4s) == "l4"


def test_tpot_excess_only_prices_no_decode_speed_beyond_the_tpot_target(make_node_view, make_route_request):
    """An H100 decodes 4x faster than an L4, both within the 100 ms TPOT target: priced whole, the TPOT term
    (0.1 x 256 tokens x TPOT) keeps the request on the H100 though the idle L4 gives it its first token sooner;
    counting only the excess over the target, the L4 takes it, until its TPOT goes over the target."""
    config = replace(BASE, tpot_weight=0.1, tpot_excess_only=True)
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=9_000,
                          decode_step_ms=10.0)  # fmt: skip
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, decode_step_ms=40.0)
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=256)
    assert predict_ttft_s(l4, 1_000, config) < predict_ttft_s(h100, 1_000, config)
    assert predict_tpot_s(h100, config, 256) < predict_tpot_s(l4, config, 256) <= config.slo_tpot_s
    assert _decide(config, request, h100, l4) == "l4"
    assert _decide(replace(config, tpot_excess_only=False), request, h100, l4) == "h100"
    slow = replace(l4, decode_step_ms=120.0)  # over the target by 20 ms: +0.51 s
    assert predict_tpot_s(slow, config, 256) > config.slo_tpot_s
    assert _decide(config, request, h100, slow) == "h100"


def test_a_prompt_that_would_push_the_running_decodes_over_the_tpot_target_goes_where_none_decode(
    make_node_view, make_route_request
):
    config = replace(BASE, slo_tpot_harm_penalty_s=3.0)
    # two L4s at 4k tok/s; "busy" decodes 4 requests (60 ms steps), "quiet" decodes none but has 1k tokens queued
    busy = make_node_view("busy", "l4", prefill_tok_per_s=4_000.0, decode_batch_size=4, decode_step_ms=60.0)
    quiet = make_node_view("quiet", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=1_000)
    long = make_route_request(num_prompt_tokens=2_000, max_tokens=13)  # 0.5 s of chunks over 12 steps
    assert predict_ttft_s(busy, 2_000, config) < predict_ttft_s(quiet, 2_000, config) <= config.slo_ttft_s
    assert predict_decoders_tpot_s(busy, 2_000, config, 13) > config.slo_tpot_s
    assert _decide(config, long, busy, quiet) == "quiet"
    assert _decide(replace(config, slo_tpot_harm_penalty_s=0.0), long, busy, quiet) == "busy"
    # a short prompt leaves the decodes within the target: the quicker node wins again
    short = make_route_request(num_prompt_tokens=200, max_tokens=13)
    assert predict_decoders_tpot_s(busy, 200, config, 13) <= config.slo_tpot_s
    assert _decide(config, short, busy, quiet) == "busy"
    # no decodes on the node: nothing to protect, however long the prompt
    assert _decide(config, long, replace(busy, decode_batch_size=0, decode_step_ms=0.0), quiet) == "busy"


SHARED = tuple(range(100, 130))  # 30 blocks of 16 tokens: 480 tokens cached on the holder "b"
PROMPT = SHARED + tuple(range(900, 934))  # 64 blocks: 1024 prompt tokens, 1 s at 1024 tok/s
CREDIT_CASES = {
    # A meets the SLO (waits 0.91 s: 1.91 s); B waits 1.25 s (within the SLO for others): 2.25 s misses there
    # (+10 s, +5 s triage) unless its 480 cached tokens count (1.78 s): both penalties must be lifted
    "triage_lifted": (
        RouterConfig(
            tpot_weight=0.0,
            kv_full_penalty_s=0.0,
            slo_ttft_s=2.0,
            slo_triage_penalty_s=5.0,
            slo_tpot_harm_penalty_s=0.0,
        ),
        dict(queued_prefill_tokens=928),
        dict(queued_prefill_tokens=1280),
        1,
    ),
    # B decodes 4 requests: 1 s of chunks over 4 steps push them over 0.2 s (+3 s), 0.53 s do not
    "harm_lifted": (
        RouterConfig(
            tpot_weight=0.0,
            kv_full_penalty_s=0.0,
            slo_ttft_s=2.0,
            slo_tpot_s=0.2,
            slo_tpot_harm_penalty_s=3.0,
            slo_tpot_harm_count=False,  # the flat charge (the count's lift: test_harm_count.py)
            slo_triage_penalty_s=0.0,
        ),
        dict(queued_prefill_tokens=512),
        dict(decode_batch_size=4),
        5,
    ),
}  # name: (config, A's fields, B's fields, max_tokens)


@pytest.mark.parametrize("case", sorted(CREDIT_CASES))
def test_a_cached_prefix_lifts_the_triage_and_harm_penalties(case, make_node_view):
    config, a_fields, b_fields, max_tokens = CREDIT_CASES[case]
    a = make_node_view("a", prefill_tok_per_s=1024.0, **a_fields)
    b = make_node_view("b", prefill_tok_per_s=1024.0, **b_fields)
    snapshot = ClusterSnapshot(0.0, (a, b))
    request = RouteRequest("r", "m", len(PROMPT) * 16, max_tokens, PROMPT)
    for policy in (fast := HardwareAwarePolicy(config), old := HardwareAwareBaseline(config)):
        policy.on_routed(RouteRequest("earlier", "m", len(SHARED) * 16, 1, SHARED), "b")
    assert fast.choose(request, snapshot) == old.choose(request, snapshot) == "b"
    assert (
        predict_cost_s(b, request, config, 480)
        < predict_cost_s(a, request, config)
        < predict_cost_s(b, request, config)
    )
    unshared = RouteRequest("r2", "m", len(PROMPT) * 16, max_tokens, tuple(range(5000, 5064)))  # nothing cached
    assert fast.choose(unshared, snapshot) == old.choose(unshared, snapshot) == "a"


def test_bin_packing_sends_a_short_prompt_to_the_least_capable_node_that_meets_the_ttft_target(
    make_node_view, make_route_request
):
    """Idle H100 (30k tok/s), L4 (4k) and T4 (2k): a 1.5k-token prompt meets the 1 s target on all three and
    goes to the quickest, the H100, without bin packing; at weight 2 to the T4 (0.75 s), the slowest that meets
    it; a 6k-token prompt, which only the H100 serves in time, still goes there."""
    config = replace(BASE, slo_pack_weight=2.0)
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0)
    t4 = make_node_view("t4", "t4", prefill_tok_per_s=2_000.0)
    short = make_route_request(num_prompt_tokens=1_500, max_tokens=16)
    assert all(predict_ttft_s(v, 1_500, config) <= config.slo_ttft_s for v in (h100, l4, t4))
    assert _decide(replace(config, slo_pack_weight=0.0), short, h100, l4, t4) == "h100"
    assert _decide(config, short, h100, l4, t4) == "t4"
    assert _decide(config, short, h100, l4) == "l4"
    long = make_route_request(num_prompt_tokens=6_000, max_tokens=16)  # 0.2 s on the H100, 1.5 s on the L4
    assert _decide(config, long, h100, l4, t4) == "h100"
    # weight 1: prefill speed no longer counts among the nodes that meet the target, the wait does: the H100
    # waiting 0.1 s loses to the idle L4, which it beats without bin packing
    busy = replace(h100, queued_prefill_tokens=3_000)
    assert _decide(replace(config, slo_pack_weight=1.0), short, busy, l4) == "l4"
    assert _decide(replace(config, slo_pack_weight=0.0), short, busy, l4) == "h100"
    # the charge is at most the miss penalty (0.2 s here): the H100's 0.05 + 0.2 beats the L4's 0.375 + 0.2
    assert _decide(replace(config, slo_ttft_miss_penalty_s=0.2), short, h100, l4) == "h100"


def test_bin_packing_gated_by_tpot_packs_only_onto_nodes_that_meet_both_targets(make_node_view, make_route_request):
    """A 1.5k-token prompt, 16 outputs: the idle H100 (30k tok/s) meets both targets (TTFT 0.05 s); the L4
    (4k tok/s) decoding 4 sequences at 95 ms a step meets TTFT (0.375 + 0.095 s) but not TPOT (its step with this
    request added: 0.117 s > 0.1). At weight 2 ungated the L4 wins (0.47 + 2 * 0.625 = 1.72 < 0.05 + 2 * 0.95);
    gated it is charged as if it prefilled in no time (0.47 + 2 * 1) and the H100 wins; an idle T4 (2k tok/s)
    that meets both still takes it from the H100 (0.75 + 2 * 0.25): the gate removes only the TPOT misser."""
    config = replace(BASE, slo_pack_weight=2.0, slo_pack_needs_tpot=True)
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, decode_step_ms=95.0, decode_batch_size=4,
                        num_running=4)  # fmt: skip
    t4 = make_node_view("t4", "t4", prefill_tok_per_s=2_000.0)
    short = make_route_request(num_prompt_tokens=1_500, max_tokens=16)
    assert all(predict_ttft_s(v, 1_500, config) <= config.slo_ttft_s for v in (h100, l4, t4))
    assert predict_tpot_s(l4, config, 16) > config.slo_tpot_s
    assert predict_tpot_s(h100, config, 16) <= config.slo_tpot_s and predict_tpot_s(t4, config, 16) <= config.slo_tpot_s
    assert _decide(replace(config, slo_pack_needs_tpot=False), short, h100, l4) == "l4"
    assert _decide(config, short, h100, l4) == "h100"
    assert _decide(replace(config, slo_pack_weight=0.0), short, h100, l4) == "h100"  # off: the quickest
    assert _decide(config, short, h100, l4, t4) == "t4"
    # the gated charge is w * slo_ttft_s, capped at the miss penalty like any packing charge
    gated = predict_cost_s(l4, short, config) - predict_cost_s(l4, short, replace(config, slo_pack_weight=0.0))
    assert gated == pytest.approx(2.0 * config.slo_ttft_s)


def test_bin_packing_charges_a_prefix_holder_that_meets_the_target_only_thanks_to_its_cache(make_node_view):
    """Holder "b" (1024 tok/s) waits 1.1 s: the 1024-token prompt misses the 2 s target there (2.1 s) unless its 480
    cached tokens count (1.63 s), and then it has 1 s of slack: charged 2 s at weight 2 (3.63 s). "a" (600 tok/s,
    idle) meets it in 1.71 s with 0.29 s of slack (2.29 s). Without bin packing the holder wins (1.63 < 1.71)."""
    config = replace(BASE, hardware_aware_use_prefix=True, slo_ttft_s=2.0, kv_full_penalty_s=0.0,
                     slo_pack_weight=2.0)  # fmt: skip
    a = make_node_view("a", prefill_tok_per_s=600.0)
    b = make_node_view("b", prefill_tok_per_s=1024.0, queued_prefill_tokens=1126)
    snapshot = ClusterSnapshot(0.0, (a, b))
    request = RouteRequest("r", "m", len(PROMPT) * 16, 1, PROMPT)
    for knobs, expected in ((config, "a"), (replace(config, slo_pack_weight=0.0), "b")):
        fast, old = HardwareAwarePolicy(knobs), HardwareAwareBaseline(knobs)
        for policy in (fast, old):
            policy.on_routed(RouteRequest("earlier", "m", len(SHARED) * 16, 1, SHARED), "b")
        assert fast.choose(request, snapshot) == old.choose(request, snapshot) == expected
    assert predict_ttft_s(b, len(PROMPT) * 16, config) > config.slo_ttft_s >= predict_ttft_s(b, 1024, config, 480)
    assert predict_cost_s(a, request, config) < predict_cost_s(b, request, config, 480)


@pytest.mark.parametrize(("gated", "expected"), [(False, "b"), (True, "a")])
def test_the_prefix_credit_charges_a_holder_that_misses_tpot_the_gated_packing_charge(make_node_view, gated, expected):
    """Holder "b" as above (TTFT 1.63 s with its 480 cached tokens, 1 s of slack) decodes one output with 1.1 s of
    backlog ahead: TPOT 1.1 s, over the 0.1 s target. Ungated it pays 2 x 1 s (3.63 s) and beats the idle
    10240 tok/s "a" (0.1 s + 2 x 1.9 s = 3.9 s); gated (slo_pack_needs_tpot) the credit charges it 2 x 2 s
    (5.63 s), as ``choose`` charges a TPOT misser, and "a" wins, on every path."""
    config = replace(BASE, hardware_aware_use_prefix=True, slo_ttft_s=2.0, kv_full_penalty_s=0.0,
                     slo_pack_weight=2.0, slo_pack_needs_tpot=gated)  # fmt: skip
    a = make_node_view("a", prefill_tok_per_s=10_240.0)
    b = make_node_view("b", prefill_tok_per_s=1024.0, queued_prefill_tokens=1126)
    snapshot = ClusterSnapshot(0.0, (a, b))
    request = RouteRequest("r", "m", len(PROMPT) * 16, 1, PROMPT)
    assert predict_tpot_s(b, config, 1) > config.slo_tpot_s >= predict_tpot_s(a, config, 1)
    fast, old = HardwareAwarePolicy(config), HardwareAwareBaseline(config)
    for policy in (fast, old):
        policy.on_routed(RouteRequest("earlier", "m", len(SHARED) * 16, 1, SHARED), "b")
    assert fast.choose(request, snapshot) == old.choose(request, snapshot) == expected
    costs = {v.node_id: predict_cost_s(v, request, config, 480 if v is b else 0) for v in (a, b)}
    assert min(costs, key=costs.get) == expected


def test_sacrifice_sends_a_lost_cause_to_the_least_capable_node_that_can_hold_it(make_node_view, make_route_request):
    """The code-trace case: every node is late for a 4k-token prompt. Triage alone sends it to the fastest late
    node (least TTFT: the H100, which then stays late); sacrifice to the slowest node that can take it (the L4):
    the T4 is short of KV room (the KV penalty still applies), the other T4 cannot take an 8k prompt at all."""
    config = replace(BASE, slo_triage_penalty_s=5.0, slo_sacrifice_weight=20.0)
    off = replace(config, slo_sacrifice_weight=0.0)
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=45_000)  # 1.5 s late
    a100 = make_node_view("a100", "a100-40gb", prefill_tok_per_s=10_000.0, queued_prefill_tokens=15_000)  # 1.5 s
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=6_000)  # 1.5 s
    t4 = make_node_view("t4", "t4", prefill_tok_per_s=2_000.0, queued_prefill_tokens=2_200, num_free_device_blocks=100)
    small_t4 = make_node_view("small_t4", "t4", prefill_tok_per_s=2_000.0, max_model_len=2048)
    nodes = (h100, a100, t4, small_t4, l4)
    hopeless = make_route_request(num_prompt_tokens=4_000, max_tokens=16)  # H100 1.63 s, L4 2.5 s, T4 3.1 s
    assert all(predict_ttft_s(v, 4_000, config) > config.slo_ttft_s for v in nodes)
    assert lost_cause_fastest_rate(nodes, hopeless, config, config.slo_ttft_s) == 30_000.0
    assert lost_cause_fastest_rate(nodes, hopeless, off, config.slo_ttft_s) == 0.0  # off: never a lost cause
    assert _decide(off, hopeless, *nodes) == "h100"
    assert _decide(config, hopeless, *nodes) == "l4"
    assert _decide(replace(config, kv_full_penalty_s=0.0), hopeless, *nodes) == "t4"  # with KV room: the slowest
    # at a small weight the H100's lead in TTFT outweighs the charge (0.2 s there, 0.03 s on the L4)
    assert _decide(replace(config, slo_sacrifice_weight=0.2), hopeless, *nodes) == "h100"
    # one node still meets the target (an A100 within it: 0.9 s): not a lost cause, nothing charged, same choice
    fresh = make_node_view("fresh", "a100-40gb", prefill_tok_per_s=10_000.0, queued_prefill_tokens=5_000)
    assert lost_cause_fastest_rate((*nodes, fresh), hopeless, config, config.slo_ttft_s) == 0.0
    assert _decide(config, hopeless, *nodes, fresh) == _decide(off, hopeless, *nodes, fresh) == "fresh"
    # the same without it meeting the target for this prompt, only for shorter ones: a lost cause again
    fresh_late = replace(fresh, queued_prefill_tokens=7_000)  # 1.1 s for this prompt
    assert _decide(config, hopeless, *nodes, fresh_late) == "l4"
    assert _decide(off, hopeless, *nodes, fresh_late) == "h100"  # triage charges fresh_late (wait 0.7 s)


def test_bounded_sacrifice_sends_a_lost_cause_to_the_least_capable_node_within_the_bound(
    make_node_view, make_route_request
):
    """The code-trace case again (a 4k-token prompt late everywhere: H100 1.63 s, A100 1.9 s, L4 2.5 s, T4 3.1 s),
    sacrifice bounded by slo_sacrifice_max_ttft_s: a node whose TTFT is above the bound pays the fastest's charge,
    so the lost cause goes to the least capable node within the bound; with none within, to off's choice."""
    config = replace(BASE, slo_triage_penalty_s=5.0, slo_sacrifice_weight=20.0, kv_full_penalty_s=0.0)
    off = replace(config, slo_sacrifice_weight=0.0)
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=45_000)
    a100 = make_node_view("a100", "a100-40gb", prefill_tok_per_s=10_000.0, queued_prefill_tokens=15_000)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=6_000)
    t4 = make_node_view("t4", "t4", prefill_tok_per_s=2_000.0, queued_prefill_tokens=2_200)
    nodes = (h100, a100, t4, l4)
    hopeless = make_route_request(num_prompt_tokens=4_000, max_tokens=16)
    assert [round(predict_ttft_s(v, 4_000, config), 3) for v in nodes] == [1.633, 1.9, 3.1, 2.5]
    assert _decide(config, hopeless, *nodes) == "t4"  # unbounded: the least capable
    for bound_s, expected in ((3.5, "t4"), (3.0, "l4"), (2.0, "a100"), (1.7, "h100"), (1.5, "h100")):
        bounded = replace(config, slo_sacrifice_max_ttft_s=bound_s)
        assert _decide(bounded, hopeless, *nodes) == expected, bound_s
    # none within the bound: every node pays the fastest's charge (20 x 1 s), the same; off's choice
    none_within = replace(config, slo_sacrifice_max_ttft_s=1.5)
    lost = lost_cause_fastest_rate(nodes, hopeless, none_within, none_within.slo_ttft_s)
    for v in nodes:
        charged = predict_cost_s(v, hopeless, none_within, 0, False, lost) - predict_cost_s(v, hopeless, off)
        assert charged == pytest.approx(20.0)
    assert _decide(off, hopeless, *nodes) == "h100"
    # off's choice is not always the fastest: with the H100 charged by triage (its queue within the target:
    # wait 0.9 s, TTFT 1.03 s) off sends the lost cause to the A100 (least late of the uncharged), and so does a
    # bound no node is within
    h100_short = replace(h100, queued_prefill_tokens=27_000)
    assert _decide(off, hopeless, h100_short, a100, t4, l4) == "a100"
    assert _decide(replace(config, slo_sacrifice_max_ttft_s=1.0), hopeless, h100_short, a100, t4, l4) == "a100"
    # an adapter to load (0.5 s, held by the T4 only) pushes the L4 beyond a 2.9 s bound: the T4 (3.1 s) too;
    # within it stay the H100 and A100 (2.13, 2.4 s): the A100
    adapter = make_route_request(num_prompt_tokens=4_000, max_tokens=16, lora_name="x")
    lora_config = replace(config, slo_sacrifice_max_ttft_s=2.9, lora_load_estimate_s=0.5)
    t4_holds = replace(t4, lora_resident=("x",))
    assert _decide(lora_config, adapter, h100, a100, t4_holds, l4) == "a100"
    assert _decide(replace(lora_config, slo_sacrifice_max_ttft_s=3.2), adapter, h100, a100, t4_holds, l4) == "t4"


def _zoo_tiers_behind(make_node_view) -> tuple:
    """The zoo's tiers by prefill rate over the H100's (A100 .32, L4 .12, TP-2 T4 .13), every node 1.5 s behind."""
    return (
        make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=45_000),
        make_node_view("a100", "a100-40gb", prefill_tok_per_s=9_500.0, queued_prefill_tokens=14_250),
        make_node_view("l4", "l4", prefill_tok_per_s=3_700.0, queued_prefill_tokens=5_550),
        make_node_view("t4", "t4", prefill_tok_per_s=3_900.0, queued_prefill_tokens=5_850),
    )


def test_tiered_sacrifice_sends_a_lost_cause_to_the_slowest_tier_never_to_an_a100(make_node_view, make_route_request):
    """The zoo's tiers by prefill rate over the H100's (A100 .32, L4 .12, TP-2 T4 .13), every node 1.5 s behind:
    a 4k-token prompt is a lost cause (TTFT: H100 1.63 s, A100 1.92 s, L4 2.58 s, T4 2.53 s). Unrestricted, a
    small weight sends it to the A100 (charged only 0.32 w: GRID_7's w=1/3); with slo_sacrifice_max_rate_ratio
    0.2 the A100 pays the H100's charge, w, and the lost cause goes to an L4 or T4, never to the A100; with a
    bound too, to the slow node within it, or with none within, to off's choice."""
    config = replace(BASE, kv_full_penalty_s=0.0)
    nodes = _zoo_tiers_behind(make_node_view)
    hopeless = make_route_request(num_prompt_tokens=4_000, max_tokens=16)
    assert [round(predict_ttft_s(v, 4_000, config), 3) for v in nodes] == [1.633, 1.921, 2.581, 2.526]
    assert _decide(config, hopeless, *nodes) == "h100"  # off: the least late
    for weight in (1.0, 3.0):  # unrestricted: the middle tier
        assert _decide(replace(config, slo_sacrifice_weight=weight), hopeless, *nodes) == "a100", weight
    for weight, expected in ((1.0, "h100"), (3.0, "t4"), (10.0, "l4"), (30.0, "l4")):
        tiered = replace(config, slo_sacrifice_weight=weight, slo_sacrifice_max_rate_ratio=0.2)
        assert _decide(tiered, hopeless, *nodes) == expected, weight
        # a ratio above the A100's .32 keeps its factor: unrestricted's choice
        wide = replace(tiered, slo_sacrifice_max_rate_ratio=0.4)
        assert _decide(wide, hopeless, *nodes) == _decide(
            replace(wide, slo_sacrifice_max_rate_ratio=0.0), hopeless, *nodes
        )
    tiered = replace(config, slo_sacrifice_weight=10.0, slo_sacrifice_max_rate_ratio=0.2)
    assert _decide(replace(tiered, slo_sacrifice_max_ttft_s=2.55), hopeless, *nodes) == "t4"  # the L4 beyond it
    assert _decide(replace(tiered, slo_sacrifice_max_ttft_s=2.5), hopeless, *nodes) == "h100"  # none: off's choice


def test_the_prefix_credit_lifts_sacrifice_from_a_holder_that_meets_the_target_thanks_to_its_cache(make_node_view):
    """A lost cause uncached (slow "a" 2 s, holder "b" 1.09 s, target 1 s), but "b" meets the target with its 480
    cached tokens (0.85 s): its charge (20 x 1 s, the fastest) goes with its miss penalty, and the skip bound counts
    it (without: 31.1 - 10.5 > "a"'s 2 + 10 + 20 x 0.25 = 17, "b" skipped). Nothing cached: "a", the sacrifice."""
    config = replace(BASE, hardware_aware_use_prefix=True, kv_full_penalty_s=0.0, slo_sacrifice_weight=20.0)
    a = make_node_view("a", prefill_tok_per_s=512.0)
    b = make_node_view("b", prefill_tok_per_s=2048.0, queued_prefill_tokens=1200)
    snapshot = ClusterSnapshot(0.0, (a, b))
    request = RouteRequest("r", "m", len(PROMPT) * 16, 1, PROMPT)
    unshared = RouteRequest("r2", "m", len(PROMPT) * 16, 1, tuple(range(5000, 5064)))  # nothing cached
    lost = lost_cause_fastest_rate((a, b), request, config, config.slo_ttft_s)
    assert lost == 2048.0 and predict_ttft_s(b, 1024, config, 480) <= config.slo_ttft_s
    assert predict_cost_s(b, request, config, 480, False, lost) < predict_cost_s(a, request, config, 0, False, lost)
    for knobs, expected in ((config, "a"), (replace(config, slo_sacrifice_weight=0.0), "b")):
        fast, old = HardwareAwarePolicy(knobs), HardwareAwareBaseline(knobs)
        for policy in (fast, old):
            policy.on_routed(RouteRequest("earlier", "m", len(SHARED) * 16, 1, SHARED), "b")
        assert fast.choose(request, snapshot) == old.choose(request, snapshot) == "b"
        assert fast.choose(unshared, snapshot) == old.choose(unshared, snapshot) == expected


@pytest.mark.parametrize(
    "name",
    [
        "slo_triage_penalty_s",
        "slo_tpot_harm_penalty_s",
        "slo_pack_weight",
        "slo_sacrifice_weight",
        "slo_sacrifice_max_ttft_s",
        "slo_sacrifice_max_rate_ratio",
    ],
)
def test_negative_penalties_are_refused(name):
    with pytest.raises(ValueError, match=name):
        RouterConfig(**{name: -1.0})


NAN, INF = float("nan"), float("inf")


@pytest.mark.parametrize(
    ("name", "value"),
    [(n, v) for n in ("slo_triage_penalty_s", "tpot_weight", "kv_full_penalty_s") for v in (NAN, INF)]
    + [("slo_ttft_s", NAN)],  # an infinite target is one nobody misses: allowed
)
def test_non_finite_knobs_are_refused(name, value):
    """A NaN or infinite cost term would make every cost NaN or inf (no node, or an arbitrary one): refused."""
    with pytest.raises(ValueError, match=name):
        RouterConfig(**{name: value})


def test_the_prefix_credit_lifts_only_a_penalty_charged_at_the_request_class_slo(make_node_view):
    """A class with a looser TTFT target than the router's is never charged the miss penalty, so a prefix
    holder's credit must not subtract it (it used to be lifted against the router's target: the holder won
    with a cost 10 s too low)."""
    config = replace(BASE, hardware_aware_use_prefix=True, slo_ttft_s=0.9, slo_ttft_miss_penalty_s=10.0,
                     kv_full_penalty_s=0.0)  # fmt: skip
    b = make_node_view("b", prefill_tok_per_s=1024.0, queued_prefill_tokens=256)  # 1.25 s, 0.78 s cached
    for a_queued, slo_ttft_s, expected in (
        (0, 2.0, "a"),  # "a" 0.5 s beats the holder's 0.78 s: nothing charged, nothing lifted
        (716, 0.8, "b"),  # "a" 0.85 s misses 0.8 (+10 s); the holder's cached 0.78 s meets it: lifted
    ):
        a = make_node_view("a", prefill_tok_per_s=2048.0, queued_prefill_tokens=a_queued)
        snapshot = ClusterSnapshot(0.0, (a, b))
        request = RouteRequest("r", "m", len(PROMPT) * 16, 1, PROMPT, slo_ttft_s=slo_ttft_s)
        fast, old = HardwareAwarePolicy(config), HardwareAwareBaseline(config)
        for policy in (fast, old):
            policy.on_routed(RouteRequest("earlier", "m", len(SHARED) * 16, 1, SHARED), "b")
        assert fast.choose(request, snapshot) == old.choose(request, snapshot) == expected


def test_by_default_a_lost_cause_is_sacrificed_to_a_slow_node_not_queued_on_the_fastest(
    make_node_view, make_route_request
):
    """The default (slo_sacrifice_weight 10, the twenty-seventh tuning grid's choice: bench/results/
    2026-12-04-sim-tune-27.json) on the tiers above, every other knob at its default: the lost cause leaves the H100
    (off's choice, the least late) for an L4/T4 (cost H100 1.63 + 0.63 + 10, A100 1.92 + 0.92 + 3.2, L4 2.58 + 1.58
    + 1.2, T4 2.53 + 1.53 + 1.3 s). At the tenth grid's weight 5, with lateness priced (weight 1, GRID_25's choice),
    it went to the A100, the least late of the tiers sacrifice made cheaper (H100 + 5, A100 + 1.6, L4 + 0.6, T4 +
    0.65 s); with lateness unpriced, to an L4/T4. A request that can still meet the target on the H100 stays there."""
    config = RouterConfig(default_model_params_b=1.0)
    assert config.slo_sacrifice_weight == 10.0 and config.slo_ttft_late_weight == 1.0
    nodes = _zoo_tiers_behind(make_node_view)
    hopeless = make_route_request(num_prompt_tokens=4_000, max_tokens=16)
    assert all(predict_ttft_s(v, 4_000, config) > config.slo_ttft_s for v in nodes)
    assert _decide(replace(config, slo_sacrifice_weight=0.0), hopeless, *nodes) == "h100"
    assert _decide(config, hopeless, *nodes) in ("l4", "t4")
    five = replace(config, slo_sacrifice_weight=5.0)
    assert _decide(replace(five, slo_ttft_late_weight=0.0), hopeless, *nodes) in ("l4", "t4")
    assert _decide(five, hopeless, *nodes) == "a100"
    fresh = make_node_view("fresh", "h100-sxm", prefill_tok_per_s=30_000.0)
    assert _decide(config, make_route_request(num_prompt_tokens=4_000, max_tokens=16), fresh, *nodes[1:]) == "fresh"


def test_by_default_a_node_short_of_kv_room_beats_one_predicted_to_miss_the_ttft_target(
    make_node_view, make_route_request
):
    """conv 80%'s eval diagnosis (bench/results/2026-12-02-miss-diag-conv80.json): with a 30 s KV charge a long prompt
    went to an H100 predicted late rather than to an A100 predicted in time whose KV headroom read short. The
    default, 3 s (the eleventh grid: bench/results/2026-12-02-sim-tune-11.json), sends it to the A100; a KV-short
    node still loses to one with room when both meet the target."""
    config = RouterConfig(default_model_params_b=1.0)
    assert config.kv_full_penalty_s == 3.0
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=30_000.0, queued_prefill_tokens=28_000)
    a100 = make_node_view("a100", "a100-40gb", prefill_tok_per_s=9_500.0, num_free_device_blocks=200)
    request = make_route_request(num_prompt_tokens=4_000, max_tokens=64)
    need = 4_000 + min(64, config.kv_reserve_output_tokens)
    assert predict_ttft_s(h100, 4_000, config) > config.slo_ttft_s >= predict_ttft_s(a100, 4_000, config)
    assert kv_headroom_tokens(a100, config) < need <= kv_headroom_tokens(h100, config)
    assert _decide(replace(config, kv_full_penalty_s=30.0), request, h100, a100) == "h100"
    assert _decide(config, request, h100, a100) == "a100"
    roomy = make_node_view("roomy", "a100-40gb", prefill_tok_per_s=9_500.0)
    assert _decide(config, request, a100, roomy) == "roomy"
