"""Which LoRA adapter each trace request names: ``num_adapters`` adapters with a Zipf popularity.

Adapter k (1-based rank) is asked with probability k^-s / sum_j j^-s (a finite Zipf law; S-LoRA's and
dLoRA's evaluations draw adapter popularity the same way); s = 0 is uniform. Seeded, so the same trace,
seed and mix give every policy the same adapter sequence. The adapters are registered in a
``LoraTable`` as the control plane's ``--lora-modules`` would; their paths name nothing on disk (the
simulated runner reads no files).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from controlplane.lora_table import LoraTable


@dataclass(frozen=True, slots=True)
class AdapterMix:
    num_adapters: int  # 0 = every request runs on the base model
    zipf_s: float = 1.0
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_adapters < 0:
            raise ValueError(f"num_adapters must be >= 0, got {self.num_adapters}")
        if not self.zipf_s >= 0:
            raise ValueError(f"the Zipf exponent must be >= 0, got {self.zipf_s}")

    @staticmethod
    def name(k: int) -> str:
        return f"lora-{k}"

    def table(self) -> LoraTable:
        table = LoraTable()
        for k in range(1, self.num_adapters + 1):
            table.add(self.name(k), f"sim://adapters/{self.name(k)}")
        return table

    def assign(self, num_requests: int) -> list[str | None]:
        """The adapter name of each request in trace order (None: the base model)."""
        if self.num_adapters == 0:
            return [None] * num_requests
        weights = np.arange(1, self.num_adapters + 1, dtype=np.float64) ** -self.zipf_s
        rng = np.random.default_rng(self.seed)
        ranks = rng.choice(self.num_adapters, size=num_requests, p=weights / weights.sum()) + 1
        return [self.name(int(k)) for k in ranks]
