"""`zoo sleep [--level 1|2] [--mode abort|wait] [NODE ...]`, `zoo wake [--tags weights,kv_cache] [NODE ...]` and
`zoo sleep --status`: vLLM's sleep mode routes on a running control plane's gateway (controlplane/gateway/
sleep_routes.py; served when it was started with --enable-sleep-mode), every node or those named, a line per node.

The API key, TLS and exit codes as every operator's call (zoo/operator_call.py): exit 0 when a node did it, 1 when none
could (each node's reason printed), 2 when the gateway was not reached or has no such routes.
"""

from __future__ import annotations

import argparse

from zoo.operator_call import add_operator_args, call

SLEEP_TIMEOUT_S = 180.0  # the control plane waits up to 120 s for its nodes (controlplane/node_sleeps.py)
LEVELS = {0: "awake", 1: "asleep at level 1", 2: "asleep at level 2", -1: "to sleep once its requests are done"}


def add_sleep_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--level", type=int, choices=(1, 2), default=1, help="1: free the KV cache, weights to host RAM "
                   "(default); 2: free the weights too, reloaded at wake")  # fmt: skip
    p.add_argument("--mode", choices=("abort", "wait"), default="abort", help="abort: the nodes' requests resume on "
                   "other nodes (default); wait: each node sleeps once its requests are done")  # fmt: skip
    p.add_argument("--status", action="store_true", help="only say each node's level (GET /is_sleeping)")
    add_operator_args(p, SLEEP_TIMEOUT_S)


def add_wake_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tags", default="", metavar="weights,kv_cache", help="what to restore (default: everything)")
    add_operator_args(p, SLEEP_TIMEOUT_S)


def run_sleep(args: argparse.Namespace) -> int:
    if args.status:
        code, answer = call(args, "sleep", "GET", "/is_sleeping", "--enable-sleep-mode")
        for node_id, level in sorted(answer.get("nodes", {}).items()):
            if not args.node_id or node_id in args.node_id:
                print(f"{node_id}\t{LEVELS.get(level, level)}")
        return code
    params = {"level": str(args.level), "mode": args.mode}
    code, answer = call(args, "sleep", "POST", "/sleep", "--enable-sleep-mode", params)
    return _print_nodes(answer, code, "no answer yet (it sleeps once its requests are done)")


def run_wake(args: argparse.Namespace) -> int:
    params = {"tags": [t.strip() for t in args.tags.split(",") if t.strip()]}
    code, answer = call(args, "wake", "POST", "/wake_up", "--enable-sleep-mode", params)
    return _print_nodes(answer, code, "no answer (reloading its weights?)")


def _print_nodes(answer: dict, code: int, silent: str) -> int:
    for node_id, node in sorted(answer.get("nodes", {}).items()):
        if node is None:
            print(f"{node_id}\t{silent}")
            continue
        print(f"{node_id}\t{'ok' if node['ok'] else 'refused'}\t{node['detail']}")
    return code
