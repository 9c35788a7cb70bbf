"""A key rotation without a restart (zoo/keys_reload.py, gateway/api_keys.py's ApiKeyRing): SIGHUP's re-read of the
--api-keys file revokes and adds keys from the next request on while a stream already answering goes on, reconfigures
the tenants, refuses a broken file keeping everything as it was, and counts both on /metrics."""

from __future__ import annotations

import types

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig, ApiKeyRing
from controlplane.tenants import TenantLimiter
from engine.clock import ManualClock
from observe.api_key_metrics import api_key_metrics
from observe.exporter import SnapshotCollector
from zoo.cli import build_parser
from zoo.keys import api_keys_from_args, tenants_from_args
from zoo.keys_reload import reload_api_keys

pytestmark = pytest.mark.anyio

OLD, NEW = "zk-old-0123456789", "zk-new-0123456789"


def _auth(key: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


async def test_a_revoked_key_is_refused_from_the_next_request_and_a_stream_under_it_goes_on(frontend):
    ring = ApiKeyRing(ApiKeyConfig(frozenset({OLD})))
    app = create_app(frontend, api_keys=ring)
    assert app.state.api_keys is ring
    body = {"model": "smol", "prompt": "x", "stream": True}
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        async with http.stream("POST", "/v1/completions", json=body, headers=_auth(OLD)) as stream:
            assert stream.status_code == 200
            lines = stream.aiter_lines()
            first = await anext(lines)
            assert ring.replace(ApiKeyConfig(frozenset({NEW}))) == (1, 1)  # one added, one revoked
            rest = [line async for line in lines if line.startswith("data: ")]
        assert first.startswith("data: ") and rest[-1] == "data: [DONE]"  # the stream under the old key ended
        whole = {**body, "stream": False}
        assert (await http.post("/v1/completions", json=whole, headers=_auth(OLD))).status_code == 401
        assert (await http.post("/v1/completions", json=whole, headers=_auth(NEW))).status_code == 200
    assert ring.refused == {"missing_api_key": 0, "invalid_api_key": 1}


def _plane(args) -> types.SimpleNamespace:
    """What a reload touches of a ControlPlane: its tenants and clock."""
    limiter = TenantLimiter(tenants_from_args(args))
    return types.SimpleNamespace(path=types.SimpleNamespace(tenants=limiter), clock=ManualClock())


def test_the_key_file_read_again_or_refused_whole(tmp_path):
    keys_file = tmp_path / "keys"
    keys_file.write_text(f"{OLD} tenant=acme class=batch rpm=60\n")
    args = build_parser().parse_args(["controlplane", "--fake-tokenizer", "--api-keys", str(keys_file)])
    ring, cp = ApiKeyRing(api_keys_from_args(args, environ={})), _plane(args)
    assert cp.path.tenants.class_of("acme", "chat") == "batch"

    keys_file.write_text(f"{NEW} tenant=acme class=interactive\n{OLD} tenant=acme\n")  # both keys, a new class
    assert reload_api_keys(args, ring, cp) is True
    assert ring.config.keys == {OLD, NEW} and ring.config.tenant_of == {OLD: "acme", NEW: "acme"}
    assert cp.path.tenants.class_of("acme", "chat") == "interactive"

    for broken in ("", "# every key gone\n", f"{NEW} tenant=acme rpm=1\n{OLD} tenant=acme rpm=2\n", "zk-ok cache=x\n"):
        keys_file.write_text(broken)
        assert reload_api_keys(args, ring, cp) is False
    keys_file.unlink()
    assert reload_api_keys(args, ring, cp) is False  # unreadable
    assert ring.config.keys == {OLD, NEW} and cp.path.tenants.class_of("acme", "chat") == "interactive"  # as they were
    assert ring.reloads == {"ok": 1, "refused": 5}

    registry = CollectorRegistry()
    registry.register(SnapshotCollector(api_key_metrics(ring)))
    text = generate_latest(registry).decode()
    assert "zoo:api_keys 2.0" in text
    assert 'zoo:api_key_reloads_total{outcome="refused"} 5.0' in text
    assert 'zoo:api_key_refusals_total{reason="invalid_api_key"} 0.0' in text
