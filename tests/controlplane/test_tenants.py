"""Tenants (controlplane/tenants.py): keys → tenants in the API key file, their classes and rate limits."""

from __future__ import annotations

import pytest

from controlplane.gateway.api_keys import parse_api_keys
from controlplane.tenants import TenantLimiter, TenantSpec, parse_key_tenants

KEY_FILE = """
# keys of two tenants, and one without a tenant
zk-aaa tenant=acme class=vip rpm=120 tpm=6000
zk-bbb tenant=acme
zk-ccc tenant=crawler class=batch rpm=6
zk-ddd
"""


def test_the_key_file_maps_keys_to_tenants_and_authentication_still_reads_the_keys():
    tenant_of, specs = parse_key_tenants(KEY_FILE)
    assert tenant_of == {"zk-aaa": "acme", "zk-bbb": "acme", "zk-ccc": "crawler", "zk-ddd": "default"}
    assert TenantSpec("acme", "vip", 120.0, 6000.0) in specs
    assert TenantSpec("crawler", "batch", 6.0, None) in specs
    assert parse_api_keys(KEY_FILE) == ["zk-aaa", "zk-bbb", "zk-ccc", "zk-ddd"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tenant=x zk-a", "before any key"),
        ("zk-a tenant=x rpm=1\nzk-b tenant=x rpm=2", "different class or limits"),
        ("zk-a tenant=x rpm=abc", "line 1"),
        ("zk-a tenant=x rpm=0", "requests_per_min must be > 0"),
        ("zk-a\nzk-a", "listed twice"),
    ],
)
def test_bad_key_files_name_the_line(text, message):
    with pytest.raises(ValueError, match=message):
        parse_key_tenants(text)


def test_a_tenant_over_its_requests_per_minute_waits_exactly_the_bucket():
    limiter = TenantLimiter([TenantSpec("crawler", "batch", requests_per_min=6)])
    for _ in range(6):
        assert limiter.check("crawler", 10, 0.0) is None
        limiter.on_admitted("crawler", 10, 0.0)
    why, retry_after_s = limiter.check("crawler", 10, 0.0)
    assert "6 requests/min" in why and retry_after_s == pytest.approx(10.0)
    assert limiter.check("crawler", 10, 10.0) is None
    assert limiter.check("someone-else", 10, 0.0) is None  # no limits for tenants it does not know
    usage = limiter.usage()["crawler"]
    assert (usage.num_requests, usage.num_refused, usage.num_prompt_tokens) == (6, 1, 60)


def test_output_tokens_are_charged_when_a_request_ends():
    limiter = TenantLimiter([TenantSpec("acme", tokens_per_min=600)])  # 10 tokens/s
    limiter.on_admitted("acme", 100, 0.0)
    limiter.on_finished("acme", 600, 0.0)  # 700 used of 600: 100 in debt
    why, retry_after_s = limiter.check("acme", 50, 0.0)
    assert "600 tokens/min" in why and retry_after_s == pytest.approx(15.0)  # (100 + 50) / 10
    assert limiter.usage()["acme"].num_completion_tokens == 600


def test_a_tenant_class_overrides_what_the_request_asks():
    limiter = TenantLimiter([TenantSpec("crawler", "batch"), TenantSpec("free")])
    assert limiter.class_of("crawler", "vip") == "batch"
    assert limiter.class_of("free", "vip") == "vip"
    assert limiter.class_of("", "standard") == "standard"


def test_a_request_naming_no_tenant_is_the_default_tenants():
    limiter = TenantLimiter([TenantSpec("default", requests_per_min=1)])
    assert limiter.check("", 1, 0.0) is None
    limiter.on_admitted("", 1, 0.0)
    assert limiter.check("", 1, 0.0) is not None
    assert set(limiter.usage()) == {"default"}


def test_a_reload_keeps_usage_grants_no_burst_and_forgets_what_is_no_longer_described():
    limiter = TenantLimiter([TenantSpec("crawler", "batch", requests_per_min=6), TenantSpec("app", "chat")])
    for _ in range(6):
        limiter.on_admitted("crawler", 10, 0.0)
    limiter.on_admitted("app", 5, 0.0)
    limiter.reconfigure([TenantSpec("crawler", "batch", requests_per_min=60), TenantSpec("new", "batch")], 0.0)
    why, retry_after_s = limiter.check("crawler", 10, 0.0)  # the new limit, but the bucket as empty as it was
    assert "60 requests/min" in why and retry_after_s == pytest.approx(1.0)
    assert limiter.check("crawler", 10, 1.0) is None  # refilled at the new rate
    assert limiter.class_of("app", "asked") == "asked"  # no longer described: no class of its own
    assert limiter.class_of("new", "asked") == "batch"
    usage = limiter.usage()
    assert (usage["crawler"].num_requests, usage["app"].num_requests) == (6, 1)  # usage kept across the reload
    same = limiter._tenants["new"]
    limiter.reconfigure([TenantSpec("crawler", "batch", requests_per_min=60), TenantSpec("new", "batch")], 2.0)
    assert limiter._tenants["new"] is same  # unchanged: its state kept as it is
    with pytest.raises(ValueError, match="configured twice"):
        limiter.reconfigure([TenantSpec("x"), TenantSpec("x")], 3.0)
    assert limiter.class_of("new", "asked") == "batch"  # a refused reload changed nothing
