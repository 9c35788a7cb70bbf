"""RouterConfig.slo_tpot_lost_to_doomed (router/policies/tpot_lost.py): where every node is predicted to miss a
request's TPOT target and some node cannot meet it at any load, the request goes to the least-cost such node; on
both decision paths alike, and nowhere else."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.cells import CellsConfig, TrafficClass
from controlplane.router.policies import cost_kernel, tpot_lost
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policy import ClusterSnapshot, RouteRequest
from controlplane.router.router_config import RouterConfig
from tests.controlplane.router.test_tpot_floor_miss import CONFIG as FLOOR_TESTS_CONFIG

# an 8B model: the L4's one-sequence step ~71 ms (its floor), the H100's ~6 ms; TTFT target 2 s, TPOT 50 ms. Only
# the TTFT terms price a node here (no TPOT weight or charge, no triage, harm or sacrifice: the floor-miss tests'
# config), so the choice without the rule is the sooner first token
CONFIG = FLOOR_TESTS_CONFIG
ON = replace(CONFIG, slo_tpot_lost_to_doomed=True)
PATHS = pytest.mark.parametrize("use_kernel", [False, True], ids=["numpy", "kernel"])


def test_it_reads_the_kernels_columns():
    for name in ("COL_INV_RATE", "COL_BASE_S", "COL_LORA_LOAD_S"):  # the TPOT's: cost_kernel.columns_tpot_s
        assert getattr(tpot_lost, name) == getattr(cost_kernel, name)
    assert tpot_lost.COL_FLOOR_S == cost_kernel.COL_FLOOR_S
    assert tpot_lost.columns_tpot_s is cost_kernel.columns_tpot_s  # the numpy path's own TPOT
    assert not RouterConfig().slo_tpot_lost_to_doomed  # an operator's choice, off by default


def _fleet(make_node_view, h100_queue: int):
    """An H100 with ``h100_queue`` prompt tokens queued (5 s at 200,000: its chunks stretch its decode steps past
    50 ms) and an L4 with a longer wait to its first token (10 s)."""
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=40_000.0, queued_prefill_tokens=h100_queue)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=40_000)
    return ClusterSnapshot(0.0, (h100, l4))


@PATHS
def test_a_tpot_lost_cause_goes_to_the_node_that_could_never_meet_tpot(make_node_view, make_route_request, use_kernel):
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    snapshot = _fleet(make_node_view, 200_000)
    assert HardwareAwarePolicy(CONFIG, use_kernel).choose(request, snapshot) == "h100"  # off: the sooner TTFT
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, snapshot) == "l4"


@PATHS
def test_nothing_moves_where_a_node_can_still_meet_tpot(make_node_view, make_route_request, use_kernel):
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    snapshot = _fleet(make_node_view, 40_000)  # 1 s of queue: the H100 decodes within 50 ms
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, snapshot) == "h100"
    # a long output spreads the backlog over more steps: the H100 is predicted within the target again
    long_output = make_route_request(num_prompt_tokens=1_000, max_tokens=1_000)
    assert HardwareAwarePolicy(ON, use_kernel).choose(long_output, _fleet(make_node_view, 200_000)) == "h100"


@PATHS
def test_nothing_moves_where_no_node_has_a_floor_above_the_target(make_node_view, make_route_request, use_kernel):
    """Every node predicted to miss the TPOT target (a slow-prefilling H100: chunks of 137 ms), so only the floors
    decide: at 100 ms the L4's floor (~71 ms) meets the target, no node is doomed and the choice stands (as at the
    default SLO on the zoo fleets); at 60 ms the L4 is doomed and takes the request."""
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    h100 = make_node_view("h100", "h100-sxm", prefill_tok_per_s=15_000.0, queued_prefill_tokens=100_000)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=40_000)
    snapshot = ClusterSnapshot(0.0, (h100, l4))  # TTFT 6.7 s and 10.25 s; TPOT ~112 ms and ~230 ms
    at_100ms = replace(ON, slo_tpot_s=0.1)
    assert (
        HardwareAwarePolicy(replace(at_100ms, slo_tpot_lost_to_doomed=False), use_kernel).choose(request, snapshot)
        == "h100"
    )
    assert HardwareAwarePolicy(at_100ms, use_kernel).choose(request, snapshot) == "h100"
    assert HardwareAwarePolicy(replace(ON, slo_tpot_s=0.06), use_kernel).choose(request, snapshot) == "l4"


@PATHS
def test_the_class_tpot_target_is_the_one_read(make_node_view, make_route_request, use_kernel):
    request = replace(make_route_request(num_prompt_tokens=1_000, max_tokens=64), slo_tpot_s=0.2)
    snapshot = _fleet(make_node_view, 200_000)
    assert HardwareAwarePolicy(ON, use_kernel).choose(request, snapshot) == "h100"  # 200 ms: nobody is doomed


@PATHS
def test_a_choice_the_prefix_credit_moved_is_kept(make_node_view, make_route_request, use_kernel):
    """Two H100s, both missing TPOT; the second holds 7,000 of the prompt's 8,000 tokens, which makes it the
    choice though its queue is longer. The rule leaves a choice the credit made (it judges the uncredited costs)."""
    config = replace(ON, hardware_aware_use_prefix=True)
    a = make_node_view("a", "h100-sxm", prefill_tok_per_s=40_000.0, queued_prefill_tokens=200_000)
    b = make_node_view("b", "h100-sxm", prefill_tok_per_s=40_000.0, queued_prefill_tokens=204_000)
    l4 = make_node_view("l4", "l4", prefill_tok_per_s=4_000.0, queued_prefill_tokens=40_000)
    snapshot = ClusterSnapshot(0.0, (a, b, l4))
    hashes = tuple(range(1, 501))  # 500 blocks of 16 tokens
    policy = HardwareAwarePolicy(config, use_kernel)
    policy.on_routed(replace(make_route_request(8_000, 64, hashes[:437]), request_id="earlier"), "b")
    assert policy.choose(make_route_request(8_000, 64, hashes), snapshot) == "b"
    assert policy.choose(make_route_request(8_000, 64, tuple(range(1_000, 1_500))), snapshot) == "l4"  # no credit


class _Table:
    """What redirect reads of a NodeTable: its values and the positions holding an adapter."""

    def __init__(self, values: np.ndarray, tagged: dict[str, set[int]]) -> None:
        self.values, self._tagged = values, tagged

    def tagged(self, label: str):
        return self._tagged.get(label, ())


def _reference(table: _Table, cost: np.ndarray, chosen: int, request: RouteRequest, config: RouterConfig) -> int:
    """The rule, node by node."""
    values, target = table.values, config.slo_tpot_s
    n = values.shape[1]
    steps = max(request.max_tokens - 1, 1)
    tpots = []
    for i in range(n):
        spread, chunk = values[cost_kernel.COL_BACKLOG_S, i] * (1.0 / steps), values[cost_kernel.COL_CHUNK_S, i]
        tpots.append((chunk if chunk < spread or chunk != chunk else spread) + values[cost_kernel.COL_STEP_S, i])
    doomed = [i for i in range(n) if values[cost_kernel.COL_FLOOR_S, i] > target]
    if chosen < 0 or not doomed or not all(t > target for t in tpots) or int(np.argmin(cost[:n])) != chosen:
        return chosen
    if config.slo_tpot_lost_ttft_factor:
        tagged = table.tagged(request.lora_name) if request.lora_name else ()

        def ttft(i: int) -> float:
            t = values[cost_kernel.COL_INV_RATE, i] * float(max(request.num_prompt_tokens, 1))
            t += values[cost_kernel.COL_BASE_S, i]
            return t + (values[cost_kernel.COL_LORA_LOAD_S, i] if request.lora_name and i not in tagged else 0.0)

        doomed = [i for i in doomed if ttft(i) <= config.slo_tpot_lost_ttft_factor * config.slo_ttft_s]
    if not doomed:
        return chosen
    best = min(doomed, key=lambda i: (cost[i], i))
    return chosen if cost[best] == math.inf else best


_FIGURE = st.floats(0.0, 0.2, allow_nan=False)
_FLOOR = st.one_of(_FIGURE, st.just(math.nan))  # a NaN floor is not doomed, and does not hide one that is
_ROW = st.tuples(_FIGURE, _FIGURE, _FIGURE, _FLOOR, st.floats(0.0, 3e-3), st.floats(0.0, 6.0), _FIGURE, st.booleans())


@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 6).flatmap(
        lambda n: st.tuples(
            st.lists(_ROW, min_size=n, max_size=n),
            st.lists(st.one_of(st.floats(0.0, 30.0), st.just(math.inf)), min_size=n, max_size=n),
        )
    ),
    st.integers(1, 300),
    st.integers(1, 2_000),
    st.sampled_from([0.02, 0.05, 0.1]),
    st.sampled_from([0.0, 1.0, 2.5]),
    st.booleans(),
    st.booleans(),
)
def test_redirect_agrees_with_the_rule_node_by_node(rows, max_tokens, prompt, target, factor, lora, credit_moved):
    figures, costs = rows
    n = len(figures)
    values = np.zeros((cost_kernel.NUM_COLUMNS, n))
    tagged = set()
    for i, (step, backlog, chunk, floor, inv_rate, base, load, holds) in enumerate(figures):
        for column, value in (
            (cost_kernel.COL_STEP_S, step),
            (cost_kernel.COL_BACKLOG_S, backlog * 100),
            (cost_kernel.COL_CHUNK_S, chunk),
            (cost_kernel.COL_FLOOR_S, floor),
            (cost_kernel.COL_INV_RATE, inv_rate),
            (cost_kernel.COL_BASE_S, base),
            (cost_kernel.COL_LORA_LOAD_S, load),
        ):
            values[column, i] = value
        if holds:
            tagged.add(i)
    table = _Table(values, {"ad": tagged})
    cost = np.array([*costs, 7.0])  # a buffer longer than the table, as the kernel's
    chosen = int(np.argmin(cost[:n]))
    if cost[chosen] == math.inf:
        chosen = -1
    elif credit_moved and n > 1:
        chosen = (chosen + 1) % n
    config = replace(ON, slo_tpot_s=target, slo_tpot_lost_ttft_factor=factor)
    request = RouteRequest("r", "m", prompt, max_tokens, (), lora_name="ad" if lora else None)
    before = values.copy()
    assert tpot_lost.redirect(config, request, table, cost, chosen) == _reference(table, cost, chosen, request, config)
    assert np.array_equal(values, before, equal_nan=True)  # the table is read, not written
    assert tpot_lost.keep(config, request, table, cost, chosen) == chosen


@PATHS
def test_the_ttft_factor_keeps_the_choice_where_the_doomed_node_is_too_late(
    make_node_view, make_route_request, use_kernel
):
    """The L4's first token comes in ~10.25 s: within 6 x the 2 s target, not within 5 x."""
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    snapshot = _fleet(make_node_view, 200_000)
    assert HardwareAwarePolicy(replace(ON, slo_tpot_lost_ttft_factor=6.0), use_kernel).choose(request, snapshot) == "l4"
    five = HardwareAwarePolicy(replace(ON, slo_tpot_lost_ttft_factor=5.0), use_kernel)
    assert five.choose(request, snapshot) == "h100"


def test_the_factor_is_checked():
    with pytest.raises(ValueError, match="slo_tpot_lost_ttft_factor"):
        RouterConfig(slo_tpot_lost_ttft_factor=-1.0)
    with pytest.raises(ValueError, match="slo_tpot_lost_ttft_factor"):
        RouterConfig(slo_tpot_lost_ttft_factor=math.nan)


@PATHS
def test_a_traffic_class_chooses_the_rule_for_its_requests(make_node_view, make_route_request, use_kernel):
    """TrafficClass.goodput_first: a batch class puts goodput first while the router keeps the tail for the others,
    and a class may keep its tail where the router puts goodput first."""
    batch = TrafficClass("batch", goodput_first=True)
    interactive = TrafficClass("interactive", goodput_first=False)
    config = replace(CONFIG, cells=CellsConfig(traffic_classes=[batch, interactive]))
    snapshot = _fleet(make_node_view, 200_000)
    request = make_route_request(num_prompt_tokens=1_000, max_tokens=64)
    policy = HardwareAwarePolicy(config, use_kernel)
    assert policy.tpot_lost is not None and not policy.tpot_lost.default_on  # on for a class, off for the router
    assert policy.choose(replace(request, traffic_class="batch", goodput_first=True), snapshot) == "l4"
    assert policy.choose(request, snapshot) == "h100"  # the router's: off
    assert policy.tpot_lost.moved == 1
    everyone = HardwareAwarePolicy(replace(config, slo_tpot_lost_to_doomed=True), use_kernel)
    assert everyone.choose(request, snapshot) == "l4"
    assert everyone.choose(replace(request, traffic_class="interactive", goodput_first=False), snapshot) == "h100"


def test_the_rule_costs_nothing_where_no_one_turns_it_on():
    assert tpot_lost.rule_for(CONFIG) is None
    off_class = replace(CONFIG, cells=CellsConfig(traffic_classes=[TrafficClass("x", goodput_first=False)]))
    assert tpot_lost.rule_for(off_class) is None
    assert tpot_lost.rule_for(ON).default_on
