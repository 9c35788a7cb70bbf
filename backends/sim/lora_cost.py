"""LoRA adapters on a simulated node: which adapter is where (backends/lora_store.py's LoraStore, the
same slot and host-RAM LRU the torch and JAX runners use) and what moving and applying them costs.

Nothing is read and no tensor exists: an adapter is its size. The costs, all bf16 (2 bytes a value),
every adapter padded to ``max_lora_rank`` R on all seven projections (as the real slots are)::

    adapter bytes   A = R x sum over modules (in + out) x layers x 2
    disk read       A / DISK_GBPS                       an adapter not in host RAM (first use, or dropped by
                                                        the host LRU), read by the node's engine thread
    host -> device  (A / tp) / (host link GB/s x link efficiency)
                                                        each TP rank copies its shard over its own PCIe link
                                                        (cost_model.INTERCONNECT_GBPS, per GPU profile)

A load's time is added to the step that needs the adapter (the real runner copies before the step's
matmuls). Each step with adapters also pays the batched low-rank matmuls (Punica/S-LoRA's shrink and
expand, one pair per projection group, four groups a layer), per layer::

    flops  = 2 x T_lora x R x sum(in + out) / tp        T_lora: the step's tokens that use an adapter
    bytes  = 2 x (n_active x R x sum(in + out) + T_lora x sum(in + out)) / tp
    lora_s = layers x (roofline(flops, bytes) + 8 x linear_overhead_s)

with the GPU's fitted efficiency (cost_model.roofline_s, Efficiency). ``n_active``: distinct adapters in
the step (their weights are read once each).
"""

from __future__ import annotations

from dataclasses import dataclass

from backends.checkpoint.model_config import ModelConfig
from backends.checkpoint.peft_adapter import module_shape
from backends.lora_store import LoraStore
from backends.sim.cost_model import BYTES_PER_VALUE, INTERCONNECT_GBPS, NodeHardware, efficiency_for, roofline_s
from engine.lora import LoraConfig, LoraRequest, LoraStats

LORA_MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
DISK_GBPS = 3.0  # assumed: one NVMe PCIe 4 drive's sequential read, GB/s
GROUPS_PER_LAYER = 4  # qkv, o, gate_up, down (lora_store.lora_groups): a shrink and an expand kernel each


def adapter_bytes(model: ModelConfig, rank: int) -> int:
    """A rank-``rank`` adapter on every projection of every layer, bf16."""
    dims = sum(sum(module_shape(model, m)) for m in LORA_MODULES)
    return rank * dims * model.num_hidden_layers * BYTES_PER_VALUE


@dataclass(frozen=True, slots=True)
class SimAdapter:
    """What the simulated host RAM holds for an adapter: its size."""

    lora_id: int
    num_bytes: int


class SimLoraSlots:
    """The simulated runner's adapters. ``activate(lora_ids)`` makes them resident and returns the seconds
    the loads it caused take (disk reads included, also those of ``add`` since the last step)."""

    def __init__(self, model: ModelConfig, hardware: NodeHardware, config: LoraConfig) -> None:
        self.model, self.hardware, self.config = model, hardware, config
        self.num_bytes = adapter_bytes(model, config.max_lora_rank)
        eff = efficiency_for(hardware.profile)
        self._eff = eff
        host_gbps = INTERCONNECT_GBPS[hardware.profile][1]
        self.h2d_s = self.num_bytes / hardware.tp / (host_gbps * 1e9 * eff.link_efficiency)
        self.disk_s = self.num_bytes / (DISK_GBPS * 1e9)
        self._dims = sum(sum(module_shape(model, m)) for m in LORA_MODULES)
        self.store = LoraStore(model, config, self._write_slot, read=self._read)
        self._pending_s = 0.0  # load time not yet charged to a step
        self.num_disk_reads_total = 0

    def _read(self, lora: LoraRequest) -> SimAdapter:
        self._pending_s += self.disk_s
        self.num_disk_reads_total += 1
        return SimAdapter(lora.lora_id, self.num_bytes)

    def _write_slot(self, slot: int, adapter: SimAdapter) -> None:
        self._pending_s += self.h2d_s

    def add(self, lora: LoraRequest) -> None:
        self.store.add(lora)

    def activate(self, lora_ids: set[int]) -> float:
        """Seconds of loading the step with these adapters pays first (0 when all are resident)."""
        before = self.store.load_time_s_total
        if lora_ids:
            self.store.activate(lora_ids)
        load_s, self._pending_s = self._pending_s, 0.0
        self.store.load_time_s_total = before + load_s  # the modelled time, not the store's wall clock
        return load_s

    def compute_s(self, num_lora_tokens: int, num_active: int) -> float:
        """The step's extra time for the low-rank matmuls (the module docstring's formula)."""
        if num_lora_tokens == 0:
            return 0.0
        gpu, eff, tp = self.hardware.gpu, self._eff, self.hardware.tp
        rank, dims = self.config.max_lora_rank, self._dims
        flops = 2.0 * num_lora_tokens * rank * dims / tp
        num_bytes = BYTES_PER_VALUE * (num_active * rank * dims + num_lora_tokens * dims) / tp
        peak, bandwidth = gpu.peak_tflops * 1e12 * eff.compute, gpu.memory_bandwidth_gbps * 1e9 * eff.memory
        launches_s = 2 * GROUPS_PER_LAYER * eff.linear_overhead_s
        per_layer = roofline_s(flops, num_bytes, peak, bandwidth, eff.knee) + launches_s
        return self.model.num_hidden_layers * per_layer

    def stats(self) -> LoraStats:
        return self.store.stats()
