from __future__ import annotations

import pytest

from backends.gpu_table import GPU_TABLE
from backends.sim.cost_model import NodeHardware, StepCostModel, num_kv_blocks, saturation_throughput_req_per_s
from backends.sim.model_shapes import sim_model, weight_bytes


def test_model_shapes_have_their_published_sizes():
    assert sim_model("llama-3-8b").num_params / 1e9 == pytest.approx(8.03, abs=0.01)
    assert sim_model("sim:llama-3-70b").num_params / 1e9 == pytest.approx(70.55, abs=0.05)
    assert sim_model("smollm2-135m").num_params / 1e6 == pytest.approx(134.5, abs=0.5)
    with pytest.raises(ValueError, match="valid"):
        sim_model("gpt-5")


def test_single_decode_step_is_bound_by_reading_the_weights():
    model = sim_model("llama-3-8b")
    for profile in ("h100-sxm", "a100-80gb", "l4"):
        cost = StepCostModel(model, NodeHardware(profile))
        read_s = weight_bytes(model) / (GPU_TABLE[profile].memory_bandwidth_gbps * 1e9)
        step_s = cost.decode_step_s(1, 100)
        assert read_s < step_s < 1.6 * read_s + 3e-3


def test_large_prefill_is_compute_bound_and_faster_on_faster_gpus():
    model = sim_model("llama-3-8b")
    h100, l4 = (StepCostModel(model, NodeHardware(p)) for p in ("h100-sxm", "l4"))
    flops = 2 * model.num_params * 2048
    assert h100.prefill_time_s(2048, 2048) > flops / (989e12)
    assert l4.prefill_time_s(2048, 2048) / h100.prefill_time_s(2048, 2048) == pytest.approx(989 / 121, rel=0.25)


def test_attention_cost_grows_with_the_context_read():
    cost = StepCostModel(sim_model("llama-3-8b"), NodeHardware("a100-80gb"))
    short = cost.decode_step_s(64, 200)
    long = cost.decode_step_s(64, 4000)
    assert long > 1.5 * short


def test_tensor_parallel_splits_the_work_and_adds_all_reduce():
    model = sim_model("llama-3-70b")
    tp4, tp8 = (StepCostModel(model, NodeHardware("h100-sxm", tp)) for tp in (4, 8))
    assert tp4.all_reduce_s(1e6) > 0 and tp8.decode_step_s(8, 1000) < tp4.decode_step_s(8, 1000)
    assert StepCostModel(sim_model("llama-3-8b"), NodeHardware("h100-sxm")).all_reduce_s(1e6) == 0


def test_kv_capacity_follows_memory_minus_weights():
    model = sim_model("llama-3-8b")
    assert num_kv_blocks(model, NodeHardware("t4"), 16) == 0  # 16 GB of weights on a 16 GB card
    assert num_kv_blocks(model, NodeHardware("t4", 2), 16) > 0
    assert num_kv_blocks(model, NodeHardware("h100-sxm"), 16) > 2 * num_kv_blocks(model, NodeHardware("a100-40gb"), 16)
    with pytest.raises(ValueError):
        NodeHardware("t4", 3)


def test_saturation_throughput_orders_the_gpus():
    model = sim_model("llama-3-8b")
    rates = {}
    for profile in ("h100-sxm", "a100-40gb", "l4"):
        hw = NodeHardware(profile)
        rates[profile] = saturation_throughput_req_per_s(
            StepCostModel(model, hw), 1000, 200, num_kv_blocks(model, hw, 16) * 16, 256, 2048
        )
    assert rates["h100-sxm"] > rates["a100-40gb"] > rates["l4"] > 0


def test_tp_all_reduce_uses_the_link_model_across_nodes():
    from backends.sim.cost_model import INTERCONNECT_GBPS

    model = sim_model("llama-3-70b")
    one = StepCostModel(model, NodeHardware("h100-sxm", 8))
    eff = one.efficiency
    nbytes = 4096 * model.hidden_size * 2
    # one host: the ring over NVLink, its fixed cost once (as before the link model)
    nvlink = INTERCONNECT_GBPS["h100-sxm"][0] * 1e9 * eff.link_efficiency
    assert one.all_reduce_s(nbytes) == pytest.approx(eff.link_latency_s + 2 * 7 / 8 * nbytes / nvlink)
    # two hosts: the flat ring is as slow as the network hop; hierarchical int8 crosses it with ~half the bytes
    flat, hier, hier_int8 = (
        StepCostModel(model, NodeHardware("h100-sxm", 8, tp_nodes=2, allreduce=a, compression=c)).all_reduce_s(nbytes)
        for a, c in (("flat", "none"), ("hierarchical", "none"), ("hierarchical", "int8"))
    )
    assert flat > 3 * one.all_reduce_s(nbytes)
    assert flat / hier_int8 > 1.5 and hier_int8 < hier
    cross = StepCostModel(model, NodeHardware("h100-sxm", 8, tp_nodes=2))
    assert cross.decode_step_s(8, 1000) > one.decode_step_s(8, 1000)
    with pytest.raises(ValueError, match="tp_nodes must divide"):
        NodeHardware("h100-sxm", 8, tp_nodes=3)
    with pytest.raises(ValueError, match="allreduce must be one of"):
        NodeHardware("h100-sxm", 8, allreduce="tree")
