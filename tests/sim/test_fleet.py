from __future__ import annotations

import pytest

from backends.sim.cost_model import num_kv_blocks
from sim.fleet import load_fleet, parse_fleet


def test_bundled_fleets_load():
    zoo = load_fleet("zoo")
    assert zoo.gpu_counts == {"h100-sxm": 4, "a100-40gb": 8, "l4": 8, "t4": 4}
    assert len(zoo.nodes) == 22
    cells = load_fleet("zoo_cells")
    assert cells.cells_by_traffic_class == {"conv": "chat", "code": "code"}
    assert {n.cell for n in cells.nodes} == {"chat", "code"}
    assert len(load_fleet("big64").nodes) == 64


def test_node_ids_and_kv_follow_the_pools(small_fleet):
    fleet = small_fleet()
    assert [n.node_id for n in fleet.nodes] == ["c/h100-sxm-00", "c/l4-00", "c/l4-01"]
    h100 = fleet.engine.cache_config(fleet.model, fleet.nodes[0].hardware)
    l4 = fleet.engine.cache_config(fleet.model, fleet.nodes[1].hardware)
    assert h100.num_device_blocks > 5 * l4.num_device_blocks > 0


def test_rejects_fleets_that_cannot_serve():
    with pytest.raises(ValueError, match="does not fit"):
        parse_fleet({"cells": [{"name": "x", "pools": [{"gpu": "t4"}]}]})
    with pytest.raises(ValueError, match="listed by cells"):
        parse_fleet(
            {
                "cells": [
                    {"name": "a", "traffic_classes": ["k"], "pools": [{"gpu": "l4"}]},
                    {"name": "b", "traffic_classes": ["k"], "pools": [{"gpu": "l4"}]},
                ]
            }
        )
    with pytest.raises(FileNotFoundError, match="bundled"):
        load_fleet("no-such-fleet")


def test_zoo_long_serves_a_128k_model_and_only_big_kv_nodes_take_the_longest_prompts():
    fleet = load_fleet("zoo_long")
    assert fleet.model.name == "sim:llama-3.1-8b" and fleet.model.max_position_embeddings == 131072
    kv_tokens = {n.hardware.profile: num_kv_blocks(fleet.model, n.hardware, 16) * 16 for n in fleet.nodes}
    assert set(kv_tokens) == {"h100-sxm", "a100-40gb", "l4", "t4"}
    # Mooncake's p99 prompt (66k tokens) fits an H100's KV cache but not an L4's
    assert kv_tokens["l4"] < 66_000 < kv_tokens["h100-sxm"]


def test_a_pool_can_span_hosts_with_a_hierarchical_all_reduce():
    def fleet(**pool):
        return parse_fleet(
            {"model": "sim:llama-3-70b", "cells": [{"name": "c", "pools": [{"gpu": "h100-sxm", "tp": 8, **pool}]}]}
        )

    one_host = fleet().nodes[0]
    two_hosts = fleet(tp_nodes=2, allreduce="hierarchical", compression="int8").nodes[0]
    assert (two_hosts.hardware.tp_nodes, two_hosts.hardware.allreduce) == (2, "hierarchical")
    engine = fleet(tp_nodes=2).node_engine(fleet(tp_nodes=2).nodes[0])
    assert engine.runner.hardware.tp_nodes == 2  # the node's engine prices the network hop
    with pytest.raises(ValueError, match="tp_nodes must divide"):
        fleet(tp_nodes=3)
    assert one_host.hardware.tp_nodes == 1


def test_zoo_sim_tells_every_policy_the_operators_slo(monkeypatch):
    import argparse

    import sim.cli as cli

    seen = {}

    class Recorder:
        def __init__(self, fleet, workload, policy, *, router_config, **kwargs):
            seen[policy] = (router_config.slo_ttft_s, router_config.slo_tpot_s, router_config.policy)

        def run(self):
            raise StopIteration

    monkeypatch.setattr(cli, "FleetSimulator", Recorder)
    parser = argparse.ArgumentParser()
    cli.add_sim_args(parser)
    args = parser.parse_args(["--slo-ttft", "2", "--slo-tpot", "0.05"])
    for policy in ("hardware_aware", "llm_d"):
        with pytest.raises(StopIteration):
            cli.run_policies(load_fleet("small"), None, [policy], args)
    assert seen == {"hardware_aware": (2.0, 0.05, "hardware_aware"), "llm_d": (2.0, 0.05, "llm_d")}
