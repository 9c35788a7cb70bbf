"""OpenAI's rate-limit headers on every reply to a tenant with limits, so a client can pace itself before a 429.

    x-ratelimit-limit-requests      the tenant's requests per minute (its key file's rpm)
    x-ratelimit-remaining-requests  requests it may send now (its bucket's level, whole, never below 0)
    x-ratelimit-reset-requests      how long until the bucket is full again ("1s", "6m0s", "20ms": OpenAI's form)
    x-ratelimit-{limit,remaining,reset}-tokens   the same for tokens per minute (prompt + output)

The values are the control plane's token buckets (controlplane/tenants.py ``TenantLimiter.status``) when the reply
starts: a generation's after its prompt was charged, a 429's at the refusal. A tenant without a limit of a kind gets
no headers of that kind; a request without a tenant (an open gateway, a key without one) none at all. An ASGI
middleware inside the API-key check (gateway/app.py), so it sees the key's tenant and every route's reply.
"""

from __future__ import annotations

import math
from typing import Any

from controlplane.tenants import BucketStatus

HEADER_NAMES = tuple(
    f"x-ratelimit-{what}-{kind}" for kind in ("requests", "tokens") for what in ("limit", "remaining", "reset")
)


def duration(seconds: float) -> str:
    """``seconds`` as OpenAI writes a reset: "20ms" under a second, "1.5s" under a minute, else "6m0s", "1h2m3s"."""
    if not seconds > 0:
        return "0s"
    if seconds < 1:
        return f"{max(1, math.ceil(seconds * 1000))}ms"
    if seconds < 60:
        return f"{math.ceil(seconds * 10) / 10:g}s"
    whole = math.ceil(seconds)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return (f"{hours}h" if hours else "") + f"{minutes}m{secs}s"


def headers_of(requests: BucketStatus | None, tokens: BucketStatus | None) -> list[tuple[bytes, bytes]]:
    """The raw ASGI header pairs for a tenant's two buckets (None: no limit of that kind)."""
    out = []
    for kind, status in (("requests", requests), ("tokens", tokens)):
        if status is None:
            continue
        values = (f"{status.limit:g}", str(max(0, math.floor(status.level))), duration(status.reset_s))
        out += [
            (f"x-ratelimit-{what}-{kind}".encode(), value.encode())
            for what, value in zip(("limit", "remaining", "reset"), values)
        ]
    return out


class RateLimitHeaders:
    """ASGI middleware: adds ``headers_of`` the request's tenant to its reply's start. ``status(tenant)`` is the
    frontend's (None, or a frontend without it: no headers)."""

    def __init__(self, app: Any, frontend: Any) -> None:
        self.app = app
        self.status = getattr(frontend, "rate_limit_status", None)

    async def __call__(self, scope, receive, send) -> None:
        tenant = scope.get("state", {}).get("zoo_tenant") if scope["type"] == "http" else None
        if tenant is None or self.status is None:
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                buckets = self.status(tenant)
                if buckets is not None:
                    message = {**message, "headers": [*message.get("headers", []), *headers_of(*buckets)]}
            await send(message)

        await self.app(scope, receive, send_with_headers)
