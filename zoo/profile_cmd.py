"""`zoo profile start|stop [NODE ...]`: POST /start_profile or /stop_profile on a running control plane's gateway
(controlplane/gateway/profile_routes.py; served when it was started with --profiler-config), every node or those
named, and a line per node: what it did, and at a stop where its trace is on its disk.

The API key, when the gateway wants one: $ZOO_API_KEY or $OPENAI_API_KEY (as `zoo batch`). Exit 0 when a node did
it, 1 when none could (each node's reason printed), 2 when the gateway was not reached or has no such routes.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys

PROFILE_TIMEOUT_S = 180.0  # the control plane waits up to 120 s for its nodes' traces (controlplane/profiling.py)


def add_profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("start", "stop"), help="start or stop the nodes' profilers")
    p.add_argument("node_id", nargs="*", help="the nodes (default: every node)")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the control plane's OpenAI API")
    p.add_argument("--timeout-s", type=float, default=PROFILE_TIMEOUT_S, help="how long to wait for the answer")
    from zoo.batch_cmd import add_tls_args

    add_tls_args(p)


def run_profile(args: argparse.Namespace) -> int:
    import httpx

    from zoo.batch_cmd import tls_verify

    key = os.environ.get("ZOO_API_KEY") or os.environ.get("OPENAI_API_KEY")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"nodes": args.node_id} if args.node_id else {}
    try:
        verify = tls_verify(args)
        with httpx.Client(base_url=args.url.rstrip("/"), headers=headers, timeout=args.timeout_s, verify=verify) as h:
            reply = h.post(f"/{args.action}_profile", json=body)
    except (OSError, ssl.SSLError) as e:
        print(f"zoo profile: --cacert/--cert/--key: {e}", file=sys.stderr)
        return 2
    except httpx.HTTPError as e:  # not reached, refused the TLS handshake, timed out
        print(f"zoo profile: {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2
    if reply.status_code == 404:
        where = f"{args.url} serves no /{args.action}_profile"
        print(f"zoo profile: {where}: start its control plane with --profiler-config", file=sys.stderr)
        return 2
    try:
        answer = reply.json()
    except ValueError:
        answer = {}
    if reply.status_code != 200:
        message = answer.get("error", {}).get("message") if isinstance(answer, dict) else None
        print(f"zoo profile: {reply.status_code}: {message or reply.text[:500]}", file=sys.stderr)
        return 1 if reply.status_code == 400 else 2
    for node_id, node in sorted(answer.get("nodes", {}).items()):
        if node is None:
            print(f"{node_id}\tno answer (still writing its trace?)")
            continue
        print(f"{node_id}\t{'ok' if node['ok'] else 'refused'}\t{node['detail']}")
        for path in node.get("trace_files", []):
            print(f"{node_id}\t\t{path}")
    return 0
