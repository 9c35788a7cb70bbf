"""LoRA adapters in the simulator: load time charged once, eviction, the DES carrying adapters through the
intake and affinity keeping an adapter on the node that holds it."""

from __future__ import annotations

import json

import pytest

from backends.sim.cost_model import NodeHardware
from backends.sim.lora_cost import SimLoraSlots, adapter_bytes
from backends.sim.model_shapes import sim_model
from engine.lora import LoraConfig, LoraRequest
from sim.adapters import AdapterMix
from sim.cli import main
from sim.des import FleetSimulator
from sim.fleet import load_fleet
from sim.workload import TraceRequest, Workload

LLAMA8B = sim_model("llama-3-8b")


def lora(name: str) -> LoraRequest:
    return LoraRequest(name, f"sim://{name}")


def test_adapter_bytes_formula():
    # rank 16 x sum(in + out) over q,k,v,o,gate,up,down of Llama-3-8B x 32 layers x 2 bytes
    dims = (4096 + 4096) + 2 * (4096 + 1024) + (4096 + 4096) + 3 * (4096 + 14336)
    assert adapter_bytes(LLAMA8B, 16) == 16 * dims * 32 * 2


def test_load_time_charged_once_then_free():
    slots = SimLoraSlots(LLAMA8B, NodeHardware("h100-sxm"), LoraConfig(max_loras=2))
    a = lora("a")
    slots.add(a)  # read from disk into host RAM: charged to the next step
    first = slots.activate({a.lora_id})
    assert first == pytest.approx(slots.disk_s + slots.h2d_s)
    assert slots.activate({a.lora_id}) == 0.0  # resident: free
    assert slots.activate(set()) == 0.0
    assert slots.stats().num_loads_total == 1
    # PCIe 5 at 64 GB/s x 0.75: a rank-16 8B adapter (84 MB) takes under 2 ms, its disk read ~28 ms
    assert 1e-3 < slots.h2d_s < 2e-3 and slots.disk_s > 10 * slots.h2d_s


def test_eviction_and_host_lru():
    hw = NodeHardware("l4")
    slots = SimLoraSlots(LLAMA8B, hw, LoraConfig(max_loras=1, max_cpu_loras=1))
    a, b = lora("a"), lora("b")
    slots.add(a)
    slots.add(b)  # host RAM holds one: a is dropped
    assert slots.activate({b.lora_id}) == pytest.approx(slots.disk_s * 2 + slots.h2d_s)  # both adds' reads
    # a: not in host RAM any more (disk read) and the only slot goes from b to a (eviction)
    assert slots.activate({a.lora_id}) == pytest.approx(slots.disk_s + slots.h2d_s)
    assert slots.stats().num_evictions_total == 1
    assert slots.store.resident_lora_ids() == [a.lora_id]
    assert slots.num_disk_reads_total == 3
    with pytest.raises(ValueError):
        slots.activate({a.lora_id, b.lora_id})  # more adapters than slots in one step


def test_compute_overhead_grows_with_tokens_and_adapters():
    slots = SimLoraSlots(LLAMA8B, NodeHardware("h100-sxm"), LoraConfig(max_loras=8))
    assert slots.compute_s(0, 0) == 0.0
    one = slots.compute_s(8, 1)
    assert one > 0
    assert slots.compute_s(8, 8) > one  # more adapter weights read
    assert slots.compute_s(4096, 1) > slots.compute_s(64, 1)


def test_adapter_mix_is_seeded_zipf():
    mix = AdapterMix(100, 1.0, seed=3)
    names = mix.assign(2000)
    assert names == AdapterMix(100, 1.0, seed=3).assign(2000)
    counts = {n: names.count(n) for n in set(names)}
    assert counts["lora-1"] > counts.get("lora-10", 0) > counts.get("lora-100", 0)
    assert AdapterMix(0).assign(3) == [None, None, None]
    assert len(mix.table()) == 100
    with pytest.raises(ValueError):
        AdapterMix(-1)


def spaced_workload(n: int, gap_s: float = 2.0) -> Workload:
    return Workload("spaced", tuple(TraceRequest(i * gap_s, 64, 4) for i in range(n)))


@pytest.mark.parametrize("affinity, expected_loads", [(True, 1), (False, 3)])
def test_affinity_keeps_an_adapter_on_its_node(affinity, expected_loads):
    fleet = load_fleet("small")  # three nodes
    fleet.engine.lora = LoraConfig(max_loras=4)
    sim = FleetSimulator(
        fleet, spaced_workload(6), "round_robin", adapters=AdapterMix(1), lora_affinity=affinity
    )  # one adapter, requests far apart: every node idle when each arrives
    result = sim.run()
    assert all(r.finish_s is not None for r in result.records)
    assert result.info["lora_loads"] == expected_loads
    used = {r.node_id for r in result.records}
    assert len(used) == (1 if affinity else 3)
    # the modelled load time: one disk read and one copy on each node that served the adapter
    expected = 0.0
    for spec in fleet.nodes:
        if spec.node_id in used:
            costs = SimLoraSlots(fleet.model, spec.hardware, fleet.engine.lora)
            expected += costs.disk_s + costs.h2d_s
    assert result.info["lora_disk_reads"] == len(used)
    assert result.info["lora_load_s"] == pytest.approx(expected, rel=1e-12)


def test_lora_step_costs_more_than_base():
    fleet = load_fleet("small")
    base = FleetSimulator(fleet, spaced_workload(2), "round_robin").run()
    fleet.engine.lora = LoraConfig(max_loras=4)
    with_lora = FleetSimulator(fleet, spaced_workload(2), "round_robin", adapters=AdapterMix(1)).run()
    assert base.info == {}
    # the first request pays the adapter's disk read and copy before its first token
    assert with_lora.records[0].ttft_s > base.records[0].ttft_s + 0.02


def test_adapters_need_a_lora_fleet():
    with pytest.raises(ValueError, match="serve them"):
        FleetSimulator(load_fleet("small"), spaced_workload(1), "round_robin", adapters=AdapterMix(5))


def test_zoo_sim_with_adapters(capsys):
    rc = main(
        [
            "--fleet",
            "small",
            "--trace",
            "poisson",
            "--max-requests",
            "60",
            "--policy",
            "hardware_aware,round_robin",
            "--adapters",
            "20",
            "--lora-affinity",
            "none",
            "--json",
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    lora_info = out["info"]["lora"] if "info" in out else out["lora"]
    assert set(lora_info) == {"hardware_aware", "round_robin"}
    assert all(v["lora_loads"] >= 1 and v["affinity"] is False for v in lora_info.values())


@pytest.mark.parametrize(
    "bad", [["--adapters", "-1"], ["--adapters", "5", "--adapter-zipf", "-1"], ["--adapters", "5", "--max-loras", "0"]]
)
def test_zoo_sim_refuses_bad_adapter_flags(bad, capsys):
    assert main(["--fleet", "small", "--trace", "poisson", "--max-requests", "5", "--policy", "round_robin", *bad]) == 2
    assert "zoo sim:" in capsys.readouterr().err


def test_a_node_reports_its_measured_adapter_load_time():
    """The load report carries the mean (modelled) time of the node's adapter loads: what the router prices a
    cold load at on that node (controlplane/router/policies/hardware_aware.py, lora_cold_load_s)."""
    from agent.node_core import NodeCore
    from backends.sim.engine import build_sim_engine
    from engine.clock import ManualClock
    from engine.sampling_params import SamplingParams

    engine = build_sim_engine(
        "sim:llama-3-8b", "h100-sxm", realtime=False, clock=ManualClock(), lora_config=LoraConfig(max_loras=2)
    )
    core = NodeCore(engine, "n0")
    assert core.load_report().lora_load_s == 0.0  # nothing loaded yet: the router uses its estimate
    core.add("r1", [5] * 40, SamplingParams(max_tokens=2), lora=lora("a"))
    while engine.has_unfinished_requests():
        engine.step()
    stats = engine.runner.lora_stats()
    assert stats.num_loads_total == 1
    report = core.load_report()
    assert report.lora_load_s == pytest.approx(stats.load_time_s_total) and report.lora_load_s > 0
    assert report.lora_resident == ["a"]
