"""Heterogeneous speculative pairs in the fleet simulator: a round's time, the drafter's GPU share, acceptance
accounting, alpha = 0 never beating plain decoding, determinism, ``zoo sim --spec-pairs``. Who pairs with whom is
the control plane's policy's choice: tests/sim/test_spec_pair_control.py.

Virtual time only (a ManualClock or the simulator's clock): exact and fast.
"""

from __future__ import annotations

import json

import pytest

from backends.sim.cost_model import NodeHardware, StepCostModel
from backends.sim.engine import build_sim_engine
from backends.sim.model_shapes import sim_model
from engine.clock import ManualClock
from engine.config import SchedulerConfig
from engine.sampling_params import SamplingParams
from engine.spec import SpecDecodeConfig, Speculator
from sim.des import FleetSimulator
from sim.fleet import parse_fleet
from sim.spec_pair_nodes import DraftHostRunner, PairedFleet, PairProposer, PairSpecModel, paired_fleet, spec_pairs_info
from sim.spec_pairs import SpecPairsConfig, crossover_batch_size, pair_costs

TARGET, DRAFT = sim_model("sim:llama-3-8b"), sim_model("sim:llama-3.2-1b")


def _fleet(pools: list[dict]):
    return parse_fleet(
        {
            "name": "p",
            "model": "sim:llama-3-8b",
            "scheduler": {"max_num_batched_tokens": 512, "max_num_seqs": 32},
            "cells": [{"name": "c", "pools": pools}],
        }
    )


def test_round_time_is_hop_plus_k_draft_steps_plus_one_verify_step():
    costs = pair_costs(TARGET, DRAFT, NodeHardware("a100-40gb"), NodeHardware("t4", 2), hop_s=0.001)
    draft = StepCostModel(DRAFT, NodeHardware("t4", 2))
    target = StepCostModel(TARGET, NodeHardware("a100-40gb"))
    batch, k, ctx = 4, 3, 800.0
    # the verify step: 4 requests x (k + 1) new tokens, each row sampled, attention over ctx + the new ones
    verify = target.step_time_s(16, 4, 16, 16 * (ctx + 2.5), 3200)
    assert costs.verify_step_s(batch, k, ctx) == pytest.approx(verify)
    assert costs.round_time_s(batch, k, ctx) == pytest.approx(0.001 + 3 * draft.decode_step_s(4, ctx) + verify)
    assert costs.round_time_s(batch, 0, ctx) == target.decode_step_s(4, ctx)  # k = 0: a plain step
    expected = (1 - 0.7**4) / 0.3  # Leviathan et al. eq. 1 with k = 3
    assert costs.speedup(batch, k, ctx, 0.7) == pytest.approx(
        expected * target.decode_step_s(4, ctx) / costs.round_time_s(batch, k, ctx)
    )
    # alpha = 0 never gains; the crossover batch is the last one whose best k still gains
    assert costs.best(1, ctx, 0.0, 4) == (0, 1.0)
    b = crossover_batch_size(costs, ctx, 0.7, 4)
    assert b >= 1 and costs.best(b, ctx, 0.7, 4)[0] > 0 and costs.best(b + 1, ctx, 0.7, 4)[0] == 0


def test_drafters_are_the_weak_gpus_unless_named():
    fleet = _fleet(
        [{"gpu": "h100-sxm", "count": 1}, {"gpu": "a100-40gb", "count": 1}, {"gpu": "l4", "count": 2},
         {"gpu": "t4", "count": 1, "tp": 2}]
    )  # fmt: skip
    assert paired_fleet(fleet, SpecPairsConfig(mode="none")) is fleet
    auto = paired_fleet(fleet, SpecPairsConfig(mode="auto"))
    assert auto.drafter_ids == ["c/l4-00", "c/l4-01", "c/t4-00"]  # an 8B step >= 2x the H100's
    named = paired_fleet(fleet, SpecPairsConfig(mode="auto", drafters=("a100-40gb",)))
    assert named.drafter_ids == ["c/a100-40gb-00"]
    with pytest.raises(ValueError, match="mode"):
        SpecPairsConfig(mode="sometimes")
    with pytest.raises(ValueError, match="no draft model known"):
        SpecPairsConfig(mode="auto").draft_for(sim_model("sim:smollm2-135m"))


def _host(clock: ManualClock, share: float = 1.0) -> DraftHostRunner:
    engine = build_sim_engine("sim:llama-3-8b", "l4", realtime=False, clock=clock, detokenize=False)
    host = DraftHostRunner(engine.runner, clock, share)
    host.engine = engine
    engine.runner = host
    return host


def test_drafter_pays_for_its_drafts_with_its_own_serving_time():
    clock = ManualClock()
    host = _host(clock)
    engine = host.engine
    engine.add_request([7] * 64, SamplingParams(max_tokens=8, ignore_eos=True))
    pending = engine.start_step()  # its own step at t = 0
    base = host.runner.predict_step_s(pending.batch)
    assert pending.step_time_s == pytest.approx(base)
    clock.advance(pending.step_time_s / 2)
    host.charge(0.004)  # a draft interrupts that step: its next step pays for it
    clock.advance(pending.step_time_s / 2)
    engine.finish_step(pending)
    pending = engine.start_step()
    assert pending.step_time_s == pytest.approx(host.runner.predict_step_s(pending.batch) + 0.004)
    clock.advance(pending.step_time_s)
    engine.finish_step(pending)
    host.charge(0.010)  # a draft while it is idle ...
    clock.advance(0.004)
    pending = engine.start_step()  # ... delays a step started during it by the rest, 6 ms
    assert pending.step_time_s == pytest.approx(host.runner.predict_step_s(pending.batch) + 0.006)
    assert host.draft_s_total == pytest.approx(0.014) and host.num_rounds == 2


def test_drafter_declines_when_its_own_requests_wait_or_its_share_is_spent():
    clock = ManualClock()
    host = _host(clock, share=0.1)
    assert host.can_draft()
    host.charge(1.0)  # far past its bucket
    assert not host.can_draft()
    clock.advance(20.0)  # refilled at 10% of the time
    assert host.can_draft()
    engine = host.engine
    for _ in range(5):
        engine.add_request([7] * 32, SamplingParams(max_tokens=4, ignore_eos=True))
    assert not host.can_draft()  # a backlog of its own requests waiting for the GPU
    assert host.num_declined == 2


def _verifier(alpha: float, k: int, clock: ManualClock, host) -> tuple:
    engine = build_sim_engine(
        "sim:llama-3-8b",
        "a100-40gb",
        realtime=False,
        clock=clock,
        detokenize=False,
        scheduler_config=SchedulerConfig(max_num_batched_tokens=4096, max_num_seqs=64),
    )
    runner = engine.runner
    spec = PairSpecModel(alpha, StepCostModel(DRAFT, NodeHardware("t4", 2)), seed=3)
    spec.host, spec.hop_s = host, 0.001
    runner.spec = spec
    config = SpecDecodeConfig(method="model", num_spec_tokens=k, adaptive=False, max_batch_size=0)
    engine.speculator = Speculator(PairProposer(runner.dummy_token_id, spec), config, clock)
    return engine, spec


@pytest.mark.parametrize("alpha", [0.0, 1.0])
def test_acceptance_accounting_and_round_time(alpha):
    clock = ManualClock()
    host = _host(clock)
    engine, spec = _verifier(alpha, 3, clock, host)
    params = SamplingParams(max_tokens=25, ignore_eos=True)
    for _ in range(2):
        engine.add_request([9] * 200, params)
    outs = {}
    while engine.has_unfinished_requests():
        pending = engine.start_step()
        batch = pending.batch
        reqs = batch.requests
        if any(r.spec_token_ids for r in reqs):  # a round: hop + k draft steps + the verify step
            qs = [len(r.token_ids) + len(r.spec_token_ids) for r in reqs]
            kv_read = sum(r.start_pos for r in reqs)
            attn = sum(q * (r.start_pos + (q + 1) / 2) for q, r in zip(qs, reqs, strict=True))
            verify = engine.runner.cost.step_time_s(sum(qs), len(reqs), sum(qs), attn, kv_read)
            ctx = kv_read // len(reqs)
            n, k = sum(1 for r in reqs if r.spec_token_ids), max(len(r.spec_token_ids) for r in reqs)
            draft_step = spec.draft_cost.step_time_s(n, n, n, n * (ctx + 1.0), n * ctx)
            assert pending.step_time_s == pytest.approx(verify + 0.001 + k * draft_step)
        clock.advance(pending.step_time_s)
        for o in engine.finish_step(pending):
            outs[o.req_id] = o
    stats = engine.make_spec_stats()
    assert stats.num_drafts_total > 0
    assert stats.acceptance_rate == alpha
    assert stats.mean_accepted_tokens == (1.0 + stats.num_draft_tokens_total / stats.num_drafts_total if alpha else 1.0)
    assert len(outs) == 2 and all(o.finished and o.num_output_tokens == 25 for o in outs.values())
    assert spec.num_rounds == host.num_rounds > 0
    assert spec.catch_up_s_total > 0  # each request's prompt prefilled once on the drafter, charged to it
    assert host.draft_s_total >= spec.catch_up_s_total


def _run(fleet, workload, policy="round_robin"):
    return FleetSimulator(fleet, workload, policy, seed=0).run()


def test_alpha_zero_never_beats_plain_and_runs_repeat(tiny_workload):
    fleet = _fleet([{"gpu": "h100-sxm", "count": 1}, {"gpu": "l4", "count": 1}])
    workload = tiny_workload(num=40, gap_s=0.03, prompt=300, output=40)
    plain = _run(fleet, workload)
    paired = paired_fleet(fleet, SpecPairsConfig(mode="all", alpha=0.0, context_tokens=320))
    assert isinstance(paired, PairedFleet) and paired.drafter_ids == ["c/l4-00"]
    spec = _run(paired, workload)
    by_id = {r.req_id: r for r in plain.records}
    assert all(r.node_id == by_id[r.req_id].node_id for r in spec.records)  # round robin: the same placement
    # in the aggregate (one request may move a few ms either way as step boundaries shift)
    for metric in ("tpot_s", "e2e_s"):
        with_pairs = sorted(getattr(r, metric) for r in spec.records)
        without = sorted(getattr(r, metric) for r in plain.records)
        assert sum(with_pairs) >= sum(without)  # the mean
        assert with_pairs[len(with_pairs) * 99 // 100] >= without[len(without) * 99 // 100]  # the P99
    (pair,) = spec_pairs_info(paired)["pairs"]  # forced: the idle L4 drafted for the H100 until it got busy
    assert pair["verifier"] == "c/h100-sxm-00" and pair["drafters"] == ["c/l4-00"]
    assert pair["spec_rounds"] > 0 and pair["acceptance_rate"] == 0.0  # it did try, and none was accepted
    again = _run(paired, workload)  # determinism: the same records, event for event
    assert [(r.req_id, r.node_id, r.first_token_s, r.finish_s) for r in again.records] == [
        (r.req_id, r.node_id, r.first_token_s, r.finish_s) for r in spec.records
    ]


def test_a_gaining_pair_lowers_tpot_at_low_load(tiny_workload):
    fleet = _fleet([{"gpu": "a100-40gb", "count": 1}, {"gpu": "t4", "count": 1, "tp": 2}])
    workload = tiny_workload(num=12, gap_s=0.5, prompt=200, output=60)
    plain = _run(fleet, workload)
    # the control plane's policy with a 5% margin pairs them (its prior alpha 0.7 predicts ~7% better)
    paired = paired_fleet(fleet, SpecPairsConfig(mode="auto", alpha=0.9, context_tokens=230, policy_min_gain=0.05))
    spec = _run(paired, workload)
    assert paired.control.pairing.policy.pairs == {"c/a100-40gb-00": "c/t4-00"}
    on_a100 = [r for r in spec.records if r.node_id == "c/a100-40gb-00"]
    plain_by_id = {r.req_id: r for r in plain.records}
    assert on_a100
    assert sum(r.tpot_s for r in on_a100) < 0.95 * sum(plain_by_id[r.req_id].tpot_s for r in on_a100)


def test_zoo_sim_spec_pairs_states_alpha(capsys):
    from sim.cli import main

    args = ["--fleet", "small", "--trace", "conv", "--load", "0.3", "--policy", "round_robin", "--max-requests", "20"]
    assert main([*args, "--spec-pairs", "all", "--spec-alpha", "0.6", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    pairs = out["info"]["spec_pairs"]
    assert pairs["mode"] == "all" and pairs["alpha"] == 0.6 and pairs["draft_model"] == "sim:llama-3.2-1b"
    assert pairs["decided_by"].startswith("controlplane/spec_pairs.py") and pairs["drafters"] == [
        "small/l4-00",
        "small/l4-01",
    ]
    assert pairs["num_pairs_total"] >= 1 and pairs["orders"][0]["reason"].startswith("paired: predicted TPOT")
    assert main([*args, "--spec-pairs", "all", "--spec-alpha", "1.5"]) == 2  # a clear error, no traceback
    assert "alpha must be in [0, 1]" in capsys.readouterr().err
    assert main([*args, "--spec-pairs", "auto", "--realtime"]) == 2  # pairs run in virtual time only


def test_drafter_kv_room_shrinks_by_the_draft():
    fleet = _fleet([{"gpu": "h100-sxm", "count": 1}, {"gpu": "l4", "count": 1}])
    paired = paired_fleet(fleet, SpecPairsConfig(mode="all"))
    l4 = next(n for n in fleet.nodes if n.hardware.profile == "l4")
    plain_blocks = fleet.node_engine(l4).cache_config.num_device_blocks
    paired_blocks = paired.node_engine(l4).cache_config.num_device_blocks
    assert 0 < paired_blocks < plain_blocks
    assert isinstance(paired.node_engine(l4).runner, DraftHostRunner)
