"""Sleep mode on the torch runner: what each of vLLM's levels frees (backends/sleep_levels.py; vLLM's
docs/features/sleep_mode.md: level 1 offloads the weights to CPU and discards the KV cache, level 2 discards both).

    sleep(1) on CUDA   KV cache, attention backend, step buffers, C decode kernel binding, CUDA graphs dropped;
                       model.to("cpu"), so the weights wait in host RAM
    sleep(1) on CPU    the same drops; the weights stay where they are (host RAM already)
    sleep(2)           the same drops, and the model itself (its oneDNN-packed copies and huge-page arena with it)
    wake "weights"     model.to(device), or at level 2 ``TorchModelRunner._load_model`` again: built from the
                       same source, packed and put on huge pages as __init__ did
    wake "kv_cache"    ``initialize_kv_cache`` again with the last spec (backend, buffers, kernel, graphs re-made)

LoRA slots (lora_slots.py) stay on the device: they are small and hold adapters the store would reload anyway.
Not with tensor parallelism: every rank would have to sleep and wake in step (tp_runner.py refuses too).
"""

from __future__ import annotations

from itertools import chain
from typing import TYPE_CHECKING, Any

import torch

from backends.sleep_levels import SleepVerbs
from backends.torch.model import LlamaModel

if TYPE_CHECKING:  # only named: bench/gpu_check.py imports this module where msgspec (engine.batch's) is absent
    from engine.model_runner import KVCacheSpec

TP_UNSUPPORTED = "sleep mode is not supported with tensor parallelism here"


class TorchSleepVerbs(SleepVerbs):
    """SleepVerbs' hooks over TorchModelRunner's tensors (the attributes below, ``_load_model`` and
    ``initialize_kv_cache`` are the runner's)."""

    device: torch.device
    model: LlamaModel | None
    kv_cache: Any
    attn: Any
    buffers: Any
    cpu_decoder: Any
    graphs: Any
    packed_weights: bool
    huge_pages: Any
    _source: Any  # what __init__ loaded the weights from
    _tp: Any
    _kv_spec: KVCacheSpec | None  # the last initialize_kv_cache's

    def _check_sleep_supported(self, level: int) -> None:
        if self._tp is not None:
            raise RuntimeError(TP_UNSUPPORTED)
        if level == 2 and isinstance(self._source, LlamaModel):
            raise RuntimeError(
                "sleep level 2 discards the weights, and this runner's were handed in as a built LlamaModel, "
                "which it cannot reload: use level 1, or build the runner from a Checkpoint or ModelConfig"
            )

    def _sleep_kv(self) -> int:
        freed = 0 if self.kv_cache is None else tensor_bytes(self.kv_cache.device_kv)
        # everything bound to the cache's memory goes with it (the kernel and graphs hold its pointers)
        self.kv_cache = self.attn = self.buffers = self.cpu_decoder = self.graphs = None
        self._empty_cache()
        return freed

    def _sleep_weights(self, level: int) -> int:
        model = self.model
        if model is None:  # discarded already (level 2)
            return 0
        on_device = model.embed_t.device.type == self.device.type
        freed = model_bytes(model) if on_device and (level == 2 or self.device.type != "cpu") else 0
        if level == 2:
            self.model = None
            self.packed_weights = False
            self.huge_pages = None
        elif on_device and self.device.type != "cpu":
            model.to("cpu")
        self._empty_cache()
        return freed

    def _wake_weights(self) -> None:
        if self.model is None:
            self._load_model()
        elif self.model.embed_t.device.type != self.device.type:
            self.model.to(self.device)

    def _wake_kv(self) -> None:
        if self._kv_spec is not None:  # else there was no cache to restore
            self.initialize_kv_cache(self._kv_spec)

    def _empty_cache(self) -> None:
        """Hand the caching allocator's free blocks back to the driver, so other processes can use them."""
        if self.device.type == "cuda":
            torch.cuda.empty_cache()


def tensor_bytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def model_bytes(model: torch.nn.Module) -> int:
    """Bytes the model's parameters and buffers hold, each storage once (a tied head is the embedding's; weights on
    huge pages are one arena), plus their oneDNN-packed copies (cpu_packed.py)."""
    storages: dict[int, int] = {}
    packed = 0
    for t in chain(model.parameters(), model.buffers()):
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        copy = getattr(t, "packed", None)
        if copy is not None:
            packed += tensor_bytes(copy)
    return sum(storages.values()) + packed
