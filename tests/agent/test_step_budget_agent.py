"""`zoo agent --max-num-batched-tokens auto`: the step token budget sized from the start-up profile and the TPOT SLO."""

from __future__ import annotations

import argparse
import logging

import anyio
import pytest

from agent.node_core import NodeCore
from backends.sim.engine import build_sim_engine
from engine.clock import ManualClock
from engine.config import SchedulerConfig
from transport.messages import NodeHello
from zoo.agent_cmd import add_agent_args, agent_from_args


def _core(gpu: str, budget: int = 2048) -> NodeCore:
    engine = build_sim_engine(
        "sim:llama-3-8b",
        gpu,
        scheduler_config=SchedulerConfig(max_num_batched_tokens=budget, max_num_seqs=32),
        realtime=False,
        clock=ManualClock(),
    )
    return NodeCore(engine, "n")


def test_node_core_sizes_its_budget_from_its_profile_never_above_the_built_one():
    fast, slow = _core("h100-sxm", budget=8192), _core("l4")
    with pytest.raises(RuntimeError, match="profile"):
        fast.size_step_budget(0.1)
    for core in (fast, slow):
        core.profile()
    fast_budget, slow_budget = fast.size_step_budget(0.1), slow.size_step_budget(0.1)
    assert fast.engine.scheduler_config.max_num_batched_tokens == fast_budget.tokens
    assert slow.engine.scheduler_config.max_num_batched_tokens == slow_budget.tokens == 256  # the floor
    assert 2048 < fast_budget.tokens < 8192  # an H100 takes chunks an L4 cannot
    assert fast_budget.decode_step_s < slow_budget.decode_step_s
    small = _core("h100-sxm", budget=128)  # built with less than the floor: the built budget wins
    small.profile()
    assert small.size_step_budget(0.1).tokens == 128


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_agent_args(parser)
    return parser.parse_args(list(argv))


def test_auto_needs_the_profile_and_a_number_or_auto():
    with pytest.raises(ValueError, match="profile"):
        agent_from_args(
            _parse(
                "--backend",
                "sim",
                "--model",
                "sim:llama-3-8b",
                "--gpu-profile",
                "l4",
                "--max-num-batched-tokens",
                "auto",
                "--no-profile",
            )
        )
    with pytest.raises(SystemExit):
        _parse("--max-num-batched-tokens", "lots")
    fixed = agent_from_args(
        _parse(
            "--backend", "sim", "--model", "sim:llama-3-8b", "--gpu-profile", "l4", "--max-num-batched-tokens", "300"
        )
    )
    assert fixed.config.step_budget_tpot_slo_s is None


@pytest.mark.anyio
async def test_an_auto_agent_logs_and_serves_with_its_sized_budget(router_peer, caplog):
    cp = router_peer
    sim = ("--backend", "sim", "--model", "sim:llama-3-8b", "--gpu-profile", "a100-40gb")
    args = _parse(
        "--control", cp.endpoint, "--node-id", "n1", *sim, "--max-num-batched-tokens", "auto", "--tpot-slo", "0.1"
    )
    agent = agent_from_args(args)
    assert agent.config.step_budget_tpot_slo_s == 0.1
    with caplog.at_level(logging.INFO, logger="agent.node_agent"):
        async with anyio.create_task_group() as tg:
            await tg.start(agent.run)
            _, hello = await cp.expect(NodeHello)
            assert hello.prefill_tok_per_s > 0  # measured at start-up
            # A100: ~15 ms decode step, ~53 us per prefill token: (80 - 15) / 0.053 = 1232 tokens of the 2048 built
            assert agent.engine.scheduler_config.max_num_batched_tokens == 1232
            tg.cancel_scope.cancel()
    assert any("step token budget 1232 tokens" in r.getMessage() for r in caplog.records)
