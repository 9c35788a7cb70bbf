"""The protocol every backend implements (torch, JAX, simulated GPU).

Core code imports this protocol, never torch or jax. A runner owns the KV cache memory of both
tiers it can address directly (device blocks and host-RAM blocks); the block manager owns only
the integers that name them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from engine.batch import RunnerOutput, SchedulerOutput


@dataclass(slots=True, frozen=True)
class KVCacheSpec:
    """Geometry of the paged KV cache a runner allocates.

    Device tensors per layer: K and V, each [num_device_blocks, block_size, num_kv_heads, head_dim].
    Host tensors per layer: the same with num_host_blocks.
    """

    num_device_blocks: int
    num_host_blocks: int
    block_size: int


@runtime_checkable
class ModelRunner(Protocol):
    """Executes scheduler steps for one model on one device."""

    @property
    def max_model_len(self) -> int:
        """Longest sequence (prompt + output) the model supports."""
        ...

    def kv_bytes_per_block(self, block_size: int) -> int:
        """Bytes one KV block (all layers, K and V) takes in this runner's KV dtype."""
        ...

    def initialize_kv_cache(self, spec: KVCacheSpec) -> None:
        """Allocate device and host KV blocks. Called once before the first step."""
        ...

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        """Apply the batch's block moves, run the forward pass, sample. See batch.py for order."""
        ...
