"""HTTP API keys: ``Authorization: Bearer <key>`` (or, without it, ``x-api-key: <key>``, as Anthropic's SDK sends
its key to /v1/messages) checked in front of the gateway (an ASGI middleware).

    request ─► ApiKeyMiddleware ─┬─ open path (/health; /metrics when configured open) ─────────► the app
                                 ├─ no bearer token ─► 401 {"error": {..., "code": null}}
                                 ├─ unknown key ─────► 401 {"error": {..., "code": "invalid_api_key"}}
                                 └─ a configured key ─────────────────────────────────────────────► the app

The 401 bodies are OpenAI's (same status, ``type``, ``param`` and ``code``; the openai SDK raises
AuthenticationError), except that a wrong key is never echoed back, not even masked. Keys are compared as
SHA-256 digests (a set lookup on digests leaks nothing usable about a key through timing). Keys come from
a file (one per line; blank lines and ``#`` comments are skipped) or the ``zoo controlplane`` command line's
environment (zoo/keys.py reads ``ZOO_API_KEYS``); no keys configured: no middleware, the API is open.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import msgspec
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from controlplane.gateway.errors import http_error_body
from controlplane.tenants import KEY_ATTRIBUTES

MISSING_KEY_MESSAGE = (
    "You didn't provide an API key. You need to provide your API key in an Authorization header using "
    "Bearer auth (i.e. Authorization: Bearer YOUR_KEY)."
)
INVALID_KEY_MESSAGE = "Incorrect API key provided."
MAX_KEY_CHARS = 1024


class ApiKeyError(ValueError):
    """An unusable key or key file."""


@dataclass(frozen=True, slots=True)
class ApiKeyConfig:
    """keys: the accepted bearer tokens (never shown in ``repr``).
    protect_health: /health needs a key too (default: open, for load balancers' probes).
    protect_metrics: /metrics needs a key (default; Prometheus sends one with ``authorization.credentials``).
    tenant_of: key → its tenant's name (controlplane/tenants.py: ``KEY tenant=NAME ...`` in the key file); a
        request with that key is that tenant's (``request.state.zoo_tenant``); other keys: no tenant.
    What a request stores (a stored response, gateway/response_store.py) is its owner's (``request.state.zoo_owner``):
    its key's tenant, or the key itself where the key has none.
    """

    keys: frozenset[str] = field(repr=False)
    protect_health: bool = False
    protect_metrics: bool = True
    tenant_of: Mapping[str, str] = field(default_factory=dict, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.keys:
            raise ApiKeyError("an ApiKeyConfig needs at least one key (no keys: do not install the middleware)")
        for key in self.keys:
            if not key or len(key) > MAX_KEY_CHARS or not key.isascii() or not key.isprintable() or " " in key:
                raise ApiKeyError(f"an API key must be 1..{MAX_KEY_CHARS} printable ASCII characters without spaces")

    @property
    def open_paths(self) -> frozenset[str]:
        return frozenset(
            path
            for path, protected in (
                ("/health", self.protect_health),
                ("/ping", self.protect_health),  # SageMaker's health path (as vLLM serves it): as /health
                ("/version", self.protect_health),
                ("/metrics", self.protect_metrics),
                ("/metrics/targets", self.protect_metrics),  # Prometheus service discovery: as /metrics
            )
            if not protected
        )


def parse_api_keys(text: str) -> list[str]:
    """Keys from a file's text or a comma/whitespace-separated list: ``#`` starts a comment; a key's
    tenant attributes (``tenant=``, ``class=``, ``rpm=``, ``tpm=``: controlplane/tenants.py) are skipped."""
    keys: list[str] = []
    for line in text.splitlines():
        line = line.split("#", 1)[0]
        keys += [key for key in line.replace(",", " ").split() if key and not _is_attribute(key)]
    return keys


def _is_attribute(word: str) -> bool:
    name, eq, _ = word.partition("=")
    return bool(eq) and name in KEY_ATTRIBUTES


def load_api_keys(path: str | os.PathLike) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            return parse_api_keys(f.read())
    except (OSError, UnicodeDecodeError) as e:
        raise ApiKeyError(f"cannot read the API key file {path}: {e}") from None


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def _unauthorized(message: str, code: str | None) -> tuple[bytes, list[tuple[bytes, bytes]]]:
    body = msgspec.json.encode(http_error_body(message, code=code))
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", b'Bearer realm="silicon-zoo"'),
    ]
    return body, headers


@dataclass(frozen=True, slots=True)
class _Keys:
    """What a request is checked against, derived from one ApiKeyConfig (swapped whole at a reload)."""

    config: ApiKeyConfig
    digests: frozenset[bytes]
    tenant_of: Mapping[bytes, str]
    open_paths: frozenset[str]

    @classmethod
    def of(cls, config: ApiKeyConfig) -> _Keys:
        tenants = {_digest(key.encode()): tenant for key, tenant in config.tenant_of.items()}
        return cls(config, frozenset(_digest(key.encode()) for key in config.keys), tenants, config.open_paths)


class ApiKeyRing:
    """The gateway's keys, replaceable while it serves (SIGHUP re-reads the key file: zoo/keys_reload.py): a key
    revoked is refused from the next request on, a key added accepted; a request already past the check (a stream)
    goes on. ``replace`` swaps one immutable snapshot, so a request sees the old keys or the new, never a mix."""

    def __init__(self, config: ApiKeyConfig) -> None:
        self.keys = _Keys.of(config)
        self.reloads: dict[str, int] = {"ok": 0, "refused": 0}  # zoo:api_key_reloads_total{outcome}
        self.refused: dict[str, int] = {"missing_api_key": 0, "invalid_api_key": 0}  # requests refused, by kind

    @classmethod
    def of(cls, keys: ApiKeyConfig | ApiKeyRing | None) -> ApiKeyRing | None:
        return keys if keys is None or isinstance(keys, ApiKeyRing) else cls(keys)

    @property
    def config(self) -> ApiKeyConfig:
        return self.keys.config

    def replace(self, config: ApiKeyConfig) -> tuple[int, int]:
        """Check requests against ``config`` from now on; (keys added, keys revoked)."""
        old = self.keys
        self.keys = _Keys.of(config)
        return len(self.keys.digests - old.digests), len(old.digests - self.keys.digests)


class ApiKeyMiddleware:
    """Pure ASGI (no response buffering: SSE streams pass straight through). Counts refusals by kind. ``config``:
    the keys, or an ApiKeyRing whose keys a reload replaces."""

    def __init__(self, app: ASGIApp, config: ApiKeyConfig | ApiKeyRing) -> None:
        self.app = app
        self.ring = config if isinstance(config, ApiKeyRing) else ApiKeyRing(config)
        self.refused = self.ring.refused  # (the ring's: exported, observe/api_key_metrics.py)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        keys = self.ring.keys  # one snapshot for the whole check
        if scope["type"] not in ("http", "websocket") or scope["path"] in keys.open_paths:
            await self.app(scope, receive, send)  # lifespan events carry no request
            return
        token = bearer_token(scope["headers"])
        digest = _digest(token) if token is not None else b""
        if token is not None and digest in keys.digests:
            tenant = keys.tenant_of.get(digest)
            state = scope.setdefault("state", {})
            if tenant is not None:
                state["zoo_tenant"] = tenant
            state["zoo_owner"] = f"tenant:{tenant}" if tenant is not None else f"key:{digest.hex()[:32]}"
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":  # (the gateway has none; refuse before any route sees one)
            await send({"type": "websocket.close", "code": 1008})
            return
        if token is None:
            self.refused["missing_api_key"] += 1
            body, headers = _unauthorized(MISSING_KEY_MESSAGE, None)
        else:
            self.refused["invalid_api_key"] += 1
            body, headers = _unauthorized(INVALID_KEY_MESSAGE, "invalid_api_key")
        await send({"type": "http.response.start", "status": 401, "headers": headers})
        await send({"type": "http.response.body", "body": body})


def bearer_token(headers: Iterable[tuple[bytes, bytes]]) -> bytes | None:
    """The token of the first ``Authorization: Bearer TOKEN`` header (scheme case-insensitive), else of an
    ``x-api-key`` header (how Anthropic's SDK sends its key, /v1/messages), or None."""
    api_key = None
    for name, value in headers:
        name = name.lower()
        if name == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            token = token.strip()
            if scheme.lower() == b"bearer" and token:
                return token
            return None
        if name == b"x-api-key" and api_key is None:
            api_key = value.strip() or None
    return api_key


def request_tenant(request: Request) -> str | None:
    """The tenant of the request's API key (set by ApiKeyMiddleware), None on an open gateway."""
    return request.scope.get("state", {}).get("zoo_tenant")


def request_owner(request: Request) -> str | None:
    """Whose what a request stores is (a response, a file, a batch): the API key's tenant, else the key (set by
    ApiKeyMiddleware); None on an open gateway."""
    return request.scope.get("state", {}).get("zoo_owner")
