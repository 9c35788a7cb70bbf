"""LoRA adapters as the engine sees them: a name, where its files are, a stable integer id, the settings.

Sans-IO: no file is read here. A runner that serves adapters (``LoraRunner``) reads them when told to
``add_lora``; requests then name the adapter by ``lora_id``, which also enters the prefix-cache hash chain
(engine/kv/block_hash.py), so blocks computed under one adapter are never reused by another.

The id is derived from the adapter's name and path (``lora_int_id``), so every node and the router compute
the same id for the same adapter without talking to each other (the router hashes prompts too).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


def lora_int_id(name: str, path: str) -> int:
    """A stable positive 62-bit id for the adapter ``name`` at ``path`` (fits the block hash's int64)."""
    digest = hashlib.sha256(f"{name}\0{path}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 62) - 1) or 1


@dataclass(frozen=True, slots=True)
class LoraRequest:
    """An adapter to serve: ``name`` is what clients put in ``model``; ``path`` a PEFT LoRA directory."""

    name: str
    path: str
    lora_id: int = field(default=0)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or len(self.name) > 256:
            raise ValueError(f"a LoRA adapter needs a name of 1-256 characters, got {self.name!r}")
        if not isinstance(self.path, str) or not self.path:
            raise ValueError(f"LoRA adapter {self.name!r} needs a path")
        if self.lora_id == 0:
            object.__setattr__(self, "lora_id", lora_int_id(self.name, self.path))


@dataclass(slots=True)
class LoraConfig:
    """Multi-LoRA serving on one node.

    max_loras: device slots, i.e. distinct adapters one step can serve (the scheduler admits no request
        whose adapter would make the running set larger).
    max_lora_rank: the largest rank a slot holds; an adapter above it is refused at load.
    max_cpu_loras: adapters kept in host RAM; beyond it the least recently used is dropped and read again
        from its directory when next needed. None = every registered adapter stays in RAM.
    """

    max_loras: int = 8
    max_lora_rank: int = 16
    max_cpu_loras: int | None = None

    def __post_init__(self) -> None:
        if self.max_loras < 1:
            raise ValueError(f"max_loras must be >= 1, got {self.max_loras}")
        if not 1 <= self.max_lora_rank <= 512:
            raise ValueError(f"max_lora_rank must be in [1, 512], got {self.max_lora_rank}")
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras})")


@dataclass(frozen=True, slots=True)
class LoraStats:
    """Where a runner's adapters are: registered (host store or disk), in host RAM, in device slots."""

    num_registered: int
    num_host: int
    num_device: int
    num_loads_total: int  # host -> device slot copies
    num_evictions_total: int  # slots given to another adapter
    load_time_s_total: float


@runtime_checkable
class LoraRunner(Protocol):
    """A ModelRunner that serves LoRA adapters (the torch runner; the simulated one models them)."""

    lora_config: LoraConfig

    def add_lora(self, lora: LoraRequest) -> None:
        """Read and check the adapter into host RAM; raises ValueError (with the reason) and changes nothing."""
        ...

    def remove_lora(self, lora_id: int) -> bool:
        """Forget the adapter (host RAM and its device slot); False if it was not registered."""
        ...

    def resident_lora_ids(self) -> list[int]:
        """Adapters in device slots now, most recently used last."""
        ...

    def lora_stats(self) -> LoraStats: ...
