"""The prefill/decode split in the simulator on hand-made cases (sim/split.py)."""

from __future__ import annotations

import pytest

from backends.kv_link_model import transferred_kv_bytes
from backends.sim.cost_model import StepCostModel
from backends.sim.model_shapes import kv_bytes_per_token
from sim.des import FleetSimulator
from sim.split import SplitConfig, load_split_config, split_config_from_toml


def _run(fleet, workload, split, seed=0):
    return FleetSimulator(fleet, workload, "pd_split", split=split, seed=seed).run()


def test_auto_roles_prefill_on_the_big_node_decode_on_a_lean_one(small_fleet, tiny_workload):
    fleet = small_fleet()  # 1 x H100, 2 x L4: one cell, one rack per pool → Ethernet between them
    result = _run(fleet, tiny_workload(num=1, prompt=300, output=10), SplitConfig())
    (rec,) = result.records
    info = result.info["pd_split"]
    assert info["roles_by_gpu"] == {"h100-sxm": "prefill", "l4": "decode"}
    assert rec.node_id.startswith("c/h100-sxm")  # where it was sent: the prefill node
    assert info["handoffs"] == 1 and info["handoffs_by_link"] == {"ethernet": 1} and info["fallbacks"] == 0
    served = {n.node_id: n.num_requests for n in result.nodes}
    assert served["c/h100-sxm-00"] == 1 and served["c/l4-00"] + served["c/l4-01"] == 1  # it decoded on an L4
    assert rec.num_output_tokens == 10 and result.drained
    # the moved bytes: the prompt's full blocks (300 tokens → 18 blocks of 16)
    assert info["kv_bytes_total"] == transferred_kv_bytes(300, kv_bytes_per_token(fleet.model), 16) == 288 * 131072


def test_ttft_is_the_prefill_alone_and_the_transfer_delays_the_second_token(small_fleet, tiny_workload):
    fleet, workload = small_fleet(), tiny_workload(num=1, prompt=300, output=10)
    fast = _run(fleet, workload, SplitConfig())
    slow = _run(fleet, workload, SplitConfig(link_kinds={"ethernet": {"gbps": 0.1}}))
    (f,), (s,) = fast.records, slow.records
    prefill_s = StepCostModel(fleet.model, fleet.nodes[0].hardware).prefill_time_s(300, 512)
    assert f.ttft_s == pytest.approx(prefill_s, rel=1e-9) and s.ttft_s == f.ttft_s
    nbytes = 288 * 131072
    extra_s = (1e-4 + nbytes / 0.1e9) - (1e-4 + nbytes / 12.5e9)
    assert s.e2e_s - f.e2e_s == pytest.approx(extra_s, rel=1e-6)  # every later token waits for the KV
    assert slow.info["pd_split"]["mean_transfer_s"] == pytest.approx(1e-4 + nbytes / 0.1e9)


def test_the_decode_node_recomputes_only_the_partial_block(small_fleet, tiny_workload):
    fleet = small_fleet()
    result = _run(fleet, tiny_workload(num=1, prompt=300, output=10), SplitConfig())
    l4 = next(n for n in result.nodes if n.profile == "l4" and n.num_requests)
    assert l4.prefix_cache_hit_rate > 0.9  # 288 of its 301 prompt tokens came over the link


def test_same_seed_same_split_run(small_fleet, tiny_workload):
    fleet, workload = small_fleet(), tiny_workload(num=40, gap_s=0.02, prompt=700, output=30)

    def signature(result):
        return [(r.req_id, r.node_id, r.first_token_s, r.finish_s, r.num_output_tokens) for r in result.records]

    first, second = _run(fleet, workload, SplitConfig(), seed=3), _run(fleet, workload, SplitConfig(), seed=3)
    assert signature(first) == signature(second)
    assert first.info["pd_split"] == second.info["pd_split"]
    assert first.drained and all(r.num_output_tokens == 30 for r in first.records)
    assert first.info["pd_split"]["handoffs"] == 40


def test_a_both_node_fleet_keeps_requests_colocated(small_fleet, tiny_workload):
    fleet = small_fleet([{"name": "c", "pools": [{"gpu": "l4", "count": 2}]}])  # one kind: auto = all both
    result = _run(fleet, tiny_workload(num=5, prompt=200, output=5), SplitConfig())
    assert result.info["pd_split"]["handoffs"] == 0 and result.drained


def test_config_roles_and_placement_from_the_fleet_toml(small_fleet):
    fleet = small_fleet()
    config = split_config_from_toml(
        {"kv_links": {"rack": "fleet", "kinds": {"infiniband": {"gbps": 25}}},
         "pd_split": {"roles": {"h100-sxm": "both", "c/l4-01": "prefill"}}},
        mode="config",
    )  # fmt: skip
    links = config.link_model(fleet)
    assert links.kind("c/h100-sxm-00", "c/l4-00") == "infiniband" and links.links["infiniband"].gbps == 25
    roles = config.roles_for(fleet, {})
    assert roles == {"c/h100-sxm-00": "both", "c/l4-00": "both", "c/l4-01": "prefill"}
    assert SplitConfig(nodes_per_host=2).link_model(fleet).kind("c/l4-00", "c/l4-01") == "nvlink"
    with pytest.raises(ValueError, match="unknown node role"):
        split_config_from_toml({"pd_split": {"roles": {"l4": "sometimes"}}})
    with pytest.raises(ValueError, match="unknown keys"):
        split_config_from_toml({"kv_links": {"racks": "pool"}})
    assert load_split_config("zoo").rack == "pool"


def test_zoo_sim_pd_split_flag_adds_a_split_run(capsys):
    from sim.cli import main

    rc = main(["--fleet", "small", "--trace", "poisson", "--max-requests", "20", "--policy", "hardware_aware",
               "--pd-split", "auto", "--json"])  # fmt: skip
    assert rc == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in out["policies"]] == ["hardware_aware", "pd_split"]
    assert out["info"]["pd_split"]["roles_by_gpu"] == {"h100-sxm": "prefill", "l4": "decode"}


def test_hand_offs_wait_for_room_on_a_full_decode_node_instead_of_losing_their_kv(tiny_workload):
    from sim.fleet import parse_fleet

    fleet = parse_fleet(
        {
            "name": "t",
            "scheduler": {"max_num_batched_tokens": 512, "max_num_seqs": 32, "gpu_memory_utilization": 0.75},
            "cells": [{"name": "c", "pools": [{"gpu": "h100-sxm"}, {"gpu": "l4"}]}],
        }
    )  # the L4 keeps ~2 GB for KV: ~16k tokens, ten of these contexts
    result = _run(fleet, tiny_workload(num=30, gap_s=0.01, prompt=1500, output=60), SplitConfig())
    info = result.info["pd_split"]
    assert result.drained and all(r.num_output_tokens == 60 for r in result.records)
    assert info["handoffs"] == 30 and info["landings_waited_for_room"] > 0
    l4 = next(n for n in result.nodes if n.profile == "l4")
    assert l4.num_requests == 30 and l4.num_recomputed_tokens == 0
    assert l4.prefix_cache_hit_rate > 0.95  # every landed context was served from its imported blocks


def test_a_request_decodes_on_its_adapter_after_the_hand_off_its_kv_landed_under_it(small_fleet, tiny_workload):
    from engine.lora import LoraConfig
    from sim.adapters import AdapterMix

    fleet = small_fleet()
    fleet.engine.lora = LoraConfig(max_loras=4)
    workload = tiny_workload(num=6, gap_s=0.5, prompt=300, output=10)
    result = FleetSimulator(fleet, workload, "pd_split", split=SplitConfig(), adapters=AdapterMix(2, seed=1)).run()
    info = result.info["pd_split"]
    assert info["handoffs"] == 6 and info["fallbacks"] == 0 and result.drained
    assert all(r.num_output_tokens == 10 for r in result.records)
    for node in result.nodes:
        if node.profile == "l4" and node.num_requests:
            assert node.prefix_cache_hit_rate > 0.9  # the moved blocks hit: keyed under the adapter they ran on
    assert result.info["lora_loads"] > 1  # the decode nodes loaded the adapters too


def test_zoo_sim_runs_pd_split_with_adapters(capsys):
    from sim.cli import main

    rc = main(["--fleet", "small", "--trace", "poisson", "--max-requests", "20", "--policy", "hardware_aware",
               "--pd-split", "auto", "--adapters", "4", "--json"])  # fmt: skip
    assert rc == 0
    import json

    out = json.loads(capsys.readouterr().out)
    assert [p["policy"] for p in out["policies"]] == ["hardware_aware", "pd_split"]
    assert out["info"]["pd_split"]["handoffs"] > 0 and out["info"]["lora"]["pd_split"]["lora_loads"] > 0


def test_the_decode_node_gets_the_requests_priority_and_tpot_target(small_fleet, tiny_workload, monkeypatch):
    from agent.node_core import NodeCore

    adds: dict[str, list[dict]] = {}
    add = NodeCore.add

    def recording(self, request_id, prompt_token_ids, params, age_s=0.0, **kwargs):
        adds.setdefault(request_id, []).append(kwargs)
        return add(self, request_id, prompt_token_ids, params, age_s, **kwargs)

    monkeypatch.setattr(NodeCore, "add", recording)
    result = _run(small_fleet(), tiny_workload(num=3, gap_s=0.5, prompt=300, output=10), SplitConfig())
    assert result.info["pd_split"]["handoffs"] == 3
    for first, landed in adds.values():  # placed on the prefill node, then landed on the decode node
        assert landed["priority"] == first["priority"] and landed["slo_tpot_s"] == first["slo_tpot_s"] > 0
