"""Request lengths drawn from the real traces (sim/traces/, package data), scaled down to fit a CPU.

Each trace row gives (arrival s, prompt tokens, output tokens) (read by sim/workload.py). A CPU cannot serve Azure's
1,155-token mean prompts at useful rates, so lengths are divided by a stated scale and clamped.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from sim.workload import load_trace

REPO_ROOT = Path(__file__).resolve().parents[1]


@dataclass(frozen=True, slots=True)
class LengthScale:
    """Divide trace lengths by these factors, then clamp to [min, max]."""

    prompt_div: float = 8.0
    output_div: float = 8.0
    min_prompt: int = 8
    max_prompt: int = 512
    min_output: int = 4
    max_output: int = 64

    def describe(self) -> str:
        return (
            f"prompt/{self.prompt_div:g} clamped to [{self.min_prompt}, {self.max_prompt}], "
            f"output/{self.output_div:g} clamped to [{self.min_output}, {self.max_output}]"
        )


def sample_lengths(n: int, scale: LengthScale, seed: int = 0, trace: str = "conv") -> list[tuple[int, int]]:
    """n (prompt, output) length pairs sampled from the trace (sim/workload.py ``load_trace``) with a fixed
    seed, scaled and clamped."""
    rows = load_trace(trace).requests
    rng = random.Random(seed)
    picked = rng.sample(rows, n) if n <= len(rows) else [rng.choice(rows) for _ in range(n)]
    out = []
    for r in picked:
        p = min(max(round(r.num_prompt_tokens / scale.prompt_div), scale.min_prompt), scale.max_prompt)
        o = min(max(round(r.max_tokens / scale.output_div), scale.min_output), scale.max_output)
        out.append((p, o))
    return out


def synthetic_prompt_ids(num_tokens: int, vocab_size: int, seed: int, num_special: int = 17) -> list[int]:
    """Token ids of a given length (ordinary tokens only; ids below num_special are control tokens)."""
    rng = random.Random(seed)
    return [rng.randrange(num_special, vocab_size) for _ in range(num_tokens)]
