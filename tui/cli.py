"""``zoo top [--control tcp://HOST:PORT] [--client tcp://HOST:PORT]``: the CLI wires ``add_top_args`` / ``run_top``."""

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
        "--client",
        default=None,
        metavar="ENDPOINT",
        help="the control plane's client endpoint (e.g. tcp://127.0.0.1:5556): D drains the selected node, U resumes "
        "it (with --curve-dir for a CURVE control plane)",
    )
    p.add_argument(
        "--stale-after-s",
        type=float,
        default=3.0,
        help="no snapshot for this long: show 'waiting for control plane'",
    )


def run_top(args: argparse.Namespace, curve=None) -> int:
    """``curve``: the CURVE client keys for ``--client`` (zoo/keys.py reads them from --curve-dir)."""
    from tui.node_actions import NodeActions
    from tui.zoo_top import ZooTopApp

    actions = NodeActions(args.client, curve=curve) if args.client else None
    ZooTopApp(args.control, stale_after_s=args.stale_after_s, node_actions=actions).run()
    return 0
