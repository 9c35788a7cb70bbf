"""The compiled hardware_aware decision (cost_kernel.py) against the numpy path and the scalar formula.

Hypothesis builds random node tables (nodes repeated to force exact ties, prompts some nodes cannot take,
KV-short and swapped nodes, LoRA adapters held by some, prefix holders, every penalty on or off, SLO triage,
decode protection and bin packing (gated by TPOT or not) included, with the class's SLOs or the router's) and asks
three implementations on the same snapshot: the numpy passes (``use_kernel=False``), the numba kernel, and
the kernel's Python source run uncompiled (so the logic is tested where numba is missing). Choices must be
equal and the per-node costs equal bit for bit; the choice must also be a least ``predict_cost_s`` node.
Hand-made tables against each documented rule: test_cost_kernel_hand_made.py.
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
from tests.controlplane.router.test_cost_kernel_hand_made import KERNELS, _run, _values  # noqa: F401 (the mechanisms' tests import them from here)

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
    long_ok = (
        policy._long_ok
    )  # the long-prompt gate's answer for this decision (RouterConfig.slo_sacrifice_long_vs_late)
    lost = lost_cause_fastest_rate(snapshot.nodes, request, scalar_config, scalar_config.slo_ttft_s, long_ok)
    costs = {
        v.node_id: predict_cost_s(
            v, request, scalar_config, min(matched.get(v.node_id, 0) * BLOCK, request.num_prompt_tokens), spare, lost,
            long_ok,
        )
        for v in fits
    }  # fmt: skip
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
