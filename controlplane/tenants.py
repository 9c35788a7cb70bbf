"""Tenants: who a request is for, the traffic class it gets, its rate limits and what it used. Sans-IO.

An API key maps to a tenant in the same key file the gateway authenticates with (gateway/api_keys.py):
attributes after a key, ``name=value``::

    zk-4f…  tenant=acme  class=vip  rpm=600  tpm=200000     # requests/min, tokens/min (prompt + output)
    zk-9a…  tenant=acme                                      # another key of acme: its limits are acme's
    zk-77…  tenant=crawler class=batch rpm=60
    zk-0c…                                                   # no tenant: "default", no limits
    zk-5e…  tenant=bank cache=private                        # its own prefix cache (below)

A tenant with a class always gets it (a batch tenant cannot ask for vip); one without lets the request
choose (``x-zoo-class`` / ``traffic_class``). Limits are token buckets holding one minute's worth
(controlplane/token_bucket.py). At admission a request needs one request token and its prompt's tokens
(both taken once it is placed); its output tokens are charged when it ends, as a debt the tenant then
waits off. Past a limit the request is refused at once: ErrorReply OVERLOADED → HTTP 429 with
``Retry-After`` (the bucket's exact wait) in OpenAI's error shape (code ``rate_limit_exceeded``).

A tenant with ``cache=private`` shares no prefix-cache block with anyone else: each of its requests is salted
(vLLM's ``cache_salt``, engine/prefix_key.py) with a salt made from its name and the request's own salt, under a
prefix no client may use (``RESERVED_SALT_PREFIX``), so another tenant cannot forge it. Another tenant's request
can then never tell, by its own latency, whether this tenant's prompt is cached.

    place_request ─► class_of(tenant, asked) ─► check(tenant, prompt tokens, now) ─► placed ─► on_admitted
    request ends (completed, failed, cancelled) ─────────────────────────────────────────────► on_finished
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass

import msgspec

from controlplane.token_bucket import TokenBucket

DEFAULT_TENANT = "default"
KEY_ATTRIBUTES = ("tenant", "class", "rpm", "tpm", "cache")  # the ``name=value`` words a key file line may carry
RESERVED_SALT_PREFIX = "zoo-tenant:"  # the cache salts of private tenants; refused in a client's cache_salt


@dataclass(frozen=True, slots=True)
class BucketStatus:
    """One of a tenant's limits now: ``limit`` a minute, ``level`` what may be taken now (below 0: a debt),
    ``reset_s`` until the bucket is full again (OpenAI's ``x-ratelimit-*`` headers, gateway/rate_limit_headers.py)."""

    limit: float
    level: float
    reset_s: float


class TenantSpec(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """name: the tenant. traffic_class: the class its requests get (None: theirs to choose).
    requests_per_min / tokens_per_min: its limits (None: unlimited). private_cache: its own prefix cache."""

    name: str
    traffic_class: str | None = None
    requests_per_min: float | None = None
    tokens_per_min: float | None = None
    private_cache: bool = False

    def __post_init__(self) -> None:
        if not self.name:
            raise ValueError("a tenant needs a non-empty name")
        for field in ("requests_per_min", "tokens_per_min"):
            value = getattr(self, field)
            if value is not None and not 0 < value < float("inf"):
                raise ValueError(f"tenant {self.name!r}: {field} must be > 0 and finite, got {value}")


@dataclass(slots=True)
class TenantUsage:
    num_requests: int = 0  # admitted
    num_refused: int = 0  # refused by its rate limits
    num_prompt_tokens: int = 0
    num_completion_tokens: int = 0


def parse_key_tenants(text: str) -> tuple[dict[str, str], list[TenantSpec]]:
    """A key file's text → (key → tenant name, the tenants). ValueError naming the line for a bad attribute,
    or one tenant given different limits on two lines."""
    tenant_of: dict[str, str] = {}
    specs: dict[str, TenantSpec | None] = {}
    for number, line in enumerate(text.splitlines(), 1):
        words = line.split("#", 1)[0].replace(",", " ").split()
        key: str | None = None
        attrs: dict[str, str] = {}
        for word in words:
            name, eq, value = word.partition("=")
            if eq and name in KEY_ATTRIBUTES:
                if key is None:
                    raise ValueError(f"line {number}: {word!r} comes before any key")
                attrs[name] = value
                continue
            if key is not None:
                _add(key, attrs, number, tenant_of, specs)
            key, attrs = word, {}
        if key is not None:
            _add(key, attrs, number, tenant_of, specs)
    return tenant_of, [spec or TenantSpec(name) for name, spec in specs.items()]


def _add(key: str, attrs: dict[str, str], number: int, tenant_of: dict, specs: dict) -> None:
    """One key and its attributes: map it to its tenant; attributes beyond ``tenant`` describe the tenant."""
    if key in tenant_of:
        raise ValueError(f"line {number}: a key is listed twice")
    name = attrs.get("tenant") or DEFAULT_TENANT
    tenant_of[key] = name
    if not set(attrs) - {"tenant"}:
        specs.setdefault(name, None)  # another key of a tenant, maybe described on another line
        return
    try:
        if attrs.get("cache", "shared") not in ("shared", "private"):
            raise ValueError(f"cache must be shared or private, got {attrs['cache']!r}")
        spec = TenantSpec(
            name,
            traffic_class=attrs.get("class") or None,
            requests_per_min=float(attrs["rpm"]) if "rpm" in attrs else None,
            tokens_per_min=float(attrs["tpm"]) if "tpm" in attrs else None,
            private_cache=attrs.get("cache") == "private",
        )
    except ValueError as e:
        raise ValueError(f"line {number}: {e}") from None
    known = specs.get(name)
    if known is not None and known != spec:
        raise ValueError(f"line {number}: tenant {name!r} is given a different class or limits on another line")
    specs[name] = spec


class _Tenant:
    __slots__ = ("requests", "spec", "tokens", "usage")

    def __init__(self, spec: TenantSpec, now_s: float) -> None:
        self.spec = spec
        rpm, tpm = spec.requests_per_min, spec.tokens_per_min
        self.requests = TokenBucket.per_minute(rpm, now_s) if rpm is not None else None
        self.tokens = TokenBucket.per_minute(tpm, now_s) if tpm is not None else None
        self.usage = TenantUsage()

    def changed_to(self, spec: TenantSpec, now_s: float) -> _Tenant:
        """This tenant under ``spec``: its usage kept, each bucket it keeps no fuller than it is now."""
        new = _Tenant(spec, now_s)
        new.usage = self.usage
        for kind in ("requests", "tokens"):
            old, bucket = getattr(self, kind), getattr(new, kind)
            if old is not None and bucket is not None:
                bucket.level = min(bucket.capacity, old.refill(now_s))
        return new


class TenantLimiter:
    """The tenants' classes, limits and usage. A request naming no tenant (a ZeroMQ client, an open gateway)
    is the "default" tenant's; a tenant it does not know has no class of its own and no limits, and its usage
    is counted under its name."""

    def __init__(self, tenants: Iterable[TenantSpec] = (), now_s: float = 0.0) -> None:
        self._tenants: dict[str, _Tenant] = {}
        for spec in tenants:
            if spec.name in self._tenants:
                raise ValueError(f"tenant {spec.name!r} is configured twice")
            self._tenants[spec.name] = _Tenant(spec, now_s)
        self._now_s = now_s

    def reconfigure(self, tenants: Iterable[TenantSpec], now_s: float) -> None:
        """The tenants of a reloaded key file (SIGHUP: zoo/keys_reload.py), from the next request on. Each tenant
        keeps its usage; one whose class and limits are unchanged keeps its buckets, one whose limits changed gets
        new ones no fuller than its old ones were (a reload grants no burst); a tenant no longer described keeps
        its usage and has no class or limits of its own. ValueError, nothing changed, for a tenant given twice."""
        specs: dict[str, TenantSpec] = {}
        for spec in tenants:
            if spec.name in specs:
                raise ValueError(f"tenant {spec.name!r} is configured twice")
            specs[spec.name] = spec
        kept: dict[str, _Tenant] = {}
        for name, state in self._tenants.items():
            spec = specs.pop(name, TenantSpec(name))
            kept[name] = state if spec == state.spec else state.changed_to(spec, now_s)
        kept.update((name, _Tenant(spec, now_s)) for name, spec in specs.items())
        self._tenants, self._now_s = kept, max(self._now_s, now_s)

    def _get(self, tenant: str) -> _Tenant:
        tenant = tenant or DEFAULT_TENANT
        state = self._tenants.get(tenant)
        if state is None:
            state = self._tenants[tenant] = _Tenant(TenantSpec(tenant), self._now_s)
        return state

    def class_of(self, tenant: str, asked: str) -> str:
        """The class a request of ``tenant`` asking for ``asked`` gets: the tenant's own, else ``asked``."""
        state = self._tenants.get(tenant or DEFAULT_TENANT)
        return asked if state is None or state.spec.traffic_class is None else state.spec.traffic_class

    def cache_salt(self, tenant: str, salt: str | None) -> str | None:
        """The cache salt a request of ``tenant`` asking for ``salt`` runs with: its own, or for a tenant with a
        private cache one made from the tenant's name and it (under ``RESERVED_SALT_PREFIX``)."""
        state = self._tenants.get(tenant or DEFAULT_TENANT)
        if state is None or not state.spec.private_cache:
            return salt
        digest = hashlib.sha256(f"{state.spec.name}\x00{salt or ''}".encode("utf-8", "surrogatepass")).hexdigest()
        return RESERVED_SALT_PREFIX + digest

    def check(self, tenant: str, num_prompt_tokens: int, now_s: float) -> tuple[str, float] | None:
        """None: within its limits. Else (why, retry_after_s) — counted as a refusal; takes nothing."""
        tenant = tenant or DEFAULT_TENANT
        state = self._tenants.get(tenant)
        if state is None:
            return None
        waits = []
        if state.requests is not None and (wait := state.requests.wait_s(1, now_s)) > 0:
            waits.append((wait, f"{state.spec.requests_per_min:g} requests/min"))
        if state.tokens is not None and (wait := state.tokens.wait_s(num_prompt_tokens, now_s)) > 0:
            waits.append((wait, f"{state.spec.tokens_per_min:g} tokens/min"))
        if not waits:
            return None
        state.usage.num_refused += 1
        wait, limit = max(waits)
        return f"tenant {tenant!r} is over its rate limit of {limit}; retry after {wait:.2f} s", wait

    def on_admitted(self, tenant: str, num_prompt_tokens: int, now_s: float) -> None:
        state = self._get(tenant)
        if state.requests is not None:
            state.requests.charge(1, now_s)
        if state.tokens is not None:
            state.tokens.charge(num_prompt_tokens, now_s)
        state.usage.num_requests += 1
        state.usage.num_prompt_tokens += num_prompt_tokens

    def on_finished(self, tenant: str, num_output_tokens: int, now_s: float) -> None:
        """A request of ``tenant`` ended after ``num_output_tokens`` (charged, maybe as a debt)."""
        state = self._get(tenant)
        if state.tokens is not None:
            state.tokens.charge(num_output_tokens, now_s)
        state.usage.num_completion_tokens += num_output_tokens

    def status(self, tenant: str, now_s: float) -> tuple[BucketStatus | None, BucketStatus | None] | None:
        """The tenant's (requests, tokens) buckets now (None for a kind it has no limit of); None for a tenant
        without limits."""
        state = self._tenants.get(tenant or DEFAULT_TENANT)
        if state is None or (state.requests is None and state.tokens is None):
            return None
        return _bucket_status(state.requests, now_s), _bucket_status(state.tokens, now_s)

    def usage(self) -> dict[str, TenantUsage]:
        """Tenant name → its usage so far (a copy)."""
        return {name: dataclasses.replace(state.usage) for name, state in self._tenants.items()}


def _bucket_status(bucket: TokenBucket | None, now_s: float) -> BucketStatus | None:
    if bucket is None:
        return None
    level = bucket.refill(now_s)
    return BucketStatus(bucket.capacity, level, bucket.full_in_s(now_s))  # a minute's worth: the limit
