"""Where a run's goodput is won and lost: each GPU type's requests and which SLO target they met.

Goodput alone says how many requests met the SLO; this says where the rest were lost. Per GPU profile (the node
the control plane placed a request on; ``unplaced`` for a request it refused), over that profile's requests::

    requests   how many were placed there
    ttft_met   share with TTFT <= slo_ttft_s          tpot_met  share that finished with TPOT <= slo_tpot_s
    both_met   share meeting both (that type's goodput)
    of_all     requests meeting both there / every request of the run: the type's part of the run's goodput
               (the parts sum to the goodput)

A request unfinished at the drain limit does not meet TPOT (nor, so, the goodput), as in the goodput; its TTFT
counts where its first token came in time. Over several seeds each figure is the mean of the seeds' (a type a seed
did not use counts as no requests, shares 0).
"""

from __future__ import annotations

import math

import numpy as np

from sim.des import SimResult

UNPLACED = "unplaced"
FIELDS = ("requests", "ttft_met", "tpot_met", "both_met", "of_all")


def slo_by_gpu(result: SimResult, slo_ttft_s: float, slo_tpot_s: float) -> dict[str, dict[str, float]]:
    """Per GPU profile (sorted, ``unplaced`` last if any): the figures of the module docstring."""
    profile_of = {n.node_id: n.profile for n in result.nodes}
    tallies: dict[str, list[int]] = {}  # requests, ttft met, tpot met, both met
    for r in result.records:
        profile = UNPLACED if r.node_id is None else profile_of.get(r.node_id, UNPLACED)
        tally = tallies.setdefault(profile, [0, 0, 0, 0])
        ttft_met = r.ttft_s <= slo_ttft_s
        tpot_met = r.finish_s is not None and r.tpot_s <= slo_tpot_s
        tally[0] += 1
        tally[1] += ttft_met
        tally[2] += tpot_met
        tally[3] += ttft_met and tpot_met
    total = len(result.records)
    order = sorted(p for p in tallies if p != UNPLACED) + ([UNPLACED] if UNPLACED in tallies else [])
    return {
        p: {
            "requests": tallies[p][0],
            "ttft_met": tallies[p][1] / tallies[p][0],
            "tpot_met": tallies[p][2] / tallies[p][0],
            "both_met": tallies[p][3] / tallies[p][0],
            "of_all": tallies[p][3] / total,
        }
        for p in order
    }


def mean_slo_by_gpu(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The seeds' ``slo_by_gpu`` figures averaged field by field (a profile missing from a seed: zeros)."""
    profiles = sorted({p for run in runs for p in run if p != UNPLACED})
    if any(UNPLACED in run for run in runs):
        profiles.append(UNPLACED)
    zero = dict.fromkeys(FIELDS, 0.0)
    return {p: {f: float(np.mean([run.get(p, zero)[f] for run in runs])) for f in FIELDS} for p in profiles}


def format_slo_by_gpu(rows: list[tuple[str, dict[str, dict[str, float]]]], slo_ttft_s: float, slo_tpot_s: float) -> str:
    """One line per policy: per GPU type, the shares of its requests meeting TTFT / TPOT / both, and (in
    brackets) its part of the goodput. Empty when no policy has figures."""
    rows = [(policy, by_gpu) for policy, by_gpu in rows if by_gpu]
    if not rows:
        return ""
    profiles = sorted({p for _, by_gpu in rows for p in by_gpu if p != UNPLACED})
    if any(UNPLACED in by_gpu for _, by_gpu in rows):
        profiles.append(UNPLACED)
    lines = [
        f"where the SLO is met: per GPU type, the share of its requests meeting TTFT <= {slo_ttft_s:g} s / TPOT <= "
        f"{1e3 * slo_tpot_s:g} ms / both (its part of the goodput)",
        f"{'policy':24s} " + " ".join(f"{p:>25s}" for p in profiles),
    ]
    for policy, by_gpu in rows:
        cells = []
        for p in profiles:
            row = by_gpu.get(p)
            if row is None or not row["requests"]:
                cells.append(f"{'-':>25s}")
                continue
            shares = "/".join(_pct(row[f]) for f in ("ttft_met", "tpot_met", "both_met"))
            cells.append(f"{shares + ' (' + _pct(row['of_all'], 1) + ')':>25s}")
        lines.append(f"{policy:24s} " + " ".join(cells))
    return "\n".join(lines)


def _pct(x: float, digits: int = 0) -> str:
    return "-" if not math.isfinite(x) else f"{100 * x:.{digits}f}%"
