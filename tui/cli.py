"""``zoo top [--control tcp://HOST:PORT]``: the CLI wires ``add_top_args`` / ``run_top``."""

from __future__ import annotations

import argparse


def add_top_args(p: argparse.ArgumentParser) -> None:
    from observe.stats_stream import DEFAULT_STATS_ENDPOINT

    p.add_argument(
        "--control",
        default=DEFAULT_STATS_ENDPOINT,
        help="the control plane's stats stream (its --stats-listen endpoint)",
    )
    p.add_argument(
        "--stale-after-s",
        type=float,
        default=3.0,
        help="no snapshot for this long: show 'waiting for control plane'",
    )


def run_top(args: argparse.Namespace) -> int:
    from tui.zoo_top import ZooTopApp

    ZooTopApp(args.control, stale_after_s=args.stale_after_s).run()
    return 0
