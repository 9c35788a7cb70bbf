"""`zoo profile start|stop [NODE ...]`: POST /start_profile or /stop_profile on a running control plane's gateway
(controlplane/gateway/profile_routes.py; served when it was started with --profiler-config), every node or those
named, and a line per node: what it did, and at a stop where its trace is on its disk.

The API key, TLS and exit codes as every operator's call (zoo/operator_call.py): exit 0 when a node did it, 1 when none
could (each node's reason printed), 2 when the gateway was not reached or has no such routes.
"""

from __future__ import annotations

import argparse

from zoo.operator_call import add_operator_args, call

PROFILE_TIMEOUT_S = 180.0  # the control plane waits up to 120 s for its nodes' traces (controlplane/profiling.py)


def add_profile_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("start", "stop"), help="start or stop the nodes' profilers")
    add_operator_args(p, PROFILE_TIMEOUT_S)


def run_profile(args: argparse.Namespace) -> int:
    code, answer = call(args, "profile", "POST", f"/{args.action}_profile", "--profiler-config")
    for node_id, node in sorted(answer.get("nodes", {}).items()):
        if node is None:
            print(f"{node_id}\tno answer (still writing its trace?)")
            continue
        print(f"{node_id}\t{'ok' if node['ok'] else 'refused'}\t{node['detail']}")
        for path in node.get("trace_files", []):
            print(f"{node_id}\t\t{path}")
    return code
