"""vLLM's API server flags where `zoo controlplane` has its own way to say the same, so a `vllm serve` command line's
address and CORS flags work as they are:

    --host HOST --port PORT        the API's address (ours: --http HOST:PORT); either alone keeps --http's other half
                                   (127.0.0.1, 8000: vLLM binds every interface by default, this gateway loopback)
    --allowed-origins JSON         ["https://app.example"] (ours: --cors-origins a,b); vLLM's default ["*"]
    --allowed-methods JSON, --allowed-headers JSON, --allow-credentials
                                   the CORS answer's methods, headers and credentials (vLLM's defaults: ["*"], ["*"],
                                   off)

Giving the same thing both ways (``--http`` and ``--host``, ``--cors-origins`` and ``--allowed-origins``) is refused,
naming both, rather than one silently winning.
"""

from __future__ import annotations

import argparse
import json


def _json_strings(flag: str):
    def parse(text: str) -> tuple[str, ...]:
        try:
            value = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            value = None
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise argparse.ArgumentTypeError(f"{flag} takes a JSON list of strings, e.g. '[\"*\"]', got {text!r}")
        return tuple(value)

    return parse


def add_vllm_server_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--host", default=None, help="the API's host (vLLM's; beside --http's port)")
    p.add_argument("--port", type=int, default=None, help="the API's port (vLLM's; beside --http's host)")
    p.add_argument("--allowed-origins", type=_json_strings("--allowed-origins"), default=None, metavar="JSON",
                   help="CORS origins as vLLM takes them, a JSON list (instead of --cors-origins)")  # fmt: skip
    p.add_argument("--allowed-methods", type=_json_strings("--allowed-methods"), default=("*",), metavar="JSON",
                   help="CORS: the methods a browser page may use (vLLM's; default [\"*\"])")  # fmt: skip
    p.add_argument("--allowed-headers", type=_json_strings("--allowed-headers"), default=("*",), metavar="JSON",
                   help="CORS: the headers a browser page may send (vLLM's; default [\"*\"])")  # fmt: skip
    p.add_argument("--allow-credentials", action="store_true", help="CORS: allow credentials (vLLM's; default off)")


def http_address(args: argparse.Namespace, default: str) -> str | None:
    """The API's HOST:PORT from --http, or from vLLM's --host/--port (each alone: --http's default other half); None
    for ``--http none``. SystemExit when --http and --host/--port both set it."""
    host, port = getattr(args, "host", None), getattr(args, "port", None)
    if host is None and port is None:
        return None if args.http == "none" else args.http
    if args.http != default:
        raise SystemExit("zoo controlplane: --http and --host/--port both give the API's address: give one")
    if port is not None and not 0 <= port <= 65535:
        raise SystemExit(f"zoo controlplane: --port must be 0..65535, got {port}")
    default_host, _, default_port = default.rpartition(":")
    return f"{default_host if host is None else host}:{default_port if port is None else port}"


def cors_origins(args: argparse.Namespace) -> tuple[str, ...]:
    """The CORS origins from --cors-origins ('*', a comma list, 'none') or vLLM's --allowed-origins (a JSON list)."""
    raw, allowed = getattr(args, "cors_origins", "*"), getattr(args, "allowed_origins", None)
    if allowed is not None:
        if raw != "*":
            raise SystemExit("zoo controlplane: --cors-origins and --allowed-origins both give the origins: give one")
        return allowed
    return () if raw == "none" else tuple(o.strip() for o in raw.split(",") if o.strip())
