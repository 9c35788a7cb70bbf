"""The compiled hardware_aware decision (cost_kernel.py) against the numpy path and the scalar formula.

Hypothesis builds random node tables (nodes repeated to force exact ties, prompts some nodes cannot take,
KV-short and swapped nodes, LoRA adapters held by some, prefix holders, every penalty on or off, SLO triage,
decode protection and bin packing (gated by TPOT or not) included, with the class's SLOs or the router's) and asks
three implementations on the same snapshot: the numpy passes (``use_kernel=False``), the numba kernel, and
the kernel's Python source run uncompiled (so the logic is tested where numba is missing). Choices must be
equal and the per-node costs equal bit for bit; the choice must also be a least ``predict_cost_s`` node.
"""

from __future__ import annotations

import logging
import sys
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from backends.gpu_table import gpu_profile, power_score
from controlplane.router.decode_steps import histogram
from controlplane.router.policies import cost_kernel, hardware_aware
from controlplane.router.policies.cost_kernel import CostKernel, compiled_kernel, least_cost_index
from controlplane.router.policies.cost_reference import lost_cause_fastest_rate, predict_cost_s, triage_spares_capable
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.policy import ClusterSnapshot, NodeView, RouteRequest
from controlplane.router.router_config import RouterConfig

GPUS = ("h200", "a100-40gb", "l40s", "l4", "t4")
BLOCK = 16
NUMBA = compiled_kernel()
needs_numba = pytest.mark.skipif(NUMBA is None, reason="numba not importable: the numpy path decides")

GOODPUT_ONLY = RouterConfig(  # SLO triage and decode protection alone, often acting (tight SLOs)
    slo_ttft_s=0.5,
    slo_tpot_s=0.03,
    slo_ttft_miss_penalty_s=0.0,
    slo_triage_penalty_s=7.0,
    slo_tpot_harm_penalty_s=4.0,
    tpot_weight=0.0,
    kv_full_penalty_s=0.0,
)
CONFIGS = (
    RouterConfig(default_model_params_b=8.0),
    # the defaults before the tenth and eleventh tuning grids: sacrifice off, the 30 s KV charge
    RouterConfig(default_model_params_b=8.0, slo_sacrifice_weight=0.0, kv_full_penalty_s=30.0),
    RouterConfig(default_model_params_b=1.0, slo_tpot_miss_penalty_s=10.0, kv_reserve_output_tokens=64),
    RouterConfig(slo_ttft_miss_penalty_s=0.0, kv_full_penalty_s=0.0, tpot_weight=0.0),
    RouterConfig(hardware_aware_use_prefix=False, slo_ttft_s=0.05, lora_load_estimate_s=0.3),
    RouterConfig(tpot_weight=1.0, tpot_horizon_tokens=8, prefix_max_candidates=2, kv_reserve_running_tokens=0),
    RouterConfig(slo_ttft_s=0.2, slo_tpot_s=0.02, slo_tpot_miss_penalty_s=3.0, kv_full_penalty_s=0.0),
    RouterConfig(slo_triage_penalty_s=0.0, slo_tpot_harm_penalty_s=0.0),  # both goodput terms off
    GOODPUT_ONLY,
    RouterConfig(slo_ttft_s=2.0, slo_tpot_s=0.05, slo_triage_penalty_s=1.5, slo_tpot_harm_penalty_s=0.25),
    RouterConfig(slo_ttft_s=0.3, slo_triage_spare_capable_below=1.0, tpot_excess_only=True, tpot_weight=0.5),
    replace(GOODPUT_ONLY, slo_triage_spare_capable_below=0.5),
    RouterConfig(slo_pack_weight=2.0),  # bin packing at the router's defaults
    RouterConfig(slo_ttft_s=0.5, slo_pack_weight=1.0, slo_ttft_miss_penalty_s=0.3, tpot_weight=0.0),  # capped
    replace(GOODPUT_ONLY, slo_ttft_miss_penalty_s=10.0, slo_pack_weight=1.5, slo_triage_spare_capable_below=0.5),
    RouterConfig(slo_pack_weight=2.0, slo_pack_needs_tpot=True),  # packing only onto nodes that meet both targets
    RouterConfig(
        slo_ttft_s=0.5,
        slo_tpot_s=0.03,
        slo_pack_weight=1.0,
        slo_pack_needs_tpot=True,
        slo_ttft_miss_penalty_s=0.3,
        tpot_weight=0.0,
    ),
    replace(GOODPUT_ONLY, slo_ttft_miss_penalty_s=10.0, slo_pack_weight=2.0, slo_pack_needs_tpot=True),
    # sacrifice: a lost cause (tight TTFT SLOs make many) to the least capable node
    RouterConfig(slo_ttft_s=0.2, slo_sacrifice_weight=3.0),
    replace(GOODPUT_ONLY, slo_ttft_miss_penalty_s=10.0, slo_sacrifice_weight=30.0, slo_triage_spare_capable_below=0.5),
    RouterConfig(slo_ttft_s=0.05, slo_sacrifice_weight=100.0, slo_ttft_miss_penalty_s=0.0, slo_pack_weight=1.0),
    # sacrifice within a bound on the TTFT a sacrificed request may be given (beyond it: the fastest node's charge)
    RouterConfig(slo_ttft_s=0.2, slo_sacrifice_weight=3.0, slo_sacrifice_max_ttft_s=0.8),
    replace(
        GOODPUT_ONLY,
        slo_ttft_miss_penalty_s=10.0,
        slo_sacrifice_weight=30.0,
        slo_sacrifice_max_ttft_s=1.5,
        slo_triage_spare_capable_below=0.5,
    ),
    RouterConfig(slo_ttft_s=0.05, slo_sacrifice_weight=100.0, slo_sacrifice_max_ttft_s=0.5, slo_pack_weight=1.0),
    RouterConfig(slo_ttft_s=0.2, slo_sacrifice_weight=10.0, slo_sacrifice_max_ttft_s=1e-9),  # no node within it
    # sacrifice favouring only the slowest tier (rate / fastest rate at most the ratio; the others: factor 1),
    # alone and with the bound; ratios away from the pool's measured ratios (900, 12k, 60k tok/s: .015, .2, .075)
    RouterConfig(slo_ttft_s=0.2, slo_sacrifice_weight=3.0, slo_sacrifice_max_rate_ratio=0.3),
    replace(
        GOODPUT_ONLY,
        slo_ttft_miss_penalty_s=10.0,
        slo_sacrifice_weight=30.0,
        slo_sacrifice_max_rate_ratio=0.5,
        slo_sacrifice_max_ttft_s=1.5,
        slo_triage_spare_capable_below=0.5,
    ),
    RouterConfig(
        slo_ttft_s=0.05,
        slo_sacrifice_weight=100.0,
        slo_sacrifice_max_rate_ratio=0.1,
        slo_sacrifice_max_ttft_s=0.5,
        slo_pack_weight=1.0,
    ),
    # sacrifice of long prompts too (slo_sacrifice_long_share), alone and with the bound and the tier
    RouterConfig(slo_ttft_s=0.2, slo_sacrifice_weight=3.0, slo_sacrifice_long_share=0.3),
    RouterConfig(slo_ttft_s=0.05, slo_sacrifice_weight=10.0, slo_sacrifice_long_share=0.05, slo_pack_weight=1.0),
    RouterConfig(
        slo_ttft_s=0.2,
        slo_sacrifice_weight=30.0,
        slo_sacrifice_long_share=0.5,
        slo_sacrifice_max_rate_ratio=0.5,
        slo_sacrifice_max_ttft_s=1.5,
    ),
)

profiles = st.fixed_dictionaries(
    {
        "gpu": st.sampled_from(GPUS),
        "max_model_len": st.sampled_from((256, 2048, 8192)),
        "num_device_blocks": st.integers(8, 4096),
        "num_free_device_blocks": st.integers(0, 4096),
        "num_running": st.integers(0, 64),
        "num_waiting": st.integers(0, 16),
        "num_swapped": st.sampled_from((0, 0, 0, 1)),
        "queued_prefill_tokens": st.integers(0, 30_000),
        "decode_batch_size": st.integers(0, 64),
        "prefill_tok_per_s": st.sampled_from((0.0, 900.0, 12_000.0, 60_000.0)),
        "decode_step_ms": st.sampled_from((0.0, 5.0, 25.0, 90.0)),
        "num_inflight": st.integers(0, 20),
        "inflight_prefill_tokens": st.sampled_from((0, 0, 500, 8000)),
        "lora_resident": st.lists(st.sampled_from(("a", "b", "c")), max_size=2, unique=True).map(tuple),
        "lora_load_s": st.sampled_from((0.0, 0.0, 0.02, 1.5)),
        "decode_inv_steps": st.sampled_from((0.0, 0.0, 1.0, 1.0 / 7, 1.0 / 300)),
        "decode_steps_hist": st.lists(st.integers(1, 70_000), max_size=8).map(histogram),
        "decode_slack_hist": st.lists(st.floats(0.0, 70_000.0), max_size=8).map(histogram),  # ms
    }
)

PREFIXES = (tuple(range(10, 14)), tuple(range(20, 100)), tuple(range(1000, 1300)))  # 4, 80, 300 blocks
requests = st.tuples(
    st.integers(1, 9000),  # prompt tokens (some longer than a node can take)
    st.integers(1, 3000),  # max tokens
    st.sampled_from((None, *range(len(PREFIXES)))),
    st.sampled_from((None, None, "a", "b", "d")),
    st.sampled_from((None, 0.2, 4.0)),  # the class's TTFT SLO
    st.sampled_from((None, 0.01, 0.5)),  # the class's TPOT SLO
)


def _view(node_id: str, profile: dict) -> NodeView:
    hw = gpu_profile(profile["gpu"])
    fields = {k: v for k, v in profile.items() if k != "gpu"}
    return NodeView(
        node_id=node_id,
        gpu_type=hw.gpu_type,
        cell="default",
        model="m",
        power_score=power_score(hw),
        memory_bandwidth_gbps=hw.memory_bandwidth_gbps,
        peak_tflops=hw.peak_tflops,
        block_size=BLOCK,
        kv_usage=0.0,
        max_loras=2,
        **fields,
    )


def _request(k: int, spec: tuple) -> RouteRequest:
    num_prompt_tokens, max_tokens, prefix, lora_name, slo_ttft_s, slo_tpot_s = spec
    num_blocks = num_prompt_tokens // BLOCK
    tail = tuple(10**6 * (k + 1) + b for b in range(num_blocks))
    chain = () if prefix is None else (PREFIXES[prefix] + tail)[:num_blocks]
    return RouteRequest(
        f"r{k}", "m", num_prompt_tokens, max_tokens, chain, slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s,
        lora_name=lora_name,
    )  # fmt: skip


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a, dtype=np.float64).tobytes()


def _least_predicted_cost(chosen, request, snapshot, config, policy) -> None:
    """``chosen`` is a node of least predict_cost_s, with the cached tokens the policy's prefix index
    credits (those are the policy's own memory: the same match the decision used)."""
    num_prompt_tokens = request.num_prompt_tokens
    fits = [v for v in snapshot.nodes if num_prompt_tokens <= min(v.max_model_len - 1, v.num_device_blocks * BLOCK)]
    if not fits:
        assert chosen is None
        return
    matched = {}
    if policy._index is not None and request.block_hashes:
        if request.slo_ttft_s is not None:
            return  # the credit re-checks the router's TTFT SLO, not the class's (as it always has)
        matched = policy._index.match(request.block_hashes, config.prefix_max_candidates)
    scalar_config = replace(
        config, slo_ttft_s=request.slo_ttft_s or config.slo_ttft_s, slo_tpot_s=request.slo_tpot_s or config.slo_tpot_s
    )
    spare = triage_spares_capable(snapshot.nodes, num_prompt_tokens, scalar_config, scalar_config.slo_ttft_s)
    lost = lost_cause_fastest_rate(snapshot.nodes, request, scalar_config, scalar_config.slo_ttft_s)
    costs = {
        v.node_id: predict_cost_s(
            v, request, scalar_config, min(matched.get(v.node_id, 0) * BLOCK, request.num_prompt_tokens), spare, lost
        )
        for v in fits
    }
    assert costs[chosen] == pytest.approx(min(costs.values()), rel=1e-9, abs=1e-12)


# a pool of node load profiles, the picks from it, the routing history, the request: both tests draw these
FLEET_CASES = (
    st.lists(profiles, min_size=1, max_size=6),
    st.lists(st.integers(0, 5), min_size=1, max_size=14),
    st.lists(st.tuples(requests, st.integers(0, 13)), max_size=6),
    requests,
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(CONFIGS), *FLEET_CASES)
def test_kernel_numpy_and_python_choose_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    _check_alike(config, pool, picks, history, spec)


GATED = tuple(c for c in CONFIGS if c.slo_pack_needs_tpot)
SACRIFICE = tuple(c for c in CONFIGS if c.slo_sacrifice_weight)
BOUNDED = tuple(c for c in CONFIGS if c.slo_sacrifice_max_ttft_s)
TIERED = tuple(c for c in CONFIGS if c.slo_sacrifice_max_rate_ratio)
LONG = tuple(c for c in CONFIGS if c.slo_sacrifice_long_share)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(GATED), *FLEET_CASES)
def test_bin_packing_gated_by_tpot_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The same check, more often, on the configs whose bin packing needs the TPOT target met
    (slo_pack_needs_tpot): the gate's TPOT and the prefix credit's re-check of it agree on all three paths."""
    _check_alike(config, pool, picks, history, spec)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(SACRIFICE), *FLEET_CASES)
def test_sacrifice_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The same check, more often, with sacrifice on (slo_sacrifice_weight): the lost-cause test, the fastest
    rate, the charge and the prefix credit's lift of it agree on all three paths."""
    _check_alike(config, pool, picks, history, spec)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(BOUNDED), *FLEET_CASES)
def test_bounded_sacrifice_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The same check with sacrifice bounded (slo_sacrifice_max_ttft_s): each node's TTFT against the bound, in
    the charge and in the prefix credit's lift of it, agrees on all three paths."""
    _check_alike(config, pool, picks, history, spec)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(TIERED), *FLEET_CASES)
def test_tiered_sacrifice_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The same check with sacrifice limited to the slowest tier (slo_sacrifice_max_rate_ratio), alone and with
    the bound: each node's factor against the ratio, in the charge and in the prefix credit's lift of it, agrees
    on all three paths."""
    _check_alike(config, pool, picks, history, spec)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(LONG), *FLEET_CASES)
def test_long_prompt_sacrifice_chooses_alike_with_the_same_cost_bits(config, pool, picks, history, spec):
    """The same check with long prompts sacrificed too (slo_sacrifice_long_share): the fastest node's prefill
    against the share of the target, and the charge that follows, agree on all three paths."""
    _check_alike(config, pool, picks, history, spec)


def _check_alike(config, pool, picks, history, spec) -> None:
    # nodes drawn from a small pool of load profiles: repeats have equal costs (ties: the first wins)
    nodes = tuple(_view(f"n{k:02d}", pool[p % len(pool)]) for k, p in enumerate(picks))
    snapshot = ClusterSnapshot(0.0, nodes)
    numpy_path = HardwareAwarePolicy(config, use_kernel=False)
    python_path = HardwareAwarePolicy(config, use_kernel=False)
    python_path._kernel = CostKernel(config, least_cost_index)  # the kernel's source, run by CPython
    python_path.choose = python_path._choose_compiled
    policies = [numpy_path, python_path]
    if NUMBA is not None:
        numba_path = HardwareAwarePolicy(config)
        assert numba_path.kernel_name == "numba"
        policies.append(numba_path)
    assert numpy_path.kernel_name == "numpy"
    for k, (past, at) in enumerate(history):  # earlier prompts the prefix index remembers
        for policy in policies:
            policy.on_routed(_request(100 + k, past), nodes[at % len(nodes)].node_id)
    request = _request(0, spec)
    chosen = [policy.choose(request, snapshot) for policy in policies]
    assert chosen[1:] == chosen[:-1], (request, chosen)
    n = len(nodes)
    reference = _bits(numpy_path._cost[:n])
    for policy in policies[1:]:
        assert _bits(policy._kernel.cost[:n]) == reference
        assert not policy._kernel._is_tagged.any()  # the scratch is left clean
    _least_predicted_cost(chosen[0], request, snapshot, config, numpy_path)


def _values(n: int) -> np.ndarray:
    values = np.zeros((cost_kernel.NUM_COLUMNS, n))
    values[cost_kernel.COL_MAX_PROMPT] = 1000.0
    values[cost_kernel.COL_INV_RATE] = 1e-4
    values[cost_kernel.COL_HEADROOM] = 1e6
    values[cost_kernel.COL_LORA_LOAD_S] = 0.5
    return values


def _run(kernel, values, num_prompt_tokens=100, lora=False, tagged=(), cand=(), cached=(), **knobs):
    """``knobs``: need, slo_ttft_s, ttft_penalty_s, kv_penalty_s, router_slo_ttft_s, inv_steps, slo_tpot_s,
    triage_penalty_s, harm_penalty_s, spare_below, excess_only, pack_weight, pack_needs_tpot, sacrifice_s,
    sacrifice_max_ttft_s, sacrifice_max_rate_ratio, tpot_floor_miss, harm_triage, harm_decoders, harm_count,
    harm_cap_s, harm_reported, late_weight, long_s (see CostKernel)."""
    n = values.shape[1]
    cost = np.empty(n)
    slo_ttft_s = knobs.get("slo_ttft_s", 1.0)
    params = (float(num_prompt_tokens), slo_ttft_s, knobs.get("ttft_penalty_s", 0.0), knobs.get("inv_steps", 1.0),
              knobs.get("slo_tpot_s", 1.0), 0.0, knobs.get("output_weight", 0.0),
              float(knobs.get("need", num_prompt_tokens)), knobs.get("kv_penalty_s", 0.0), float(num_prompt_tokens),
              1.0 if lora else 0.0, knobs.get("router_slo_ttft_s", slo_ttft_s), knobs.get("triage_penalty_s", 0.0),
              knobs.get("harm_penalty_s", 0.0), knobs.get("spare_below", 0.0),
              knobs.get("excess_only", 0.0), knobs.get("pack_weight", 0.0),
              knobs.get("pack_needs_tpot", 0.0), knobs.get("sacrifice_s", 0.0),
              knobs.get("sacrifice_max_ttft_s", 0.0), knobs.get("sacrifice_max_rate_ratio", 0.0),
              knobs.get("tpot_floor_miss", 0.0), knobs.get("harm_triage", 0.0),
              knobs.get("harm_decoders", 0.0), knobs.get("harm_count", 0.0), knobs.get("harm_cap_s", 0.0),
              knobs.get("harm_reported", 0.0), knobs.get("late_weight", 0.0),
              knobs.get("long_s", 0.0))  # fmt: skip
    assert len(params) == cost_kernel.NUM_PARAMS
    i = kernel(
        np.ascontiguousarray(values), cost, np.zeros(n, dtype=bool), np.array(tagged, dtype=np.int64),
        np.array(cand or (0,), dtype=np.int64), np.array(cached or (0,), dtype=np.int64), len(cand), params,
    )  # fmt: skip
    return i, cost


KERNELS = [pytest.param(least_cost_index, id="python"), pytest.param(NUMBA, id="numba", marks=needs_numba)]


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_tables_ties_nan_impossible_and_lora(kernel):
    values = _values(4)
    values[cost_kernel.COL_BASE_S] = [0.3, 0.1, 0.1, 0.2]
    assert _run(kernel, values)[0] == 1  # tie between 1 and 2: the first
    values[cost_kernel.COL_MAX_PROMPT, 1] = 50.0
    assert _run(kernel, values)[0] == 2  # 1 cannot take a 100-token prompt
    i, cost = _run(kernel, values)
    assert cost[1] == np.inf and np.argmin(cost) == i
    values[cost_kernel.COL_BASE_S, 3] = np.nan
    i, cost = _run(kernel, values)
    assert i == 3 == np.argmin(cost)  # numpy's argmin picks the first NaN; so does the kernel
    values[cost_kernel.COL_MAX_PROMPT] = 10.0
    assert _run(kernel, values)[0] == -1  # nobody can take it
    values = _values(3)
    values[cost_kernel.COL_BASE_S] = [0.2, 0.1, 0.3]
    assert _run(kernel, values, lora=True)[0] == 1  # every node loads the adapter: 1 still wins
    assert _run(kernel, values, lora=True, tagged=(2,))[0] == 2  # 2 holds it: 0.3 < 0.1 + 0.5
    i, cost = _run(kernel, values, lora=True, tagged=(0, 2))
    assert i == 0 and list(cost) == [0.2 + 1e-4 * 100, 0.1 + 1e-4 * 100 + 0.5, 0.3 + 1e-4 * 100]
    # prefix credit: node 1 (slow prefill) beats node 0 only if enough of the prompt is cached there
    values = _values(2)
    values[cost_kernel.COL_BASE_S] = [0.2, 0.1]
    values[cost_kernel.COL_INV_RATE, 1] = 2e-3  # costs: 0.21 and 0.3
    assert _run(kernel, values, cand=(1,), cached=(16,))[0] == 0  # saves 0.032 s: 0.268
    i, cost = _run(kernel, values, cand=(1,), cached=(96,))  # saves 0.192 s: 0.108
    assert i == 1 and cost[1] == 2e-3 * 100 + 0.1  # ``cost``: before the credit
    assert _run(kernel, values, cand=(1,), cached=(9600,))[0] == 1  # capped at the prompt, one token left


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_boundaries_kv_room_credit_ties_and_the_credits_slo(kernel):
    values = _values(2)
    values[cost_kernel.COL_BASE_S] = [0.2, 0.1]
    values[cost_kernel.COL_HEADROOM] = [1e6, 150.0]
    assert _run(kernel, values, need=150, kv_penalty_s=5.0)[0] == 1  # room == need: not short
    assert _run(kernel, values, need=151, kv_penalty_s=5.0)[0] == 0
    # the prefix makes node 1 fit: it needs only need - cached of KV room
    assert _run(kernel, values, need=151, kv_penalty_s=5.0, cand=(1,), cached=(1,))[0] == 1  # 150 <= 150
    # equal corrected costs: the smaller position wins, whatever order the index named them in
    values = _values(3)
    values[cost_kernel.COL_BASE_S] = [0.1, 0.1, 0.15]
    values[cost_kernel.COL_INV_RATE, :2] = 2e-3  # 0.3, 0.3, 0.16
    for cand in ((0, 1), (1, 0)):
        assert _run(kernel, values, cand=cand, cached=(96, 96))[0] == 0, cand  # 0.108 each
    # the credit lifts a TTFT penalty against the router's SLO (its rule), not the request class's
    values = _values(2)
    values[cost_kernel.COL_BASE_S] = [0.2, 0.1]
    values[cost_kernel.COL_INV_RATE, 1] = 2e-3  # 0.21 and 0.3 (+ 1 s over a 0.25 s SLO); cached: 0.108
    knobs = dict(cand=(1,), cached=(96,), ttft_penalty_s=1.0)
    assert _run(kernel, values, slo_ttft_s=0.25, router_slo_ttft_s=0.25, **knobs)[0] == 1
    assert _run(kernel, values, slo_ttft_s=0.25, router_slo_ttft_s=0.5, **knobs)[0] == 0  # no penalty to lift


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_slo_triage_against_the_class_slo(kernel):
    values = _values(3)
    values[cost_kernel.COL_INV_RATE] = 1e-3  # 100 prompt tokens: 0.1 s
    values[cost_kernel.COL_BASE_S] = [0.05, 0.2, 0.3]  # all miss 0.12 s; only node 0's queue is within it
    knobs = dict(slo_ttft_s=0.12, router_slo_ttft_s=10.0, ttft_penalty_s=1.0)  # triage: the class's SLO
    i, cost = _run(kernel, values, triage_penalty_s=5.0, **knobs)
    assert i == 1 and list(cost) == [1e-3 * 100 + base + 1.0 + 5.0 * (base <= 0.12) for base in (0.05, 0.2, 0.3)]
    assert _run(kernel, values, triage_penalty_s=0.0, **knobs)[0] == 0
    values[cost_kernel.COL_BASE_S, 0] = 0.12  # wait == SLO: still within it, pays
    assert _run(kernel, values, triage_penalty_s=5.0, **knobs)[0] == 1
    values[cost_kernel.COL_BASE_S, 0] = 0.0  # 0.1 s: meets the SLO, no penalty at all
    i, cost = _run(kernel, values, triage_penalty_s=5.0, **knobs)
    assert i == 0 and cost[0] == 1e-3 * 100 + 0.0
    # the triage penalty alone (no TTFT miss penalty) acts too
    values[cost_kernel.COL_BASE_S, 0] = 0.05
    assert _run(kernel, values, triage_penalty_s=5.0, slo_ttft_s=0.12)[0] == 1


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_slo_triage_sparing_the_capable_nodes(kernel):
    values = _values(3)
    values[cost_kernel.COL_INV_RATE] = [1e-3, 1e-3, 5e-3]  # 100 prompt tokens: 0.1 s, 0.1 s, 0.5 s
    values[cost_kernel.COL_BASE_S] = [0.05, 0.3, 0.0]  # all miss 0.12 s; node 1 late, node 2 too slow even empty
    knobs = dict(slo_ttft_s=0.12, ttft_penalty_s=1.0, triage_penalty_s=5.0)
    assert _run(kernel, values, **knobs)[0] == 1  # the rule by wait: the late capable node
    i, cost = _run(kernel, values, spare_below=1.0, **knobs)  # by capability: the node that never meets it
    assert i == 2 and list(cost) == [0.1 + 0.05 + 1.0 + 5.0, 0.1 + 0.3 + 1.0 + 5.0, 0.5 + 0.0 + 1.0]
    values[cost_kernel.COL_INV_RATE, 2] = 1.1e-3  # 0.11 s: every node could, the rule by wait again
    values[cost_kernel.COL_BASE_S, 2] = 0.05
    assert _run(kernel, values, spare_below=1.0, **knobs)[0] == 1
    assert _run(kernel, values, spare_below=0.7, **knobs)[0] == 1  # 2 of 3 could: not fewer than 0.7 x 3
    values[cost_kernel.COL_INV_RATE, 2] = np.nan  # a NaN rate is no node that could: both others charged
    cost = _run(kernel, values, spare_below=1.0, **knobs)[1]
    assert cost[0] == 0.1 + 0.05 + 1.0 + 5.0 and cost[1] == 0.1 + 0.3 + 1.0 + 5.0
    # a cached prefix lifts the triage penalty only where it was charged: node 0 with 90 cached tokens
    values[cost_kernel.COL_INV_RATE, 2], values[cost_kernel.COL_BASE_S, 2] = 5e-3, 0.0
    credit = dict(cand=(0,), cached=(90,), router_slo_ttft_s=0.12)
    i, cost = _run(kernel, values, spare_below=1.0, **credit, **knobs)
    assert i == 0  # 0.01 + 0.05 s meets the SLO: both penalties lifted (6 s), below node 2's 1.5 s


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_tpot_excess_only(kernel):
    values = _values(2)
    values[cost_kernel.COL_BASE_S] = [0.0, 0.2]  # node 1 reaches the first token 0.2 s later
    values[cost_kernel.COL_STEP_S] = [0.08, 0.01]  # ...but decodes 8x faster; both within 0.1 s
    values[cost_kernel.COL_CHUNK_S] = 1.0
    knobs = dict(slo_tpot_s=0.1, output_weight=25.6)
    i, cost = _run(kernel, values, **knobs)  # the whole TPOT priced: 2.05 s vs 0.46 s
    assert i == 1 and list(cost) == [0.01 + 0.08 * 25.6, 0.01 + 0.2 + 0.01 * 25.6]
    i, cost = _run(kernel, values, excess_only=1.0, **knobs)  # speed beyond the SLO buys nothing
    assert i == 0 and list(cost) == [0.01, 0.01 + 0.2]
    values[cost_kernel.COL_STEP_S, 0] = 0.11  # over the SLO by 0.01 s: 0.256 s more, node 1 wins again
    i, cost = _run(kernel, values, excess_only=1.0, **knobs)
    assert i == 1 and cost[0] == 0.01 + (0.11 - 0.1) * 25.6
    values[cost_kernel.COL_STEP_S, 0] = np.inf  # an infinite TPOT: an infinite cost, not NaN
    assert _run(kernel, values, excess_only=1.0, **knobs)[1][0] == np.inf


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_decode_protection(kernel):
    values = _values(2)
    values[cost_kernel.COL_INV_RATE] = 1e-3  # 100 prompt tokens: 0.1 s of chunks over 4 steps: 0.025 s each
    values[cost_kernel.COL_BASE_S] = [0.0, 0.05]
    values[cost_kernel.COL_STEP_S] = 0.01
    values[cost_kernel.COL_CHUNK_S] = 1.0
    values[cost_kernel.COL_DECODERS] = [4.0, 0.0]  # node 0 decodes: its TPOT would be 0.035 s > 0.03 s
    knobs = dict(inv_steps=0.25, slo_tpot_s=0.03)
    i, cost = _run(kernel, values, harm_penalty_s=3.0, **knobs)
    assert i == 1 and list(cost) == [1e-3 * 100 + 0.0 + 3.0, 1e-3 * 100 + 0.05]
    assert _run(kernel, values, harm_penalty_s=0.0, **knobs)[0] == 0
    harm_s = (1e-3 * 100 + 0.0) * 0.25 + 0.01  # the decodes' TPOT there, in the kernel's order: 0.035 s
    assert _run(kernel, values, harm_penalty_s=3.0, **{**knobs, "slo_tpot_s": harm_s})[0] == 0  # == SLO: within
    values[cost_kernel.COL_BACKLOG_S, 0] = 0.04  # the backlog shares the steps too: 0.035 s + 0.01 s
    assert _run(kernel, values, harm_penalty_s=3.0, **{**knobs, "slo_tpot_s": 0.04})[0] == 1
    values[cost_kernel.COL_CHUNK_S, 0] = 0.015  # a chunk per step at most: 0.025 s, within 0.03 s
    assert _run(kernel, values, harm_penalty_s=3.0, **knobs)[0] == 0
    values[cost_kernel.COL_CHUNK_S, 0] = 1.0
    values[cost_kernel.COL_DECODERS, 0] = 0.0  # nothing decoding: nothing to protect
    assert _run(kernel, values, harm_penalty_s=3.0, **knobs)[0] == 0


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_prefix_credit_lifts_triage_and_harm_and_the_skip_bound_counts_them(kernel):
    # triage: node 1 (queue 0.1 s, within 0.15 s) misses with 0.2 s (+1 s, +5 s triage); with 96 of its 100
    # tokens cached, 0.104 s: both lifted, it beats node 0's 0.13 s. The skip bound must count the triage
    # penalty (without it: 6.2 - 1.1 > 0.13, skipped); the lift needs the router's SLO, not the class's.
    values = _values(2)
    values[cost_kernel.COL_INV_RATE] = 1e-3
    values[cost_kernel.COL_BASE_S] = [0.03, 0.1]
    knobs = dict(cand=(1,), cached=(96,), slo_ttft_s=0.15, ttft_penalty_s=1.0, triage_penalty_s=5.0)
    i, cost = _run(kernel, values, router_slo_ttft_s=0.15, **knobs)
    assert i == 1 and cost[1] == 1e-3 * 100 + 0.1 + 1.0 + 5.0  # ``cost``: before the credit
    assert _run(kernel, values, router_slo_ttft_s=0.1, **knobs)[0] == 0  # 0.104 s still misses the router's
    assert _run(kernel, values, router_slo_ttft_s=0.15, **{**knobs, "cached": (16,)})[0] == 0  # 0.184 s: misses
    # as on the numpy path, the lift checks the queue against the router's SLO too, even where the class's
    # (0.09 s, below node 1's 0.1 s queue) never charged the triage penalty: 1.2 - (0.096 + 1 + 5) < 0.05
    values[cost_kernel.COL_INV_RATE, 0] = 5e-4
    values[cost_kernel.COL_BASE_S, 0] = 0.0  # node 0: 0.05 s, meets 0.09 s
    i, cost = _run(kernel, values, router_slo_ttft_s=0.15, **{**knobs, "slo_ttft_s": 0.09})
    assert i == 1 and cost[1] == 1e-3 * 100 + 0.1 + 1.0
    # harm: node 1 decodes; 100 prompt tokens push its decodes to 0.035 s (+3 s), 4 uncached ones to 0.011 s
    values = _values(2)
    values[cost_kernel.COL_INV_RATE] = 1e-3
    values[cost_kernel.COL_BASE_S] = [0.05, 0.0]
    values[cost_kernel.COL_STEP_S] = 0.01
    values[cost_kernel.COL_CHUNK_S] = 1.0
    values[cost_kernel.COL_DECODERS] = [0.0, 4.0]
    knobs = dict(cand=(1,), cached=(96,), inv_steps=0.25, slo_tpot_s=0.03, slo_ttft_s=10.0, harm_penalty_s=3.0)
    i, cost = _run(kernel, values, **knobs)
    assert i == 1 and cost[1] == 1e-3 * 100 + 0.0 + 3.0
    assert _run(kernel, values, **{**knobs, "cand": ()})[0] == 0  # no holder: the penalty stands
    assert _run(kernel, values, **{**knobs, "cached": (16,)})[0] == 0  # 84 tokens: 0.031 s, still over


def test_the_kernel_reads_the_policy_row_layout():
    for name in ("MAX_PROMPT",):
        assert getattr(cost_kernel, f"COL_{name}") == 0
    for name in (
        "INV_RATE",
        "BASE_S",
        "STEP_S",
        "BACKLOG_S",
        "CHUNK_S",
        "HEADROOM",
        "LORA_LOAD_S",
        "DECODERS",
        "FLOOR_S",
    ):
        assert getattr(cost_kernel, f"COL_{name}") == getattr(hardware_aware, f"_COL_{name}"), name
    assert cost_kernel.NUM_COLUMNS == hardware_aware._NUM_COLUMNS


def test_without_numba_the_policy_decides_on_the_numpy_path(monkeypatch, caplog):
    monkeypatch.setattr(cost_kernel, "_compiled", [])
    monkeypatch.setitem(sys.modules, "numba", None)  # import numba -> ImportError
    with caplog.at_level(logging.WARNING, logger=cost_kernel.__name__):
        policy = HardwareAwarePolicy(RouterConfig())
    assert policy.kernel_name == "numpy" and "choose" not in vars(policy)
    assert "numpy path" in caplog.text
    view = _view("n0", {"gpu": "l4", "max_model_len": 2048, "num_device_blocks": 64, "num_free_device_blocks": 64,
                        "num_running": 0, "num_waiting": 0, "num_swapped": 0, "queued_prefill_tokens": 0,
                        "decode_batch_size": 0, "prefill_tok_per_s": 0.0, "decode_step_ms": 0.0, "num_inflight": 0,
                        "inflight_prefill_tokens": 0, "lora_resident": (), "lora_load_s": 0.0})  # fmt: skip
    assert policy.choose(RouteRequest("r", "m", 10, 4, ()), ClusterSnapshot(0.0, (view,))) == "n0"


@needs_numba
def test_no_writable_cache_directory_compiles_uncached(monkeypatch, caplog):
    """A read-only install and no writable user cache: numba finds no cache locator and refuses
    ``cache=True`` at decoration; the kernel is compiled uncached instead of failing the router."""
    import numba
    from numba.core import config as numba_config

    monkeypatch.setattr(numba_config, "CACHE_LOCATOR_CLASSES", "IPythonCacheLocator")  # none applies to a file
    with pytest.raises(RuntimeError, match="no locator available"):
        numba.njit(cache=True)(least_cost_index)
    with caplog.at_level(logging.INFO, logger=cost_kernel.__name__):
        kernel = cost_kernel._compile(numba)
    assert kernel is not None and "uncached" in caplog.text
    values = _values(2)
    values[cost_kernel.COL_BASE_S] = [0.2, 0.1]
    assert _run(kernel, values)[0] == 1


@settings(max_examples=30, deadline=None)
@given(st.lists(profiles, min_size=3, max_size=10), st.lists(requests, min_size=2, max_size=8))
def test_one_policy_on_tables_of_different_sizes_in_turn(pool, specs):
    """A group and its subgroup (different tables, different sizes) decided on in turn share the kernel's
    buffers: the choices and costs stay those of the numpy path."""
    config = RouterConfig(slo_tpot_miss_penalty_s=2.0)
    nodes = tuple(_view(f"n{k:02d}", profile) for k, profile in enumerate(pool))
    snapshots = (ClusterSnapshot(0.0, nodes), ClusterSnapshot(0.0, nodes[1::2]))
    numpy_path, kernel_path = HardwareAwarePolicy(config, use_kernel=False), HardwareAwarePolicy(config)
    if kernel_path.kernel_name == "numpy":  # no numba: its uncompiled source stands in
        kernel_path._kernel = CostKernel(config, least_cost_index)
        kernel_path.choose = kernel_path._choose_compiled
    for k, spec in enumerate(specs):
        request, snapshot = _request(k, spec), snapshots[k % 2]
        chosen = numpy_path.choose(request, snapshot)
        assert kernel_path.choose(request, snapshot) == chosen
        n = len(snapshot.nodes)
        assert _bits(kernel_path._kernel.cost[:n]) == _bits(numpy_path._cost[:n])
        if chosen is not None:
            numpy_path.on_routed(request, chosen)
            kernel_path.on_routed(request, chosen)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from((0.3, 1.0, 3.0)),  # the TTFT SLO
    st.sampled_from((0.02, 0.05, 0.1)),  # the TPOT SLO
    st.lists(profiles, min_size=2, max_size=4),
    st.integers(0, 3),  # the holder
    st.integers(0, 80),  # prompt blocks past the shared prefix
    st.sampled_from((2, 5, 17, 200)),  # max tokens
    st.sampled_from((None, 0.2)),  # the class's TTFT SLO
)
def test_prefix_holders_whose_credit_lifts_triage_and_harm(slo_ttft_s, slo_tpot_s, pool, at, extra, max_tokens, slo):
    """Random tables where one node holds most of the prompt and both goodput penalties act: the credit's
    lifts (and its skip bound) decide often here, and the kernel must decide as the numpy path."""
    config = RouterConfig(slo_ttft_s=slo_ttft_s, slo_tpot_s=slo_tpot_s, slo_tpot_miss_penalty_s=1.0)
    nodes = tuple(_view(f"n{k}", profile) for k, profile in enumerate(pool))
    snapshot = ClusterSnapshot(0.0, nodes)
    numpy_path = HardwareAwarePolicy(config, use_kernel=False)
    python_path = HardwareAwarePolicy(config, use_kernel=False)
    python_path._kernel = CostKernel(config, least_cost_index)
    python_path.choose = python_path._choose_compiled
    policies = [numpy_path, python_path] + ([HardwareAwarePolicy(config)] if NUMBA is not None else [])
    shared = PREFIXES[1]  # 80 blocks: 1280 tokens
    for policy in policies:
        policy.on_routed(RouteRequest("earlier", "m", len(shared) * BLOCK, 1, shared), nodes[at % len(nodes)].node_id)
    chain = shared + tuple(range(5000, 5000 + extra))
    request = RouteRequest("r", "m", len(chain) * BLOCK, max_tokens, chain, slo_ttft_s=slo)
    chosen = [policy.choose(request, snapshot) for policy in policies]
    assert chosen[1:] == chosen[:-1], (request, chosen)
    n = len(nodes)
    for policy in policies[1:]:
        assert _bits(policy._kernel.cost[:n]) == _bits(numpy_path._cost[:n])


@pytest.mark.parametrize("kernel", KERNELS)
def test_hand_made_long_prompt_is_a_lost_cause(kernel):
    """A fast node (1e-4 s a token) meets a 1 s target for a 2,000-token prompt (0.2 + 0.1 s), a slow one
    (1e-3) does not. Sacrifice alone sends it to the fast node; with long_s below the fast node's prefill
    (0.2 s) it misses everywhere by definition, a lost cause, and goes to the slow one; at long_s 0.25 it is
    not long. With 1,600 tokens cached on the fast node (400 left: 0.04 s) it is not long there: credited."""
    values = _values(2)
    values[cost_kernel.COL_BASE_S] = [0.1, 0.1]
    values[cost_kernel.COL_INV_RATE] = [1e-4, 1e-3]
    values[cost_kernel.COL_MAX_PROMPT] = 1e6
    knobs = {"slo_ttft_s": 1.0, "ttft_penalty_s": 10.0, "sacrifice_s": 10.0}
    assert _run(kernel, values, num_prompt_tokens=2000, **knobs)[0] == 0
    i, cost = _run(kernel, values, num_prompt_tokens=2000, long_s=0.15, **knobs)
    assert i == 1
    assert list(cost) == [1e-4 * 2000 + 0.1 + 10.0 + 10.0, 1e-3 * 2000 + 0.1 + 10.0 + 0.1 * 10.0]  # miss + charge
    assert _run(kernel, values, num_prompt_tokens=2000, long_s=0.25, **knobs)[0] == 0
    assert _run(kernel, values, num_prompt_tokens=2000, long_s=0.15, **{**knobs, "sacrifice_s": 0.0})[0] == 0
    assert _run(kernel, values, num_prompt_tokens=2000, long_s=0.15, cand=(0,), cached=(1600,), **knobs)[0] == 0
    assert _run(kernel, values, num_prompt_tokens=2000, long_s=0.03, cand=(0,), cached=(1600,), **knobs)[0] == 1
