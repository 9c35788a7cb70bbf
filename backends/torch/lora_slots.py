"""LoRA device slots as torch tensors; which adapter is where is backends/lora_store.py's business.

Slot tensors (layouts in lora_store.py), S = max_loras + 1 (the last is the always-zero slot)::

    a[group]   [layers, S, in, n * R]       b[module]   [layers, S, R, out]
"""

from __future__ import annotations

from typing import Any

import torch

from backends.checkpoint.peft_adapter import PeftAdapter, module_shape
from backends.lora_store import LoraStore, StoreBackedSlots, lora_groups, slot_arrays
from backends.torch import huge_weights
from engine.lora import LoraConfig


class LoraSlots(StoreBackedSlots):
    """Device slots + the store that fills them. ``activate(lora_ids)`` -> {lora_id: slot} for one step."""

    def __init__(self, model_config: Any, lora_config: LoraConfig, dtype: torch.dtype, device: torch.device) -> None:
        self.model_config = model_config
        self.config = lora_config
        self.dtype, self.device = dtype, device
        self.groups = lora_groups(model_config)
        self.store = LoraStore(model_config, lora_config, self._write_slot)
        self.zero_slot = self.store.zero_slot
        layers, num_slots, rank = model_config.num_hidden_layers, lora_config.max_loras + 1, lora_config.max_lora_rank
        self.a: dict[str, torch.Tensor] = {}
        self.b: dict[str, torch.Tensor] = {}
        for group in self.groups:
            shape = (layers, num_slots, group.num_in(model_config), len(group.modules) * rank)
            self.a[group.name] = huge_weights.zeros(shape, dtype, device)  # huge pages on a CPU: streamed
            for module in group.modules:
                num_out = module_shape(model_config, module)[0]
                self.b[module] = huge_weights.zeros((layers, num_slots, rank, num_out), dtype, device)

    def _write_slot(self, slot: int, adapter: PeftAdapter) -> None:
        arrays = slot_arrays(adapter, self.model_config, self.config.max_lora_rank)
        for group in self.groups:
            self.a[group.name][:, slot].copy_(torch.from_numpy(arrays[f"a:{group.name}"]))
            for module in group.modules:
                self.b[module][:, slot].copy_(torch.from_numpy(arrays[f"b:{module}"]))
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
