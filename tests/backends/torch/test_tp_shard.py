"""Tensor-parallel sharding (no processes): what each rank holds, and the refusals."""

from __future__ import annotations

import pytest
import torch

from backends.link_model import LinkModel
from backends.runner_driver import tiny_config
from backends.torch import random_state_dict
from backends.torch.tp_group import TPConfig
from backends.torch.tp_shard import check_tp_size, shard_config, shard_tensors

SMOLLM2_SHAPE = dict(hidden_size=576, intermediate_size=1536, num_attention_heads=9, num_key_value_heads=3, head_dim=64)


def test_gqa_divisibility_is_refused_with_the_reason():
    with pytest.raises(ValueError, match="num_key_value_heads 2 is not a multiple of tp 4"):
        shard_config(tiny_config(), 4)
    smol = tiny_config(**SMOLLM2_SHAPE)
    with pytest.raises(ValueError, match="num_attention_heads 9 is not a multiple of tp 2"):
        check_tp_size(smol, 2)
    local = shard_config(smol, 3)  # 9 heads over 3 KV heads: 3 ranks of 3 heads and 1 KV head
    assert (local.num_attention_heads, local.num_key_value_heads, local.intermediate_size) == (3, 1, 512)
    assert shard_config(smol, 1) is smol
    with pytest.raises(ValueError, match="positive int"):
        check_tp_size(smol, 0)


def test_shards_reassemble_the_full_weights():
    config = tiny_config()
    sd = random_state_dict(config, seed=3)
    shards = [dict(shard_tensors(config, sd.items(), r, 2)) for r in range(2)]
    for name, full in sd.items():
        parts = [s[name] for s in shards]
        if name.endswith(("o_proj.weight", "down_proj.weight")):
            assert torch.equal(torch.cat(parts, dim=1), full), name  # row-parallel: input columns split
            assert parts[0].shape[1] == full.shape[1] // 2
        elif name.endswith(("q_proj.weight", "k_proj.weight", "v_proj.weight", "gate_proj.weight", "up_proj.weight")):
            assert torch.equal(torch.cat(parts, dim=0), full), name  # column-parallel: output rows split
            assert parts[0].shape[0] == full.shape[0] // 2
        else:
            assert all(p is full for p in parts), name  # replicated
    # rank 1's k rows are the second KV head's
    d = config.head_dim
    k = "model.layers.0.self_attn.k_proj.weight"
    assert torch.equal(shards[1][k], sd[k][d:])
    with pytest.raises(ValueError, match="tp rank 2 outside"):
        list(shard_tensors(config, sd.items(), 2, 2))


def test_tp_config_validation():
    assert TPConfig(size=4, allreduce="hierarchical", domain_size=2, compression="int8").fast_domain == 2
    assert TPConfig(size=4, allreduce="hierarchical").fast_domain == 4
    with pytest.raises(ValueError, match="allreduce must be one of"):
        TPConfig(size=2, allreduce="tree")
    assert TPConfig(size=4, allreduce="sharded", domain_size=2, compression="bf16").fast_domain == 2
    with pytest.raises(ValueError, match="compression applies"):
        TPConfig(size=2, compression="bf16")
    with pytest.raises(ValueError, match="must divide"):
        TPConfig(size=4, allreduce="hierarchical", domain_size=3)
    with pytest.raises(ValueError, match="compression must be one of"):
        TPConfig(size=2, allreduce="hierarchical", compression="fp4")


def test_link_model_prices_the_two_algorithms():
    link = LinkModel(domain_size=2, fast_gbps=4.0, slow_gbps=1.0, fast_latency_us=0.0, slow_latency_us=0.0)
    s = 8e6  # bytes
    assert link.seconds(0, 1, s) == pytest.approx(s / 4e9)
    assert link.seconds(1, 2, s) == pytest.approx(s / 1e9)
    # ring over 4 ranks: 6 steps of s/4 on a ring that crosses the slow link -> 1.5 s/B_slow
    assert link.ring_all_reduce_s(4, s) == pytest.approx(1.5 * s / 1e9)
    # leader-based: s/B_fast twice + the (compressed) partial once over the slow link
    assert link.hierarchical_all_reduce_s(4, s, "none") == pytest.approx(0.5 * s / 1e9 + s / 1e9)
    assert link.hierarchical_all_reduce_s(4, s, "bf16") == pytest.approx(0.5 * s / 1e9 + 0.5 * s / 1e9)
    assert link.ring_all_reduce_s(4, s) / link.hierarchical_all_reduce_s(4, s, "int8") > 1.9
    assert link.ring_all_reduce_s(1, s) == link.hierarchical_all_reduce_s(1, s) == 0.0
    # sharded: half the tensor per rank, reduce-scatter + all-gather in the domain, each half over its own link
    assert link.sharded_all_reduce_s(4, s, "none") == pytest.approx(2 * 0.5 * s / 4e9 + 0.5 * s / 1e9)
    assert link.ring_all_reduce_s(4, s) / link.sharded_all_reduce_s(4, s) == pytest.approx(2.0)
    with pytest.raises(ValueError, match="slow_gbps"):
        LinkModel(domain_size=2, fast_gbps=1.0, slow_gbps=0.0)


def test_hf_state_dict_inverts_load_weights(tiny):
    from backends.torch.weights import hf_state_dict

    _, sd, model = tiny
    out = hf_state_dict(model)
    assert set(out) == set(sd)
    for name, value in sd.items():
        assert torch.equal(out[name], value), name


def test_leader_runner_forwards_data_but_not_methods():
    from types import SimpleNamespace

    from backends.torch.tp_runner import TPLeaderRunner

    inner = SimpleNamespace(block_size=16, execute=lambda batch: None, warm_up=lambda: None)
    leader = TPLeaderRunner(inner, SimpleNamespace(rank=0))
    assert leader.block_size == 16
    with pytest.raises(AttributeError, match="does not forward warm_up"):
        leader.warm_up()
    with pytest.raises(ValueError, match="rank 0"):
        TPLeaderRunner(inner, SimpleNamespace(rank=1))


def test_paced_links_hold_each_exchange_for_its_slowest_link():
    """PacedP2P's pacing without processes or wall-clock: a frozen clock, the sleeps recorded."""
    from types import SimpleNamespace

    from backends.torch.allreduce import PacedP2P, compress

    link = LinkModel(domain_size=2, fast_gbps=4.0, slow_gbps=1.0, fast_latency_us=1.0, slow_latency_us=10.0)
    moved = []
    inner = SimpleNamespace(rank=0, size=4, exchange=lambda sends, recvs: moved.append((sends, recvs)))
    slept: list[float] = []
    paced = PacedP2P(inner, link, clock=lambda: 0.0, sleep=slept.append)
    x = torch.zeros(1000)  # 4000 bytes
    paced.exchange([(1, x)], [(1, x)])  # same domain both ways
    assert slept[-1] == pytest.approx(1e-6 + 4000 / 4e9)
    paced.exchange([(1, x), (2, x)], [])  # the slow link sets the pace
    assert slept[-1] == pytest.approx(10e-6 + 4000 / 1e9)
    c = compress(x, "int8")  # payload and scales to one peer: one message of their summed bytes
    paced.exchange([(2, t) for t in c.tensors()], [])
    assert slept[-1] == pytest.approx(10e-6 + (1024 + 4 * 4) / 1e9)
    assert len(moved) == 3  # the bytes really went through the inner exchange


def test_a_follower_survives_a_refused_batch_and_stops_on_command():
    from types import SimpleNamespace

    from backends.torch.tp_runner import follow

    commands = iter([("init", "spec"), ("step", "bad"), ("step", "good"), ("bogus", None), ("stop", None)])
    group = SimpleNamespace(rank=1, broadcast_object=lambda obj: next(commands))
    ran = []

    def execute(batch):
        if batch == "bad":
            raise ValueError("position 300 exceeds max_model_len 256")
        ran.append(batch)

    runner = SimpleNamespace(initialize_kv_cache=ran.append, execute=execute)
    assert follow(runner, group) == 2
    assert ran == ["spec", "good"]
