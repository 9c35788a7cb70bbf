"""`zoo keys`, and the authentication flags of `zoo controlplane` and `zoo agent`.

    zoo keys DIR --agent gpu-0 --agent gpu-1 --client app [--api-keys 1]
        DIR/controlplane.key(_secret)    made once (kept when it exists: every agent trusts it)
        DIR/agents/gpu-0.key(_secret)    the agent whose node id is gpu-0
        DIR/clients/app.key(_secret)     a ZeroMQ client
        DIR/api_keys                     HTTP API keys, one per line (with --api-keys N)

    zoo controlplane --curve-dir DIR [--curve-clients allowlist|any] [--api-keys FILE]
                     [--protect-health] [--open-metrics]
    zoo agent --curve-dir DIR [--node-id ID]     (ID defaults to the one key in DIR/agents/)
    zoo drain NODE --curve-dir DIR [--curve-client NAME]

The files are in the format of pyzmq's ``zmq.auth.create_certificates`` (``zmq.auth.load_certificate``
reads them); secret files are created mode 0600. The layout, its writing and its loading are
transport/curve.py's.
This module is the one place the API-key environment variable (``ZOO_API_KEYS``, comma or space
separated) is read; its keys are added to those of ``--api-keys FILE``.
"""

from __future__ import annotations

import argparse
import os
import secrets
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from transport.curve import (
    AGENTS_DIR,
    CLIENTS_DIR,
    CONTROLPLANE_NAME,
    PUBLIC_SUFFIX,
    SECRET_SUFFIX,
    ControlPlaneCurve,
    CurveClient,
    load_controlplane_curve,
    load_curve_client,
    make_curve_dir,
    only_key_name,
)

if TYPE_CHECKING:
    from controlplane.gateway.api_keys import ApiKeyConfig

API_KEYS_ENV = "ZOO_API_KEYS"
VLLM_API_KEY_ENV = "VLLM_API_KEY"  # vLLM's: one key
API_KEYS_FILE = "api_keys"
API_KEY_PREFIX = "zk-"


def make_api_key() -> str:
    return API_KEY_PREFIX + secrets.token_urlsafe(32)


def make_keys(
    root: str | os.PathLike, agents: Sequence[str] = (), clients: Sequence[str] = (), num_api_keys: int = 0
) -> list[Path]:
    """``make_curve_dir`` (transport/curve.py), then ``num_api_keys`` new API keys appended to
    ``root/api_keys`` (mode 0600); the paths written."""
    root = Path(root)
    written = make_curve_dir(root, agents, clients)
    if num_api_keys:
        path = root / API_KEYS_FILE
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8") as f:
            f.writelines(make_api_key() + "\n" for _ in range(num_api_keys))
        written.append(path)
    return written


# --------------------------------------------------------------------------- zoo keys


def add_keys_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("dir", help="the CURVE directory (created if needed; an existing control-plane key is kept)")
    p.add_argument("--agent", action="append", default=[], metavar="NODE_ID", help="an agent's key (repeatable)")
    p.add_argument("--client", action="append", default=[], metavar="NAME", help="a ZeroMQ client's key (repeatable)")
    p.add_argument("--api-keys", type=int, default=0, metavar="N", help="append N new HTTP API keys to DIR/api_keys")


def run_keys(args: argparse.Namespace) -> int:
    if args.api_keys < 0:
        raise ValueError("--api-keys must be >= 0")
    root = Path(args.dir)
    try:
        written = make_keys(root, args.agent, args.client, args.api_keys)
    except FileExistsError as e:
        raise ValueError(str(e)) from None
    for path in written:
        print(path)
    print(
        f"\ncontrol plane host: {root}/{CONTROLPLANE_NAME}{SECRET_SUFFIX}, {root}/{AGENTS_DIR}/*{PUBLIC_SUFFIX}, "
        f"{root}/{CLIENTS_DIR}/*{PUBLIC_SUFFIX}"
        f"\nagent host:         {root}/{CONTROLPLANE_NAME}{PUBLIC_SUFFIX} and its own "
        f"{root}/{AGENTS_DIR}/NODE_ID{SECRET_SUFFIX}"
        f"\nthen: zoo controlplane --curve-dir {root} ...   zoo agent --curve-dir {root} --node-id NODE_ID ..."
    )
    return 0


# --------------------------------------------------------------------------- flags of zoo controlplane / agent


def add_controlplane_auth_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--curve-dir", default=None, help="CURVE on the agent and client sockets, keys from `zoo keys`")
    p.add_argument(
        "--curve-clients",
        choices=["allowlist", "any"],
        default="allowlist",
        help="ZeroMQ clients admitted: the keys in CURVE_DIR/clients (default), or any that knows the server key",
    )
    p.add_argument("--api-keys", default=None, metavar="FILE", help=f"HTTP API keys, one per line (+ ${API_KEYS_ENV})")
    p.add_argument("--api-key", action="append", default=None, metavar="KEY",
                   help=f"an HTTP API key given here, as vLLM's flag (repeatable; + ${VLLM_API_KEY_ENV})")  # fmt: skip
    p.add_argument("--protect-health", action="store_true", help="with API keys: /health needs a key too")
    p.add_argument("--open-metrics", action="store_true", help="with API keys: /metrics needs none")


def add_agent_auth_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--curve-dir", default=None, help="CURVE to the control plane: CURVE_DIR/controlplane.key, agents/NODE_ID"
    )


def add_client_auth_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--curve-dir", default=None, help="CURVE to the control plane: CURVE_DIR/controlplane.key, ...")
    p.add_argument("--curve-client", default=None, metavar="NAME", help="... and clients/NAME.key_secret (default: a "
                   "fresh key, which only a control plane with --curve-clients any admits)")  # fmt: skip


def client_curve_from_args(args: argparse.Namespace) -> CurveClient | None:
    if args.curve_dir is None:
        return None
    return load_curve_client(args.curve_dir, CLIENTS_DIR, args.curve_client)


def controlplane_curve_from_args(args: argparse.Namespace) -> ControlPlaneCurve | None:
    if args.curve_dir is None:
        return None
    return load_controlplane_curve(args.curve_dir, any_client=args.curve_clients == "any")


def agent_node_id_and_curve(args: argparse.Namespace, default_node_id: str) -> tuple[str, CurveClient | None]:
    """The node id (``--node-id``; with ``--curve-dir`` and no id, the name of the one agent key there) and
    the agent's CURVE settings."""
    if args.curve_dir is None:
        return args.node_id or default_node_id, None
    node_id = args.node_id or only_key_name(args.curve_dir, AGENTS_DIR)
    if node_id is None:
        raise ValueError(f"--curve-dir {args.curve_dir}: give --node-id (the name of the agent's key in {AGENTS_DIR}/)")
    return node_id, load_curve_client(args.curve_dir, AGENTS_DIR, node_id)


def api_keys_from_args(args: argparse.Namespace, environ: Mapping[str, str] = os.environ) -> ApiKeyConfig | None:
    """``--api-keys FILE`` plus ``$ZOO_API_KEYS``, and vLLM's ``--api-key KEY`` and ``$VLLM_API_KEY``; None when none
    gives a key (the API stays open)."""
    from controlplane.gateway.api_keys import ApiKeyConfig, load_api_keys, parse_api_keys

    keys = load_api_keys(args.api_keys) if args.api_keys is not None else []
    keys += parse_api_keys(environ.get(API_KEYS_ENV, ""))
    given = [*(getattr(args, "api_key", None) or []), environ.get(VLLM_API_KEY_ENV, "")]
    keys += [key.strip() for key in given if key.strip()]  # each as it is: vLLM's keys are whole strings
    if args.api_keys is not None and not keys:
        raise ValueError(f"--api-keys {args.api_keys}: the file holds no key")
    if not keys:
        return None
    tenant_of = _key_tenants(args.api_keys)[0] if args.api_keys is not None else {}
    return ApiKeyConfig(
        frozenset(keys),
        protect_health=args.protect_health,
        protect_metrics=not args.open_metrics,
        tenant_of=tenant_of,
    )


def tenants_from_args(args: argparse.Namespace) -> list:
    """The tenants the ``--api-keys`` file describes (``KEY tenant=NAME class=C rpm=N tpm=N``,
    controlplane/tenants.py); none without a file."""
    return _key_tenants(args.api_keys)[1] if getattr(args, "api_keys", None) is not None else []


def _key_tenants(path) -> tuple[dict[str, str], list]:
    from controlplane.tenants import parse_key_tenants

    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"cannot read the API key file {path}: {e}") from None
    try:
        return parse_key_tenants(text)
    except ValueError as e:
        raise ValueError(f"{path}: {e}") from None
