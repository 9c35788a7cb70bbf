"""``zoo top [--control tcp://HOST:PORT] [--client tcp://HOST:PORT] [--alertmanager URL] [--batch [-n N] [--json]]``:
the CLI wires ``add_top_args`` / ``run_top`` (``--batch``: tui/top_batch.py, no TUI)."""

from __future__ import annotations

import argparse
import sys


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
        "--alertmanager",
        default=None,
        type=_http_url,
        metavar="URL",
        help="an Alertmanager's base URL (e.g. http://127.0.0.1:9093): the fleet's active alerts under the rates, "
        "critical first, asked every 5 s (deploy/prometheus/alertmanager.yml; docs/ALERTS.md)",
    )
    p.add_argument(
        "--batch",
        action="store_true",
        help="print snapshots as text (or JSON lines with --json) and exit, as top -b: for scripts and logs",
    )
    p.add_argument("-n", "--count", type=_positive, default=1, help="--batch: how many snapshots (default 1)")
    p.add_argument("--json", action="store_true", help="--batch: each snapshot as one JSON object per line")
    p.add_argument(
        "--timeout-s",
        type=float,
        default=10.0,
        help="--batch: exit 1 when a snapshot does not come within this long",
    )
    p.add_argument(
        "--stale-after-s",
        type=float,
        default=3.0,
        help="no snapshot for this long: show 'waiting for control plane'",
    )


def _http_url(text: str) -> str:
    from urllib.parse import urlsplit

    try:
        parts = urlsplit(text)
        parts.port  # noqa: B018 (a port that is not a number raises here)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not a URL: {text!r} ({e})") from e
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise argparse.ArgumentTypeError(f"an http:// or https:// URL with a host, got {text!r}")
    return text


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def run_top(args: argparse.Namespace, curve=None) -> int:
    """``curve``: the CURVE client keys for ``--client`` (zoo/keys.py reads them from --curve-dir)."""
    if args.batch:
        import anyio

        from tui.top_batch import run_batch

        return anyio.run(lambda: run_batch(args.control, args.count, as_json=args.json, timeout_s=args.timeout_s))
    if args.json:
        print("zoo top: --json needs --batch (the dashboard draws a TUI)", file=sys.stderr)
        return 2
    from tui.node_actions import NodeActions
    from tui.zoo_top import ZooTopApp

    actions = NodeActions(args.client, curve=curve) if args.client else None
    alerts = _alertmanager(args.alertmanager) if args.alertmanager else None
    ZooTopApp(args.control, stale_after_s=args.stale_after_s, node_actions=actions, alerts=alerts).run()
    return 0


def _alertmanager(url: str):
    """``() -> AlertsReply``: the fleet's active alerts from the Alertmanager at ``url``, one HTTP client kept."""
    import httpx

    from observe.alertmanager_alerts import fetch_alerts

    http = httpx.AsyncClient()

    async def alerts():
        return await fetch_alerts(http, url)

    return alerts
