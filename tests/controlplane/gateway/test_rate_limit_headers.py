"""OpenAI's ``x-ratelimit-*`` headers (gateway/rate_limit_headers.py): their values from a tenant's buckets, OpenAI's
duration form, and the middleware adding them to a tenant's replies (2xx and 429 alike) and to no one else's."""

from __future__ import annotations

import httpx
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.rate_limit_headers import HEADER_NAMES, duration, headers_of
from controlplane.tenants import BucketStatus, TenantLimiter, TenantSpec

CHAT = {"model": "smol", "messages": [{"role": "user", "content": "Hi"}]}


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (-1, "0s"), (0.0004, "1ms"), (0.02, "20ms"), (1, "1s"), (1.25, "1.3s"), (59.99, "60s"), (60, "1m0s"),
     (360, "6m0s"), (3723, "1h2m3s")],
)  # fmt: skip
def test_durations_are_written_as_openai_writes_them(seconds, text):
    assert duration(seconds) == text


def test_headers_of_two_buckets_and_of_one():
    both = dict(headers_of(BucketStatus(60, 12.7, 48.0), BucketStatus(1000, -30, 61.2)))
    assert {k.decode(): v.decode() for k, v in both.items()} == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "12",
        "x-ratelimit-reset-requests": "48s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "0",
        "x-ratelimit-reset-tokens": "1m2s",
    }  # fmt: skip  (a debt is 0 remaining, never negative)
    assert [k.decode() for k, _ in headers_of(None, BucketStatus(10, 10, 0))] == list(HEADER_NAMES[3:])
    assert headers_of(None, None) == []


def test_the_limiter_reports_its_buckets_after_admission_and_a_debt():
    limiter = TenantLimiter([TenantSpec("acme", requests_per_min=60, tokens_per_min=600)], now_s=0.0)
    assert limiter.status("acme", 0.0) == (BucketStatus(60, 60, 0.0), BucketStatus(600, 600, 0.0))
    limiter.on_admitted("acme", 100, 0.0)
    limiter.on_finished("acme", 550, 0.0)  # 650 tokens of 600: a debt of 50
    requests, tokens = limiter.status("acme", 0.0)
    assert (requests.level, requests.reset_s) == (59, 1.0)  # one a second back
    assert (tokens.level, tokens.reset_s) == (-50, 65.0)  # 650 short at 10 a second
    assert limiter.status("acme", 5.0)[1].level == 0  # refilled as it is read
    assert limiter.status("nobody", 0.0) is None  # unknown: no limits
    limiter2 = TenantLimiter([TenantSpec("free"), TenantSpec("tok", tokens_per_min=60)])
    assert limiter2.status("free", 0.0) is None and limiter2.status("tok", 0.0)[0] is None


@pytest.mark.anyio
async def test_a_tenants_replies_carry_them_and_others_do_not(make_frontend):
    limiter = TenantLimiter([TenantSpec("acme", requests_per_min=60)], now_s=0.0)

    class Limited(make_frontend):
        def generate(self, request_id, *, tenant="", **fields):
            return super().generate(request_id, **fields)

        def rate_limit_status(self, tenant):
            return limiter.status(tenant, 0.0)

    keys = ApiKeyConfig(frozenset({"k-acme", "k-free"}), tenant_of={"k-acme": "acme", "k-free": "free"})
    app = create_app(Limited(), api_keys=keys)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        acme = await c.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer k-acme"})
        assert acme.status_code == 200
        assert (acme.headers["x-ratelimit-limit-requests"], acme.headers["x-ratelimit-remaining-requests"]) == (
            "60",
            "60",
        )
        assert "x-ratelimit-limit-tokens" not in acme.headers  # no token limit: no token headers
        bad = await c.post("/v1/chat/completions", json={**CHAT, "n": 99}, headers={"authorization": "Bearer k-acme"})
        assert bad.status_code == 400 and bad.headers["x-ratelimit-limit-requests"] == "60"  # every reply
        free = await c.post("/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer k-free"})
        assert free.status_code == 200 and not any(h in free.headers for h in HEADER_NAMES)
