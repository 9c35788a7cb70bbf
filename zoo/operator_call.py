"""One call of an operator's command to a running control plane's gateway (`zoo profile`, `zoo sleep`, `zoo wake`):
its API key, TLS and timeout as `zoo batch` takes them, and what went wrong said in one line.

The API key, when the gateway wants one: $ZOO_API_KEY or $OPENAI_API_KEY. ``call`` answers (exit code, body): 0 and
the JSON body on a 200 (or a 202), 1 for a 400 (the message printed), 2 when the gateway was not reached, has no such
route (``flag`` names the control plane flag that serves it) or failed otherwise.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys


def add_operator_args(p: argparse.ArgumentParser, timeout_s: float) -> None:
    p.add_argument("node_id", nargs="*", help="the nodes (default: every node)")
    p.add_argument("--gpu-type", default=None, help="only the nodes of this GPU type (as zoo top names it, e.g. T4)")
    p.add_argument("--cell", default=None, help="only the nodes of this cell")
    p.add_argument("--url", default="http://127.0.0.1:8000", help="the control plane's OpenAI API")
    p.add_argument("--timeout-s", type=float, default=timeout_s, help="how long to wait for the answer")
    from zoo.batch_cmd import add_tls_args

    add_tls_args(p)


def call(args: argparse.Namespace, command: str, method: str, path: str, flag: str, params=None) -> tuple[int, dict]:
    import httpx

    from zoo.batch_cmd import tls_verify

    key = os.environ.get("ZOO_API_KEY") or os.environ.get("OPENAI_API_KEY")
    headers = {"authorization": f"Bearer {key}"} if key else {}
    body = {"nodes": args.node_id} if args.node_id else {}
    body |= {key: value for key in ("gpu_type", "cell") if (value := getattr(args, key, None)) is not None}
    try:
        verify = tls_verify(args)
        with httpx.Client(base_url=args.url.rstrip("/"), headers=headers, timeout=args.timeout_s, verify=verify) as h:
            reply = h.request(method, path, json=body if method == "POST" else None, params=params)
    except (OSError, ssl.SSLError) as e:
        print(f"zoo {command}: --cacert/--cert/--key: {e}", file=sys.stderr)
        return 2, {}
    except httpx.HTTPError as e:  # not reached, refused the TLS handshake, timed out
        print(f"zoo {command}: {args.url}: {type(e).__name__}: {e}", file=sys.stderr)
        return 2, {}
    if reply.status_code == 404:
        print(f"zoo {command}: {args.url} serves no {path}: start its control plane with {flag}", file=sys.stderr)
        return 2, {}
    try:
        answer = reply.json()
    except ValueError:
        answer = {}
    if reply.status_code not in (200, 202):
        message = answer.get("error", {}).get("message") if isinstance(answer, dict) else None
        print(f"zoo {command}: {reply.status_code}: {message or reply.text[:500]}", file=sys.stderr)
        return 1 if reply.status_code == 400 else 2, {}
    return 0, answer if isinstance(answer, dict) else {}
