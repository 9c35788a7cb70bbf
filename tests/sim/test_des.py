from __future__ import annotations

import pytest

from sim.des import FleetSimulator
from sim.report import summarize


def _signature(result):
    return [(r.req_id, r.node_id, r.first_token_s, r.finish_s, r.num_output_tokens) for r in result.records]


@pytest.mark.parametrize("policy", ["hardware_aware", "llm_d", "dynamo_kv", "sglang_cache_aware"])
def test_same_seed_same_result(small_fleet, tiny_workload, policy):
    fleet, workload = small_fleet(), tiny_workload(num=40)
    first = FleetSimulator(fleet, workload, policy, seed=7).run()
    second = FleetSimulator(fleet, workload, policy, seed=7).run()
    assert _signature(first) == _signature(second)
    assert first.drained and all(r.num_output_tokens == 20 for r in first.records)


def test_virtual_latencies_match_the_cost_model_on_an_idle_node(small_fleet, tiny_workload):
    fleet = small_fleet([{"name": "c", "pools": [{"gpu": "h100-sxm"}]}])
    result = FleetSimulator(fleet, tiny_workload(num=1, prompt=300, output=10), "round_robin").run()
    (rec,) = result.records
    from backends.sim.cost_model import StepCostModel

    cost = StepCostModel(fleet.model, fleet.nodes[0].hardware)
    assert rec.ttft_s == pytest.approx(cost.prefill_time_s(300, 512), rel=1e-9)
    assert rec.tpot_s == pytest.approx(cost.decode_step_s(1, 305), rel=0.02)


def test_shared_hash_ids_drive_prefix_cache_hits(small_fleet, tiny_workload):
    # every prompt starts with the same two 512-token blocks
    workload = tiny_workload(num=30, prompt=1100, output=4, hash_ids=lambda i: (1, 2, 100 + i))
    result = FleetSimulator(small_fleet(), workload, "prefix_aware").run()
    report = summarize(result)
    assert report.prefix_cache_hit_rate > 0.5
    assert sum(r.num_cached_prompt_tokens for r in result.records) >= 25 * 1024


def test_cells_keep_each_class_on_its_nodes(small_fleet, tiny_workload):
    fleet = small_fleet(
        [
            {"name": "fast", "traffic_classes": ["chat"], "pools": [{"gpu": "h100-sxm"}]},
            {"name": "slow", "traffic_classes": ["batch"], "pools": [{"gpu": "l4", "count": 2}]},
        ]
    )
    chat = tiny_workload(num=10, cls="chat").requests
    batch = tiny_workload(num=10, cls="batch").requests
    from sim.workload import Workload

    workload = Workload("mixed", tuple(sorted(chat + batch, key=lambda r: r.arrival_s)))
    result = FleetSimulator(fleet, workload, "least_requests").run()
    for rec in result.records:
        assert rec.node_id.startswith("fast/" if rec.traffic_class == "chat" else "slow/")


def test_overload_preempts_and_still_drains(small_fleet, tiny_workload):
    fleet = small_fleet([{"name": "c", "pools": [{"gpu": "l4"}]}])
    result = FleetSimulator(fleet, tiny_workload(num=40, gap_s=0.0, prompt=3000, output=300), "round_robin").run()
    report = summarize(result)
    assert result.drained and report.num_preemptions > 0 and report.num_swapped_out_blocks > 0
