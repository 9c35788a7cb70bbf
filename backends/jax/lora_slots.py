"""LoRA device slots as JAX arrays; which adapter is where is backends/lora_store.py's business.

Slot arrays (layouts in lora_store.py), S = max_loras + 1 (the last is the always-zero slot)::

    a[group]   [layers, S, in, n * R]       b[module]   [layers, S, R, out]

A slot is written by a jitted update that donates the old array, so XLA writes it in place.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from backends.checkpoint.peft_adapter import PeftAdapter, module_shape
from backends.jax.model import LoraParams
from backends.lora_store import LoraStore, StoreBackedSlots, lora_groups, slot_arrays
from engine.lora import LoraConfig


@partial(jax.jit, donate_argnums=(0,))
def _write(stack: jax.Array, slot: jax.Array, value: jax.Array) -> jax.Array:
    return stack.at[:, slot].set(value.astype(stack.dtype))


class JaxLoraSlots(StoreBackedSlots):
    """Device slots + the store that fills them. ``params(lora_ids, row_slots)`` for one program."""

    def __init__(self, model_config: Any, lora_config: LoraConfig, dtype: np.dtype, device: jax.Device) -> None:
        self.model_config = model_config
        self.config = lora_config
        self.store = LoraStore(model_config, lora_config, self._write_slot)
        self.zero_slot = self.store.zero_slot
        layers, num_slots, rank = model_config.num_hidden_layers, lora_config.max_loras + 1, lora_config.max_lora_rank
        self.a: dict[str, jax.Array] = {}
        self.b: dict[str, jax.Array] = {}
        for group in lora_groups(model_config):
            shape = (layers, num_slots, group.num_in(model_config), len(group.modules) * rank)
            self.a[group.name] = jax.device_put(jnp.zeros(shape, dtype), device)
            for module in group.modules:
                shape = (layers, num_slots, rank, module_shape(model_config, module)[0])
                self.b[module] = jax.device_put(jnp.zeros(shape, dtype), device)

    def params(self, row_slots: np.ndarray) -> LoraParams:
        """The step's LoraParams; ``row_slots`` [rows] int32 (padding and base rows: ``zero_slot``)."""
        return LoraParams(a=dict(self.a), b=dict(self.b), row_slots=row_slots)

    def _write_slot(self, slot: int, adapter: PeftAdapter) -> None:
        arrays = slot_arrays(adapter, self.model_config, self.config.max_lora_rank)
        index = np.int32(slot)
        for name in self.a:
            self.a[name] = _write(self.a[name], index, arrays[f"a:{name}"])
        for name in self.b:
            self.b[name] = _write(self.b[name], index, arrays[f"b:{name}"])
        for array in (*self.a.values(), *self.b.values()):
            array.block_until_ready()
