"""The compiled decision kernel (cost_kernel.py) on hand-made tables, in CPython and compiled by numba: ties,
NaNs, impossible nodes, adapters, the prefix credit, SLO triage, the TPOT terms, decode protection and
long-prompt sacrifice, each against its documented rule; and the uncached compile. (The kernel against the
numpy path and the scalar formula on random fleets: test_cost_kernel.py.)"""

from __future__ import annotations

import logging

import numpy as np
import pytest

from controlplane.router.policies import cost_kernel
from controlplane.router.policies.cost_kernel import compiled_kernel, least_cost_index

NUMBA = compiled_kernel()
needs_numba = pytest.mark.skipif(NUMBA is None, reason="numba not importable: the numpy path decides")


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
