"""The node's sampler seed (`zoo agent --seed`, vLLM's; EngineConfig.seed): requests without a seed of their own
sample the same tokens on two nodes of one seed and others on a node of another; a request's own seed is its own
whatever the node's."""

from __future__ import annotations

import pytest

from backends.fake.byte_tokenizer import ByteTokenizer
from backends.torch import TorchModelRunner
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from zoo.cli import build_parser
from zoo.engine_args import engine_config_from_args


def _sampled(model, node_seed: int, request_seed: int | None = None) -> list[int]:
    runner = TorchModelRunner(model, seed=node_seed)
    engine = LLMEngine(runner, ByteTokenizer(), SchedulerConfig(max_model_len=128), CacheConfig(4, 64, 0))
    params = SamplingParams(temperature=1.0, max_tokens=24, ignore_eos=True, seed=request_seed)
    request_id = engine.add_request([5, 6, 7], params)
    tokens: list[int] = []
    while engine.has_unfinished_requests():
        tokens += [t for out in engine.step() if out.req_id == request_id for t in out.new_token_ids]
    return tokens


def test_unseeded_requests_follow_the_nodes_seed_and_a_seeded_one_its_own(tiny):
    _, _, model = tiny
    assert _sampled(model, 7) == _sampled(model, 7)
    assert _sampled(model, 7) != _sampled(model, 8)
    assert _sampled(model, 7, request_seed=123) == _sampled(model, 8, request_seed=123)


def test_the_agents_seed_flag_reaches_its_engine_config():
    args = build_parser().parse_args(["agent", "--seed", "42"])
    assert engine_config_from_args(args).seed == 42
    assert engine_config_from_args(build_parser().parse_args(["agent"])).seed == 0  # vLLM's default
    assert build_parser().parse_args(["generate", "hi", "--seed", "3"]).seed == 3  # zoo generate's: its request's
    with pytest.raises(ValueError, match="seed must be"):
        EngineConfig(seed=-1)
