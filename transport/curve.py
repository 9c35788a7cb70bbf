"""ZeroMQ CURVE for the control plane's sockets: key pairs, allow lists, and the ZAP handler that checks them.

    agent  DEALER (CURVE client: its key pair + the server's public key) ──┐ handshake ┌─ ROUTER :5555 CURVE server
    client DEALER (CURVE client) ──────────────────────────────────────────┤ encrypted │  ROUTER :5556 CURVE server
                                                                           ▼           │  ZAP domain says which list
                                     ZapHandler (REP inproc://zeromq.zap.01, the control plane's context)
                                       └─ ZapPolicy.reply(request): client key in the domain's allow list?
                                            200 + User-Id (the key's name) │ 400 (the connection is dropped)

Every message that arrives on a CURVE ROUTER carries the ZAP User-Id of its connection (``Received.user_id``).
On the agent socket the name of an agent's key *is* its node id: the channel drops a message whose routing id
(= node id) is not its key's name, so a NodeHello can only claim the node id its key was issued for, and
the agent ROUTER runs without ROUTER_HANDOVER, so a connection from another key cannot take a live node's
identity over (libzmq ignores a second connection with a routing id already in use).

Key files are the ones pyzmq's ``zmq.auth.create_certificates`` writes (and ``zmq.auth.load_certificate``
reads): ``NAME.key`` holds the public key, ``NAME.key_secret`` the pair. A CURVE directory (``zoo keys``)::

    controlplane.key  controlplane.key_secret      the control plane (every agent and client needs its .key)
    agents/NODE_ID.key  agents/NODE_ID.key_secret  one pair per agent; the .key files are the agent allow list
    clients/NAME.key  clients/NAME.key_secret      one pair per client; the .key files are the client allow list

Multi-host: the control plane's host needs ``controlplane.key_secret`` and the public ``agents/*.key`` and
``clients/*.key``; an agent's host needs ``controlplane.key`` and its own ``agents/NODE_ID.key_secret``.
"""

from __future__ import annotations

import datetime
import logging
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import zmq
import zmq.asyncio
from zmq.auth import load_certificate
from zmq.utils import z85

log = logging.getLogger(__name__)

ZAP_ENDPOINT = "inproc://zeromq.zap.01"  # fixed by the ZAP specification (RFC 27), one per zmq context
AGENT_DOMAIN = "zoo-agents"
CLIENT_DOMAIN = "zoo-clients"

CONTROLPLANE_NAME = "controlplane"
AGENTS_DIR = "agents"
CLIENTS_DIR = "clients"
PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")  # a file name and a node id (≤ 255 bytes)
MAX_LOGGED_REFUSALS = 1024  # distinct (domain, key) refusals logged at WARNING; later ones at DEBUG


class CurveKeyError(ValueError):
    """A key file or key directory that cannot be used (missing, malformed, or a pair that does not match)."""


def _check_z85_key(key: bytes, what: str) -> bytes:
    if not isinstance(key, bytes) or len(key) != 40:
        raise CurveKeyError(f"{what} must be a 40-character Z85 key, got {len(key) if key else 0} characters")
    try:
        z85.decode(key)
    except (ValueError, KeyError, IndexError):
        raise CurveKeyError(f"{what} is not valid Z85") from None
    return key


def check_name(name: str) -> str:
    """A key's name (a node id for agents): letters, digits, ``.``, ``_``, ``-``; it names a file."""
    if not NAME_PATTERN.fullmatch(name):
        raise CurveKeyError(f"key name {name!r} must match {NAME_PATTERN.pattern} (it is a file name and a node id)")
    return name


@dataclass(frozen=True, slots=True)
class CurveKeyPair:
    """A CURVE key pair, both Z85 (40 characters). The secret key never appears in ``repr``."""

    public_key: bytes
    secret_key: bytes = field(repr=False)

    def __post_init__(self) -> None:
        _check_z85_key(self.public_key, "public key")
        _check_z85_key(self.secret_key, "secret key")
        if zmq.curve_public(self.secret_key) != self.public_key:
            raise CurveKeyError("the public key does not belong to the secret key")

    @classmethod
    def generate(cls) -> CurveKeyPair:
        public, secret = zmq.curve_keypair()
        return cls(public, secret)

    @classmethod
    def load(cls, secret_file: str | os.PathLike) -> CurveKeyPair:
        """From a ``NAME.key_secret`` file."""
        public, secret = _load(secret_file)
        if secret is None:
            raise CurveKeyError(f"{secret_file}: no secret key (a public .key file was given; use NAME.key_secret)")
        try:
            return cls(public, secret)
        except CurveKeyError as e:
            raise CurveKeyError(f"{secret_file}: {e}") from None


def load_public_key(public_file: str | os.PathLike) -> bytes:
    """The public key of a ``NAME.key`` (or ``NAME.key_secret``) file."""
    public, _ = _load(public_file)
    try:
        return _check_z85_key(public, "public key")
    except CurveKeyError as e:
        raise CurveKeyError(f"{public_file}: {e}") from None


def _load(path: str | os.PathLike) -> tuple[bytes, bytes | None]:
    try:
        return load_certificate(path)
    except (OSError, ValueError) as e:
        raise CurveKeyError(f"cannot read the key file {path}: {e}") from None


def load_allow_list(directory: str | os.PathLike) -> dict[bytes, str]:
    """``{public key (Z85): name}`` from every ``NAME.key`` in ``directory`` (secret files are ignored).

    Raises CurveKeyError for a missing directory, a bad file or name, or one key under two names (its
    connections could then claim either node id).
    """
    root = Path(directory)
    if not root.is_dir():
        raise CurveKeyError(f"allow-list directory {root} does not exist")
    allowed: dict[bytes, str] = {}
    for path in sorted(root.glob("*" + PUBLIC_SUFFIX)):
        name = check_name(path.name[: -len(PUBLIC_SUFFIX)])
        key = load_public_key(path)
        if key in allowed:
            raise CurveKeyError(f"{root}: the same public key is in {allowed[key]}.key and {name}.key")
        allowed[key] = name
    return allowed


_PUBLIC_BANNER = """#   ****  Generated on {0} by Silicon Zoo (zoo keys)  ****
#   ZeroMQ CURVE Public Certificate
#   Give it to whoever must recognise this key; it holds no secret.

"""
_SECRET_BANNER = """#   ****  Generated on {0} by Silicon Zoo (zoo keys)  ****
#   ZeroMQ CURVE **Secret** Certificate
#   DO NOT PROVIDE THIS FILE TO OTHER USERS nor change its permissions.

"""


def _write_new(path: Path, text: str, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(text)


def _certificate(banner: str, keys: CurveKeyPair, metadata: Mapping[str, str], secret: bool) -> str:
    lines = [banner.format(datetime.datetime.now()), "metadata\n"]
    lines += [f"    {k} = {v}\n" for k, v in metadata.items()] if secret else []
    lines += ["curve\n", f'    public-key = "{keys.public_key.decode()}"\n']
    if secret:
        lines.append(f'    secret-key = "{keys.secret_key.decode()}"\n')
    return "".join(lines)


def write_key_pair(directory: str | os.PathLike, name: str, role: str) -> tuple[Path, Path]:
    """A new pair as ``directory/NAME.key`` (0644) and ``NAME.key_secret`` (0600), in the files and layout
    of ``zmq.auth.create_certificates``; an existing file is an error (FileExistsError)."""
    check_name(name)
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    public_path, secret_path = directory / (name + PUBLIC_SUFFIX), directory / (name + SECRET_SUFFIX)
    for path in (public_path, secret_path):
        if path.exists():
            raise FileExistsError(f"{path} exists (remove it to make a new key)")
    keys = CurveKeyPair.generate()
    metadata = {"name": name, "role": role}
    _write_new(secret_path, _certificate(_SECRET_BANNER, keys, metadata, secret=True), 0o600)
    _write_new(public_path, _certificate(_PUBLIC_BANNER, keys, metadata, secret=False), 0o644)
    return public_path, secret_path


def make_curve_dir(root: str | os.PathLike, agents: Sequence[str] = (), clients: Sequence[str] = ()) -> list[Path]:
    """The control plane's pair (unless it exists: every agent trusts it), then one pair per agent (named
    by node id) and per client; the paths written."""
    root = Path(root)
    written: list[Path] = []
    if not (root / (CONTROLPLANE_NAME + SECRET_SUFFIX)).exists():
        written += write_key_pair(root, CONTROLPLANE_NAME, "controlplane")
    for name in agents:
        written += write_key_pair(root / AGENTS_DIR, name, "agent")
    for name in clients:
        written += write_key_pair(root / CLIENTS_DIR, name, "client")
    for folder in (AGENTS_DIR, CLIENTS_DIR):  # an empty allow list admits nobody (and says so at start)
        (root / folder).mkdir(exist_ok=True)
    return written


# --------------------------------------------------------------------------- socket settings


@dataclass(frozen=True, slots=True)
class CurveServer:
    """A ROUTER's CURVE server side: its key pair and the ZAP domain whose allow list admits peers."""

    keys: CurveKeyPair
    domain: str


@dataclass(frozen=True, slots=True)
class CurveClient:
    """A DEALER's CURVE client side: the server's public key and its own pair (default: a fresh one,
    enough for a server that admits any client knowing its key)."""

    server_public_key: bytes
    keys: CurveKeyPair = field(default_factory=CurveKeyPair.generate)

    def __post_init__(self) -> None:
        _check_z85_key(self.server_public_key, "server public key")


@dataclass(frozen=True, slots=True)
class ControlPlaneCurve:
    """The control plane's CURVE: its key pair, the agent allow list (``{key: node id}``) and the client
    allow list (``{key: name}``; None: any client that knows the control plane's public key)."""

    keys: CurveKeyPair
    agents: Mapping[bytes, str]
    clients: Mapping[bytes, str] | None = None

    @property
    def agent_server(self) -> CurveServer:
        return CurveServer(self.keys, AGENT_DOMAIN)

    @property
    def client_server(self) -> CurveServer:
        return CurveServer(self.keys, CLIENT_DOMAIN)

    def zap_policy(self) -> ZapPolicy:
        return ZapPolicy({AGENT_DOMAIN: self.agents, CLIENT_DOMAIN: self.clients})


def load_controlplane_curve(curve_dir: str | os.PathLike, *, any_client: bool = False) -> ControlPlaneCurve:
    """From a CURVE directory: ``controlplane.key_secret``, ``agents/*.key`` and (unless ``any_client``)
    ``clients/*.key``."""
    root = Path(curve_dir)
    keys = CurveKeyPair.load(root / (CONTROLPLANE_NAME + SECRET_SUFFIX))
    agents = load_allow_list(root / AGENTS_DIR)
    if not agents:
        log.warning("%s: no agent keys: no agent can join", root / AGENTS_DIR)
    clients = None if any_client else load_allow_list(root / CLIENTS_DIR)
    if clients == {}:
        log.warning("%s: no client keys: no ZeroMQ client can connect (or --curve-clients any)", root / CLIENTS_DIR)
    return ControlPlaneCurve(keys, agents, clients)


def load_curve_client(curve_dir: str | os.PathLike, role: str, name: str | None) -> CurveClient:
    """An agent's (``role="agents"``, name = node id) or a client's (``role="clients"``) CURVE settings
    from a CURVE directory: ``controlplane.key`` and ``ROLE/NAME.key_secret``. A client without a name
    gets a fresh key pair (accepted only by a control plane that admits any client)."""
    if role not in (AGENTS_DIR, CLIENTS_DIR):
        raise ValueError(f"role must be {AGENTS_DIR!r} or {CLIENTS_DIR!r}, got {role!r}")
    root = Path(curve_dir)
    server_key = load_public_key(root / (CONTROLPLANE_NAME + PUBLIC_SUFFIX))
    if name is None:
        if role == AGENTS_DIR:
            raise CurveKeyError("an agent needs its node id to find its key")
        return CurveClient(server_key)
    return CurveClient(server_key, CurveKeyPair.load(root / role / (check_name(name) + SECRET_SUFFIX)))


def only_key_name(curve_dir: str | os.PathLike, role: str) -> str | None:
    """The name of the one ``ROLE/*.key_secret`` in a CURVE directory (an agent host that holds only its own
    key), or None when there are none or several."""
    secrets = sorted(Path(curve_dir, role).glob("*" + SECRET_SUFFIX))
    return secrets[0].name[: -len(SECRET_SUFFIX)] if len(secrets) == 1 else None


# --------------------------------------------------------------------------- ZAP


class ZapPolicy:
    """The decisions of a ZAP handler (RFC 27), sans-IO: one request's frames in, the reply's frames out.

    domains: ``{ZAP domain: {public key (Z85): name} or None}``; None admits any CURVE client (its
    User-Id is then its Z85 public key). Anything but CURVE, an unknown domain or an unlisted key → 400.
    ``accepted`` / ``refused`` count handshakes per domain, ``accepted_names`` per allow-listed name
    (plain dicts, for stats; bounded by the allow lists).
    """

    def __init__(self, domains: Mapping[str, Mapping[bytes, str] | None]) -> None:
        self._domains = {domain: (None if keys is None else dict(keys)) for domain, keys in domains.items()}
        self.accepted: dict[str, int] = dict.fromkeys(self._domains, 0)
        self.refused: dict[str, int] = dict.fromkeys(self._domains, 0)
        self.accepted_names: dict[str, int] = {}
        self._logged: set[tuple[str, bytes]] = set()

    def reply(self, request: list[bytes]) -> list[bytes]:
        """``[version, request_id, domain, address, identity, mechanism, *credentials]`` → the reply frames
        ``[version, request_id, status_code, status_text, user_id, metadata]``."""
        if len(request) < 6 or request[0] != b"1.0":
            return [b"1.0", request[1] if len(request) > 1 else b"", b"400", b"malformed ZAP request", b"", b""]
        request_id, domain_bytes, address, mechanism = request[1], request[2], request[3], request[5]
        domain = domain_bytes.decode(errors="replace")
        credentials = request[6:]
        if domain not in self._domains:
            return self._refuse(request_id, domain, address, b"", f"unknown ZAP domain {domain!r}")
        if mechanism != b"CURVE" or len(credentials) != 1 or len(credentials[0]) != 32:
            return self._refuse(request_id, domain, address, b"", "CURVE is required")
        public_key = z85.encode(credentials[0])
        allowed = self._domains[domain]
        if allowed is None:
            name = public_key.decode()
        else:
            name = allowed.get(public_key)
            if name is None:
                return self._refuse(request_id, domain, address, public_key, "the key is not in the allow list")
            self.accepted_names[name] = self.accepted_names.get(name, 0) + 1
        self.accepted[domain] += 1
        log.debug("ZAP %s: accepted %s from %s", domain, name, address.decode(errors="replace"))
        return [b"1.0", request_id, b"200", b"OK", name.encode(), b""]

    def _refuse(self, request_id: bytes, domain: str, address: bytes, key: bytes, why: str) -> list[bytes]:
        if domain in self.refused:
            self.refused[domain] += 1
        seen = (domain, key)
        level = logging.DEBUG
        if seen not in self._logged and len(self._logged) < MAX_LOGGED_REFUSALS:
            self._logged.add(seen)
            level = logging.WARNING
        log.log(level, "ZAP %s: refused %s (key %s): %s", domain, address.decode(errors="replace"), key.decode(), why)
        return [b"1.0", request_id, b"400", why.encode(), b"", b""]

    @property
    def num_refused(self) -> int:
        return sum(self.refused.values())


class ZapHandler:
    """The ZAP endpoint of one zmq context, served by ``serve`` (a loop of the owning actor).

    Made (and bound) before any CURVE server socket of the context binds, so no handshake can miss it;
    those sockets set ZAP_ENFORCE_DOMAIN, so without a handler they admit nobody. One per context.
    Made inside the event loop that runs ``serve``.
    """

    def __init__(self, ctx: zmq.asyncio.Context, policy: ZapPolicy) -> None:
        self.policy = policy
        self.num_replies = 0
        self._replied = anyio.Event()
        self._sock = ctx.socket(zmq.REP)
        try:
            self._sock.setsockopt(zmq.LINGER, 0)
            self._sock.bind(ZAP_ENDPOINT)
        except BaseException:
            self._sock.close(linger=0)
            raise

    async def serve(self) -> None:
        while True:
            request = await self._sock.recv_multipart()
            try:
                reply = self.policy.reply(request)
            except Exception:  # a policy bug must not leave libzmq's handshake (and the REP socket) waiting
                log.exception("ZAP: the policy failed")
                reply = [b"1.0", request[1] if len(request) > 1 else b"", b"500", b"internal error", b"", b""]
            await self._sock.send_multipart(reply)
            self.num_replies += 1
            self._replied.set()
            self._replied = anyio.Event()

    async def wait_until(self, predicate: Callable[[ZapPolicy], bool], timeout_s: float) -> None:
        """Wait until ``predicate(policy)`` holds, re-checked after every ZAP reply."""
        with anyio.fail_after(timeout_s):
            while not predicate(self.policy):
                await self._replied.wait()

    def close(self) -> None:
        self._sock.close(linger=0)
