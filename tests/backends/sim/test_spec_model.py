"""Speculative decoding on a simulated node: drawn acceptance, draft and verification costs, adaptive k.

Virtual time: a ManualClock advanced by each step's predicted time, so these are exact and fast.
"""

from __future__ import annotations

import pytest

from backends.sim.cost_model import NodeHardware, StepCostModel
from backends.sim.engine import build_sim_engine
from backends.sim.model_shapes import sim_model
from backends.sim.spec_model import SimDraftProposer, SimSpecModel
from engine.clock import ManualClock
from engine.config import SchedulerConfig
from engine.sampling_params import SamplingParams
from engine.spec import SpecDecodeConfig, Speculator


def test_acceptance_is_geometric_with_rate_alpha():
    spec = SimSpecModel(alpha=0.7, seed=1)
    draws = [spec.num_accepted(4) for _ in range(20_000)]
    expected = sum(0.7**i for i in range(1, 5))  # E[accepted of 4] = alpha + alpha^2 + alpha^3 + alpha^4
    assert sum(draws) / len(draws) == pytest.approx(expected, rel=0.03)
    assert max(draws) == 4 and min(draws) == 0
    with pytest.raises(ValueError, match="alpha"):
        SimSpecModel(alpha=1.5)


def _tpot_ms(batch: int, speculate: bool, adaptive: bool = True) -> tuple[float, Speculator | None]:
    """Mean TPOT of ``batch`` requests (512-token prompts, 64 outputs) of llama-3-8b on an H100, drafting
    with llama-3.2-1b on the same GPU at the literature's alpha."""
    clock = ManualClock()
    engine = build_sim_engine(
        "sim:llama-3-8b",
        "h100-sxm",
        realtime=False,
        clock=clock,
        detokenize=False,
        scheduler_config=SchedulerConfig(max_num_batched_tokens=8192, max_num_seqs=256),
    )
    speculator = None
    if speculate:
        runner = engine.runner
        runner.spec = SimSpecModel(draft_cost=StepCostModel(sim_model("sim:llama-3.2-1b"), NodeHardware("h100-sxm")))
        config = SpecDecodeConfig(num_spec_tokens=5, adaptive=adaptive, max_batch_size=0)
        speculator = engine.speculator = Speculator(SimDraftProposer(runner.dummy_token_id), config, clock)
    params = SamplingParams(max_tokens=64, ignore_eos=True)
    for _ in range(batch):
        engine.add_request([5] * 512, params)
    finished = []
    while engine.has_unfinished_requests():
        pending = engine.start_step()
        clock.advance(pending.step_time_s)
        finished += [o for o in engine.finish_step(pending) if o.finished]
    return 1e3 * sum(o.metrics.tpot_s for o in finished) / len(finished), speculator


def test_speculation_lowers_tpot_at_batch_1_and_adaptive_k_beats_a_fixed_k_when_busy():
    plain_1, _ = _tpot_ms(1, False)
    spec_1, speculator_1 = _tpot_ms(1, True)
    assert spec_1 < plain_1
    stats = speculator_1.make_stats()
    assert 0.4 < stats.acceptance_rate < 0.9 and stats.mean_accepted_tokens > 1.3

    plain_64, _ = _tpot_ms(64, False)
    fixed_64, _ = _tpot_ms(64, True, adaptive=False)
    adaptive_64, speculator_64 = _tpot_ms(64, True)
    assert fixed_64 > plain_64  # k = 5 drafts every step cost a busy verifier more than they save
    assert adaptive_64 < fixed_64
    assert speculator_64.verify_cost > speculator_1.verify_cost  # verification costs more in a big batch


def test_a_simulated_node_speculates_from_its_engine_config():
    from backends.builder import build_engine
    from engine.config import EngineConfig

    spec = SpecDecodeConfig(method="model", draft_model="sim:llama-3.2-1b", num_spec_tokens=3)
    config = EngineConfig(backend="sim", model="sim:llama-3-8b", gpu_profile="h100-sxm", speculative=spec)
    engine = build_engine(config, clock=ManualClock())
    assert engine.speculator is not None and engine.runner.spec.draft_cost is not None
    bad = SpecDecodeConfig(method="model", draft_model="sim:llama-2-7b")  # another tokenizer
    with pytest.raises(ValueError, match="vocabulary has 32000 tokens, the target's 128256"):
        build_engine(EngineConfig(backend="sim", model="sim:llama-3-8b", gpu_profile="h100-sxm", speculative=bad))
