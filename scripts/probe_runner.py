"""What the router probes (scripts/*_probe.py) share: their runs in a process pool, each run's JSON line printed as it
ends, then per case the mean goodput and P99 TTFT over the seeds of each setting; and the simulator's hardware_aware
swapped for a probe's subclass of it."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from multiprocessing import Pool

import sim.des as des

_real_make_policy = None  # des.make_policy as it was before the first install_policy


def run_probe(
    job: Callable[[tuple], dict], jobs: Sequence[tuple], procs: int, cases: Iterable[str], key: str, settings: Sequence
) -> list[dict]:
    """``job`` over ``jobs`` in ``procs`` processes; each row (with "case", ``key``, "goodput" and "p99") printed as a
    JSON line, then per case ``{"case": ..., "mean_goodput_p99_by_<key>": {setting: [goodput, p99]}}``, the means
    over the rows of that case and setting (goodput to 3 places, P99 to 2). Returns the rows."""
    rows = []
    with Pool(procs) as pool:
        for row in pool.imap(job, jobs):
            print(json.dumps(row), flush=True)
            rows.append(row)
    for case in cases:
        means = {}
        for setting in settings:
            sel = [r for r in rows if r["case"] == case and r[key] == setting]
            goodput, p99 = (sum(r[name] for r in sel) / len(sel) for name in ("goodput", "p99"))
            means[setting] = (round(goodput, 3), round(p99, 2))
        print(json.dumps({"case": case, f"mean_goodput_p99_by_{key}": means}), flush=True)
    return rows


def install_policy(cls: Callable) -> None:
    """From now on in this process, the simulator builds ``cls(config)`` where it would build hardware_aware."""
    global _real_make_policy
    if _real_make_policy is None:
        _real_make_policy = des.make_policy
    real = _real_make_policy
    des.make_policy = lambda name, config=None: cls(config) if name == "hardware_aware" else real(name, config)
