"""`zoo bench huge-pages`: the torch runner's decode step with its weights on huge pages vs on 4 KiB pages.

Two runners over two copies of the same model in one process, one built with ``huge_pages=False``, stepped
alternately so both see the same machine load (bench/decode_step.py's harness), at batch 1 (the step streams
every weight once: the bandwidth-bound case) and batch 32 (compute-bound), on 1 and on all threads (the
adaptive thread choice off, so both run the same count). Medians of wall and CPU time a step; the greedy tokens
of the two must be identical. ``granted`` is what backends/huge_pages.py measured in /proc/self/smaps.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any


def _median(values: list[float]) -> float:
    return sorted(values)[len(values) // 2]


def run_huge_pages_bench(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from backends.checkpoint import load_checkpoint
    from backends.huge_pages import thp_mode
    from bench.decode_step import _runner

    all_threads = args.num_threads or 2
    steps = 6 if getattr(args, "quick", False) else 16
    say = (lambda *a: print(*a, file=sys.stderr)) if args.json else print
    checkpoint = load_checkpoint(args.model)
    report: dict[str, Any] = {"model": checkpoint.config.name, "thp_mode": thp_mode(), "steps": steps}
    report["load_average_1m_start"] = os.getloadavg()[0]
    for batch in (1, 32):
        small = _runner(checkpoint, True, batch, 64, huge_pages=False, adaptive_threads=False)
        huge = _runner(checkpoint, True, batch, 64, adaptive_threads=False)
        for threads in sorted({1, all_threads}):
            torch.set_num_threads(threads)
            for _ in range(2):
                small(), huge()
            rows: dict[str, list[tuple[float, float]]] = {"4k": [], "huge": []}
            same = True
            for _ in range(steps):
                a, b = small(), huge()
                rows["4k"].append(a[:2])
                rows["huge"].append(b[:2])
                same &= a[2] == b[2]
            fig: dict[str, Any] = {}
            for name, r in rows.items():
                fig[f"{name}_cpu_ms"] = 1e3 * _median([x[0] for x in r])
                fig[f"{name}_wall_ms"] = 1e3 * _median([x[1] for x in r])
            fig["huge_vs_4k_wall"] = fig["4k_wall_ms"] / fig["huge_wall_ms"]
            fig["huge_vs_4k_cpu"] = fig["4k_cpu_ms"] / fig["huge_cpu_ms"]
            fig["same_tokens"] = same
            report[f"batch{batch}_threads{threads}"] = fig
            say(
                f"batch {batch}, {threads} thread(s): 4 KiB pages {fig['4k_wall_ms']:.1f} ms, huge pages "
                f"{fig['huge_wall_ms']:.1f} ms a step ({fig['huge_vs_4k_wall']:.2f}x); tokens identical: {same}"
            )
        report.setdefault("granted", huge.runner.huge_pages.summary())
    report["load_average_1m_end"] = os.getloadavg()[0]
    return report
