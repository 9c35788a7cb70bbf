"""Tensor parallelism over NCCL: runs where at least two CUDA devices exist, skips cleanly elsewhere."""

from __future__ import annotations

import pytest
import torch

from backends.runner_driver import drive_greedy
from backends.torch import TorchModelRunner
from backends.torch.tp_group import TPConfig
from backends.torch.tp_launch import run_ranks, tp_generate

pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two CUDA devices"),
]

PROMPTS = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]


@pytest.mark.parametrize("allreduce", ["flat", "hierarchical", "sharded"])
def test_tp2_over_nccl_is_token_identical(tiny, allreduce):
    config, sd, _ = tiny
    ref = drive_greedy(TorchModelRunner(config, device="cuda:0", state_dict=sd, progress=False), PROMPTS, 8)[0]
    cfg = TPConfig(size=2, allreduce=allreduce, domain_size=1 if allreduce != "flat" else 0)
    (ids, _), _ = run_ranks(tp_generate, cfg, (config, PROMPTS, 8, sd), device="cuda")
    assert ids == ref
