"""LoRA adapters in a fixed number of device slots, least recently used evicted to a host-RAM store.

S-LoRA's memory model (Sheng et al., "S-LoRA: Serving Thousands of Concurrent LoRA Adapters", 2023):
every registered adapter lives in host RAM; the ones a step needs are copied into device slots; a slot
goes to another adapter only when no request of this step uses it. Each slot holds every projection at
``max_lora_rank`` (lower ranks and untargeted projections are zero-padded), with ``scaling`` folded into B,
so one step's low-rank matmuls all have the same shape. One extra slot (``zero_slot``, the last) stays
zero: rows without an adapter may be computed through it where that saves a scatter::

    group "qkv"      a [layers, S, E, 3R]      b_q [layers, S, R, H*D]   b_k, b_v [layers, S, R, Hkv*D]
    group "o"        a [layers, S, H*D, R]     b_o [layers, S, R, E]
    group "gate_up"  a [layers, S, E, 2R]      b_gate, b_up [layers, S, R, I]
    group "down"     a [layers, S, I, R]       b_down [layers, S, R, E]

A group's projections read the same input, so their A matrices are concatenated along the rank (one shrink
matmul), and each expands with its own B into its own output columns (``LoraGroup.out_columns``).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from backends.checkpoint.peft_adapter import PeftAdapter, load_peft_adapter, module_shape
from engine.lora import LoraConfig, LoraRequest, LoraStats


@dataclass(frozen=True, slots=True)
class LoraGroup:
    """Projections that share an input: ``a`` [layers, S, in, len(modules) * R], one ``b`` per module."""

    name: str
    modules: tuple[str, ...]
    out_columns: tuple[tuple[int, int], ...]  # per module: its [begin, end) columns of the fused output


def lora_groups(config: Any) -> tuple[LoraGroup, ...]:
    q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    e, inter = config.hidden_size, config.intermediate_size
    return (
        LoraGroup("qkv", ("q_proj", "k_proj", "v_proj"), ((0, q), (q, q + kv), (q + kv, q + 2 * kv))),
        LoraGroup("o", ("o_proj",), ((0, e),)),
        LoraGroup("gate_up", ("gate_proj", "up_proj"), ((0, inter), (inter, 2 * inter))),
        LoraGroup("down", ("down_proj",), ((0, e),)),
    )


class LoraSlots:
    """Device slots + host store + LRU. ``activate(lora_ids)`` -> {lora_id: slot} for one step."""

    def __init__(self, model_config: Any, lora_config: LoraConfig, dtype: torch.dtype, device: torch.device) -> None:
        self.model_config = model_config
        self.config = lora_config
        self.dtype, self.device = dtype, device
        self.groups = lora_groups(model_config)
        layers, slots, rank = model_config.num_hidden_layers, lora_config.max_loras, lora_config.max_lora_rank
        self.zero_slot = slots  # never loaded: its A and B stay zero
        self.a: dict[str, torch.Tensor] = {}
        self.b: dict[str, torch.Tensor] = {}
        for group in self.groups:
            num_in = module_shape(model_config, group.modules[0])[1]
            self.a[group.name] = torch.zeros(
                layers, slots + 1, num_in, len(group.modules) * rank, dtype=dtype, device=device
            )
            for module in group.modules:
                num_out = module_shape(model_config, module)[0]
                self.b[module] = torch.zeros(layers, slots + 1, rank, num_out, dtype=dtype, device=device)
        self._registered: dict[int, LoraRequest] = {}
        self._host: OrderedDict[int, PeftAdapter] = OrderedDict()  # LRU order, most recent last
        self._slot_of: OrderedDict[int, int] = OrderedDict()  # lora_id -> device slot, LRU order
        self._free_slots = list(range(slots - 1, -1, -1))
        self.num_loads_total = 0
        self.num_evictions_total = 0
        self.load_time_s_total = 0.0

    # ---- the host store ----------------------------------------------------------------------

    def add(self, lora: LoraRequest) -> PeftAdapter:
        """Read and check the adapter (AdapterError on a bad one, nothing changed); replaces one of the same id."""
        adapter = load_peft_adapter(lora.path, self.model_config, self.config.max_lora_rank)
        self.remove(lora.lora_id)
        self._registered[lora.lora_id] = lora
        self._put_host(lora.lora_id, adapter)
        return adapter

    def remove(self, lora_id: int) -> bool:
        if lora_id not in self._registered:
            return False
        del self._registered[lora_id]
        self._host.pop(lora_id, None)
        slot = self._slot_of.pop(lora_id, None)
        if slot is not None:
            self._free_slots.append(slot)
        return True

    def __contains__(self, lora_id: int) -> bool:
        return lora_id in self._registered

    def resident_lora_ids(self) -> list[int]:
        return list(self._slot_of)

    def stats(self) -> LoraStats:
        return LoraStats(
            num_registered=len(self._registered),
            num_host=len(self._host),
            num_device=len(self._slot_of),
            num_loads_total=self.num_loads_total,
            num_evictions_total=self.num_evictions_total,
            load_time_s_total=self.load_time_s_total,
        )

    def _put_host(self, lora_id: int, adapter: PeftAdapter) -> None:
        self._host[lora_id] = adapter
        self._host.move_to_end(lora_id)
        limit = self.config.max_cpu_loras
        while limit is not None and len(self._host) > limit:
            self._host.popitem(last=False)  # read again from its directory when next needed

    def _host_adapter(self, lora_id: int) -> PeftAdapter:
        adapter = self._host.get(lora_id)
        if adapter is None:
            lora = self._registered[lora_id]
            adapter = load_peft_adapter(lora.path, self.model_config, self.config.max_lora_rank)
            self._put_host(lora_id, adapter)
        else:
            self._host.move_to_end(lora_id)
        return adapter

    # ---- device slots ------------------------------------------------------------------------

    def activate(self, lora_ids: set[int]) -> dict[int, int]:
        """Make every adapter of ``lora_ids`` resident (loading, evicting the least recently used
        adapters not in ``lora_ids``) and mark them most recently used. KeyError for an unregistered id,
        ValueError when there are more adapters than slots."""
        if len(lora_ids) > self.config.max_loras:
            raise ValueError(f"{len(lora_ids)} adapters in one step but only {self.config.max_loras} LoRA slots")
        unknown = [i for i in lora_ids if i not in self._registered]
        if unknown:
            raise KeyError(f"LoRA adapter id {unknown[0]} is not registered")
        for lora_id in lora_ids:
            if lora_id in self._slot_of:
                self._slot_of.move_to_end(lora_id)
        for lora_id in sorted(lora_ids):
            if lora_id not in self._slot_of:
                self._load(lora_id, self._take_slot(lora_ids))
        return {lora_id: self._slot_of[lora_id] for lora_id in lora_ids}

    def _take_slot(self, keep: set[int]) -> int:
        if self._free_slots:
            return self._free_slots.pop()
        victim = next(i for i in self._slot_of if i not in keep)  # exists: len(keep) <= slots
        self.num_evictions_total += 1
        return self._slot_of.pop(victim)

    def _load(self, lora_id: int, slot: int) -> None:
        t0 = time.perf_counter()
        adapter = self._host_adapter(lora_id)
        rank = self.config.max_lora_rank
        for group in self.groups:
            a = self.a[group.name][:, slot]  # [layers, in, n * R]
            a.zero_()
            for j, module in enumerate(group.modules):
                b = self.b[module][:, slot]  # [layers, R, out]
                b.zero_()
                for layer in range(self.model_config.num_hidden_layers):
                    w = adapter.weights.get((layer, module))
                    if w is None:
                        continue
                    r = w.rank
                    a[layer, :, j * rank : j * rank + r].copy_(_to_torch(w.lora_a.T))
                    b[layer, :r].copy_(_to_torch(w.lora_b.T * np.float32(w.scaling)))
        self._slot_of[lora_id] = slot
        self.num_loads_total += 1
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        self.load_time_s_total += time.perf_counter() - t0


def _to_torch(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array, dtype=np.float32))
