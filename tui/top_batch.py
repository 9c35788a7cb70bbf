"""``zoo top --batch [-n N] [--json]``: the dashboard's figures without the TUI, for scripts, logs, cron jobs and
terminals that cannot draw one (``top -b -n N``'s batch mode, ``kubectl get``'s plain table).

    text (default)   per snapshot: the status line, the rates and cells lines (rates from the snapshot before; the
                     first one has none yet), the node table (the dashboard's columns, in its default order), the
                     fleet's latency figures by source; a blank line between snapshots
    --json           per snapshot: the FleetStats message itself, one JSON object per line (``| jq``)

It reads the control plane's stats stream (observe/stats_stream.py, its ``--stats-listen`` endpoint), prints ``N``
snapshots (default 1) and exits 0; with no snapshot within ``--timeout-s`` it says so on stderr and exits 1.
"""

from __future__ import annotations

import sys
from typing import TextIO

import anyio
import msgspec

from tui.fleet_view import (
    COLUMNS,
    EBPF_SERIES,
    SERIES,
    SOURCE_TITLES,
    SOURCES,
    FleetView,
    describe_figure,
    describe_rates,
    describe_status,
)


def describe_fleet(view: FleetView, where: str) -> str:
    """The text of ``view``'s latest snapshot, as the dashboard shows it, without its sparklines."""
    stats = view.stats
    assert stats is not None
    lines = [describe_status(stats, where)]
    lines += describe_rates(view).splitlines() if view.num_snapshots > 1 else ["rates: after a second snapshot"]
    rows = [[column.title for column in COLUMNS]] + [[column.cell(n) for column in COLUMNS] for n in view.rows()]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    lines += ["  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in rows]
    for name, title in SERIES:
        for source in SOURCES:
            if source == "ebpf" and (name not in EBPF_SERIES or not stats.ebpf_status):
                continue
            lines.append(f"{title} [{SOURCE_TITLES[source]}]: {describe_figure(view.figure(name, source))}")
    return "\n".join(lines)


async def run_batch(
    endpoint: str, count: int = 1, *, as_json: bool = False, timeout_s: float = 10.0, out: TextIO | None = None
) -> int:
    """Print ``count`` snapshots from ``endpoint``; 0, or 1 when one did not come within ``timeout_s``."""
    from observe.stats_stream import subscribe

    out = out or sys.stdout
    view = FleetView()
    stream = subscribe(endpoint)
    try:
        for i in range(count):
            stats = None
            with anyio.move_on_after(timeout_s):
                stats = await anext(stream)
            if stats is None:
                where = "the first" if i == 0 else f"snapshot {i + 1}"
                print(
                    f"zoo top: no snapshot from {endpoint} within {timeout_s:g} s ({where}): is the control plane "
                    "running, with its --stats-listen there?",
                    file=sys.stderr,
                )
                return 1
            view.update(stats)
            if as_json:
                out.write(msgspec.json.encode(stats).decode() + "\n")
            else:
                out.write(describe_fleet(view, endpoint) + ("\n\n" if i + 1 < count else "\n"))
            out.flush()
    finally:
        await stream.aclose()
    return 0
