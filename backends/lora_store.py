"""Where a runner's LoRA adapters are: registered, in host RAM, in a device slot. Framework-free (numpy),
shared by the torch and JAX runners, which own only the slot tensors.

S-LoRA's memory model (Sheng et al., "S-LoRA: Serving Thousands of Concurrent LoRA Adapters", 2023):
every registered adapter is read into host RAM (at most ``max_cpu_loras``; the least recently used is
dropped and read again from its directory when needed); the ones a step needs are copied into device
slots; a slot goes to another adapter only when no request of this step uses it (LRU among the rest).

Each slot holds every projection at ``max_lora_rank`` (lower ranks and untargeted projections are
zero-padded), with ``scaling`` folded into B, so one step's low-rank matmuls all have the same shape.
Projections that read the same input form a group: their A matrices are concatenated along the rank
(one shrink matmul), each expands with its own B into its own output columns::

    group "qkv"      a [layers, in=E, 3R]      b_q [layers, R, H*D]   b_k, b_v [layers, R, Hkv*D]
    group "o"        a [layers, H*D, R]        b_o [layers, R, E]
    group "gate_up"  a [layers, E, 2R]         b_gate, b_up [layers, R, I]
    group "down"     a [layers, I, R]          b_down [layers, R, E]

One extra slot (``zero_slot``, the last) is never loaded and stays zero.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from backends.checkpoint.peft_adapter import PeftAdapter, load_peft_adapter, module_shape
from engine.lora import LoraConfig, LoraRequest, LoraStats


@dataclass(frozen=True, slots=True)
class LoraGroup:
    """Projections that share an input: ``a`` [layers, in, len(modules) * R], one ``b`` per module."""

    name: str
    modules: tuple[str, ...]
    out_columns: tuple[tuple[int, int], ...]  # per module: its [begin, end) columns of the fused output

    def num_in(self, config: Any) -> int:
        return module_shape(config, self.modules[0])[1]


def lora_groups(config: Any) -> tuple[LoraGroup, ...]:
    """In the order the models call them: qkv, o, gate_up, down."""
    q, kv = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
    e, inter = config.hidden_size, config.intermediate_size
    return (
        LoraGroup("qkv", ("q_proj", "k_proj", "v_proj"), ((0, q), (q, q + kv), (q + kv, q + 2 * kv))),
        LoraGroup("o", ("o_proj",), ((0, e),)),
        LoraGroup("gate_up", ("gate_proj", "up_proj"), ((0, inter), (inter, 2 * inter))),
        LoraGroup("down", ("down_proj",), ((0, e),)),
    )


def slot_arrays(adapter: PeftAdapter, config: Any, rank: int) -> dict[str, np.ndarray]:
    """One slot's contents as float32 numpy: ``a:<group>`` [layers, in, nR] and ``b:<module>`` [layers, R, out],
    zero-padded to ``rank``, scaling folded into B."""
    layers = config.num_hidden_layers
    out: dict[str, np.ndarray] = {}
    for group in lora_groups(config):
        a = out[f"a:{group.name}"] = np.zeros((layers, group.num_in(config), len(group.modules) * rank), np.float32)
        for j, module in enumerate(group.modules):
            b = out[f"b:{module}"] = np.zeros((layers, rank, module_shape(config, module)[0]), np.float32)
            for layer in range(layers):
                w = adapter.weights.get((layer, module))
                if w is not None:
                    a[layer, :, j * rank : j * rank + w.rank] = w.lora_a.T
                    b[layer, : w.rank] = w.lora_b.T * np.float32(w.scaling)
    return out


PREFETCHED_KEPT = 8  # adapters read ahead and not yet added, at most


class LoraStore:
    """Registered adapters, the host-RAM LRU and the device-slot LRU. ``activate`` calls
    ``write_slot(slot, adapter)`` for each adapter it moves into a slot; the caller owns the tensors.
    ``read``: reads an adapter into host RAM (default: its PEFT files, ``load_peft_adapter``); the
    simulated runner passes one that reads nothing and prices the read instead."""

    def __init__(
        self,
        model_config: Any,
        lora_config: LoraConfig,
        write_slot: Callable[[int, Any], None],
        read: Callable[[LoraRequest], Any] | None = None,
    ):
        self.model_config = model_config
        self.config = lora_config
        self.zero_slot = lora_config.max_loras  # never loaded: its A and B stay zero
        self._write_slot = write_slot
        self._read = read or self._read_peft
        self._registered: dict[int, LoraRequest] = {}
        self._host: OrderedDict[int, PeftAdapter] = OrderedDict()  # LRU order, most recent last
        self._slot_of: OrderedDict[int, int] = OrderedDict()  # lora_id -> device slot, LRU order
        self._free_slots = list(range(lora_config.max_loras - 1, -1, -1))
        self._prefetched: OrderedDict[int, Any] = OrderedDict()  # read ahead by another thread (prefetch)
        self._prefetch_lock = threading.Lock()
        self.num_loads_total = 0
        self.num_evictions_total = 0
        self.load_time_s_total = 0.0

    # ---- the host store ----------------------------------------------------------------------

    def prefetch(self, lora: LoraRequest) -> None:
        """Read ``lora`` now, from any thread, so that ``add`` or a step's load (on the engine's thread) finds
        it read: the disk read happens while the engine keeps stepping. Errors propagate (the engine thread
        reads again and refuses the request there); an adapter in host RAM or read ahead is not read again."""
        with self._prefetch_lock:
            if not self.needs_read(lora.lora_id):
                return
        adapter = self._read(lora)
        with self._prefetch_lock:
            self._prefetched[lora.lora_id] = adapter
            while len(self._prefetched) > PREFETCHED_KEPT:  # read ahead for requests that never came
                self._prefetched.popitem(last=False)

    def needs_read(self, lora_id: int) -> bool:
        """True when using the adapter would read its files: not in host RAM (never added, or dropped by the
        host LRU, ``max_cpu_loras``) and not read ahead. Any thread."""
        return lora_id not in self._host and lora_id not in self._prefetched

    def ensure_host(self, lora_id: int) -> None:
        """Bring a registered adapter into host RAM now (read ahead, else from its directory), so a step does
        not read it; AdapterError (its files are gone or changed) leaves the store as it was."""
        self._load_host(lora_id)

    def add(self, lora: LoraRequest) -> PeftAdapter:
        """Read and check the adapter (AdapterError on a bad one, nothing changed); replaces one of the same id."""
        with self._prefetch_lock:
            adapter = self._prefetched.pop(lora.lora_id, None)
        if adapter is None:
            adapter = self._read(lora)
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

    def host_adapter(self, lora_id: int) -> PeftAdapter | None:
        """The adapter if it is in host RAM now (no read from disk)."""
        return self._host.get(lora_id)

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

    def _read_peft(self, lora: LoraRequest) -> PeftAdapter:
        return load_peft_adapter(lora.path, self.model_config, self.config.max_lora_rank)

    def _put_host(self, lora_id: int, adapter: PeftAdapter) -> None:
        self._host[lora_id] = adapter
        self._host.move_to_end(lora_id)
        limit = self.config.max_cpu_loras
        while limit is not None and len(self._host) > limit:
            self._host.popitem(last=False)  # read again from its directory when next needed

    def _load_host(self, lora_id: int) -> PeftAdapter:
        adapter = self._host.get(lora_id)
        if adapter is None:
            with self._prefetch_lock:
                adapter = self._prefetched.pop(lora_id, None)
            if adapter is None:
                adapter = self._read(self._registered[lora_id])
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
                slot = self._take_slot(lora_ids)
                t0 = time.perf_counter()
                self._write_slot(slot, self._load_host(lora_id))
                self.load_time_s_total += time.perf_counter() - t0
                self._slot_of[lora_id] = slot
                self.num_loads_total += 1
        return {lora_id: self._slot_of[lora_id] for lora_id in lora_ids}

    def _take_slot(self, keep: set[int]) -> int:
        if self._free_slots:
            return self._free_slots.pop()
        victim = next(i for i in self._slot_of if i not in keep)  # exists: len(keep) <= slots
        self.num_evictions_total += 1
        return self._slot_of.pop(victim)


class StoreBackedSlots:
    """The LoRA runner verbs a backend's device slots answer from their ``LoraStore`` (``self.store``); the
    backend subclass owns the device tensors the store's loads and evictions fill."""

    store: LoraStore

    def add(self, lora: LoraRequest) -> PeftAdapter:
        return self.store.add(lora)

    def activate(self, lora_ids: set[int]) -> dict[int, int]:
        return self.store.activate(lora_ids)

    def stats(self) -> LoraStats:
        return self.store.stats()


class LoraRunnerVerbs:
    """engine/lora.py's ``LoraRunner`` verbs, the same for every runner: ``self.lora_slots`` (None when built
    without LoRA) holds the adapters, its ``store`` the registry and the slot LRU."""

    lora_slots: Any

    def add_lora(self, lora: LoraRequest) -> None:
        if self.lora_slots is None:
            raise ValueError("this runner was built without LoRA support (no lora_config)")
        self.lora_slots.add(lora)

    def remove_lora(self, lora_id: int) -> bool:
        return self.lora_slots is not None and self.lora_slots.store.remove(lora_id)

    def resident_lora_ids(self) -> list[int]:
        return [] if self.lora_slots is None else self.lora_slots.store.resident_lora_ids()

    def lora_stats(self) -> LoraStats:
        return LoraStats(0, 0, 0, 0, 0, 0.0) if self.lora_slots is None else self.lora_slots.stats()
