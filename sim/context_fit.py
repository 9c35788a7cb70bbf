"""Whether a workload's prompts fit a fleet's context, said before a run rather than found in its table.

A prompt of ``max_model_len`` tokens or more leaves no room for an output token: the control plane refuses it
(``PROMPT_TOO_LONG``, engine/prompt.py's ``check_prompt_length``) and the report counts it unserved, with an
infinite TTFT. A trace of long prompts on a short-context fleet (mooncake on ``zoo``: 8,192 tokens) then gives a
table of ``inf`` for every policy alike, and a load figure that counts requests no node could take. ``zoo sim``
says so up front: how many, the longest, and the bundled fleets of a longer context with what they would refuse.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from sim.fleet import FLEETS_DIR, Fleet, load_fleet
from sim.workload import Workload


@dataclass(frozen=True, slots=True)
class ContextFit:
    num_prompts: int
    num_too_long: int  # prompts of max_model_len tokens or more: refused by the control plane
    max_model_len: int  # the fleet's context (every node of a simulated fleet has the same)
    longest_prompt: int
    longer_fleets: tuple[tuple[str, int, int], ...] = ()  # bundled fleets of a longer context: name, context, refused

    def warning(self, fleet_name: str) -> str | None:
        """One line for the run's log; None when every prompt fits."""
        if not self.num_too_long:
            return None
        share = self.num_too_long / self.num_prompts
        longer = ", ".join(f"{name} ({context} tokens: refuses {n})" for name, context, n in self.longer_fleets)
        return (
            f"warning: {self.num_too_long} of {self.num_prompts} prompts ({share:.0%}; the longest "
            f"{self.longest_prompt} tokens) do not fit fleet {fleet_name}'s context of {self.max_model_len} tokens: "
            f"the control plane refuses them (PROMPT_TOO_LONG), the report counts them unserved (TTFT inf) and the "
            f"offered load counts them" + (f"; bundled fleets of a longer context: {longer}" if longer else "")
        )

    def as_info(self) -> dict:
        return {
            "max_model_len": self.max_model_len,
            "num_prompts_too_long": self.num_too_long,
            "longest_prompt_tokens": self.longest_prompt,
        }


def fleet_context(fleet: Fleet) -> int:
    """The longest prompt + output a node of ``fleet`` holds (its scheduler's max_model_len)."""
    return fleet.engine.scheduler_config(fleet.model).max_model_len


def context_fit(workload: Workload, fleet: Fleet, fleets_dir: Path = FLEETS_DIR) -> ContextFit:
    """How many of ``workload``'s prompts ``fleet`` refuses as too long, and (only when some are) the bundled
    fleets in ``fleets_dir`` of a longer context, with how many each would refuse."""
    max_len = fleet_context(fleet)
    lengths = [r.num_prompt_tokens for r in workload.requests]
    num_too_long = sum(n >= max_len for n in lengths)
    longer: list[tuple[str, int, int]] = []
    if num_too_long:
        for path in sorted(fleets_dir.glob("*.toml")):
            context = fleet_context(load_fleet(path))
            if context > max_len:
                longer.append((path.stem, context, sum(n >= context for n in lengths)))
    return ContextFit(len(lengths), num_too_long, max_len, max(lengths, default=0), tuple(longer))


def warn_too_long(workload: Workload, fleet: Fleet, log: Callable[[str], None]) -> ContextFit:
    """``context_fit``, its warning logged (before the runs) where some prompts do not fit."""
    fit = context_fit(workload, fleet)
    if (warning := fit.warning(fleet.name)) is not None:
        log(warning)
    return fit
