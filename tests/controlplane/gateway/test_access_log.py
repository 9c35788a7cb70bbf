"""The gateway's access log (gateway/access_log.py): one line per answered request, with its status, size, time to
first byte and total, and the id its reply names; the probes' paths left out; a path cannot forge a line."""

from __future__ import annotations

import argparse
import logging
import re

import httpx
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.app import GatewayConfig
from zoo.serve import add_controlplane_args, gateway_config_from_args

pytestmark = pytest.mark.anyio

BODY = {"model": "smol", "prompt": "hi", "max_tokens": 3}
LINE = re.compile(
    r'(?P<client>\S+) "(?P<method>\S+) (?P<path>.*) HTTP/(?P<version>\S+)" (?P<status>\S+) (?P<bytes>\d+)B '
    r"first (?P<first>\S+) total (?P<total>[\d.]+)ms id=(?P<id>\S+)"
)


def _client(frontend, **config) -> httpx.AsyncClient:
    app = create_app(frontend, config=GatewayConfig(**config))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app, client=("10.1.2.3", 5555)), base_url="http://gw")


def _lines(caplog) -> list[re.Match]:
    return [LINE.fullmatch(r.getMessage()) for r in caplog.records if r.name == "zoo.access"]


async def test_a_line_per_request_with_its_status_size_times_and_id(frontend, caplog):
    caplog.set_level(logging.INFO, logger="zoo.access")
    async with _client(frontend) as c:
        whole = await c.post("/v1/completions", json=BODY)
        stream = await c.post("/v1/completions", json={**BODY, "stream": True})
        missing = await c.get("/v1/nope")
        assert (await c.get("/health")).status_code == 200  # a probe: not logged
    first, second, third = _lines(caplog)
    assert first["client"] == "10.1.2.3:5555" and first["method"] == "POST" and first["path"] == "/v1/completions"
    assert first["status"] == "200" and int(first["bytes"]) == len(whole.content) and first["version"] == "1.1"
    assert first["id"] == whole.headers["x-request-id"] == whole.json()["id"]
    assert float(first["first"].removesuffix("ms")) <= float(first["total"])
    assert second["status"] == "200" and int(second["bytes"]) == len(stream.content)
    assert second["id"] == stream.headers["x-request-id"]
    assert (third["status"], third["path"], third["id"]) == ("404", "/v1/nope", "-")
    assert missing.status_code == 404
    # the same figures as the record's fields (the keys of its JSON line with --log-format json)
    record = next(r for r in caplog.records if r.name == "zoo.access")
    assert (record.client, record.http_method, record.http_path) == ("10.1.2.3:5555", "POST", "/v1/completions")
    assert (record.http_status, record.bytes, record.request_id) == (200, len(whole.content), whole.json()["id"])
    assert 0 <= record.ttfb_ms <= record.total_ms


async def test_a_path_cannot_forge_a_line_and_a_long_one_is_cut(frontend, caplog):
    caplog.set_level(logging.INFO, logger="zoo.access")
    async with _client(frontend) as c:
        await c.get("/v1/x%0a10.9.9.9%20%22GET%20/admin%22%20200")
        await c.get("/v1/" + "a" * 5_000)
    messages = [r.getMessage() for r in caplog.records if r.name == "zoo.access"]
    assert len(messages) == 2 and all("\n" not in m for m in messages)
    forged, long = _lines(caplog)
    assert forged["path"] == '/v1/x\\n10.9.9.9 \\"GET /admin\\" 200' and forged["status"] == "404"
    assert long["path"] == "/v1/" + "a" * 252 + "..."


async def test_off_or_excluded_paths_log_nothing(frontend, caplog):
    caplog.set_level(logging.INFO, logger="zoo.access")
    async with _client(frontend, access_log=False) as c:
        await c.post("/v1/completions", json=BODY)
    async with _client(frontend, access_log_exclude=("/v1/completions",)) as c:
        await c.post("/v1/completions", json=BODY)
        await c.get("/health")
    (line,) = _lines(caplog)  # /health, now that only /v1/completions is left out
    assert line["path"] == "/health"


@pytest.mark.parametrize(
    "flags, on, excluded",
    [
        ([], True, ("/metrics", "/metrics/targets", "/health", "/ping", "/load")),
        (["--disable-uvicorn-access-log"], False, None),
        (["--disable-access-log-for-endpoints", "/health, /v1/models"], True, ("/health", "/v1/models")),
    ],
)
def test_the_flags(flags, on, excluded):
    parser = argparse.ArgumentParser()
    add_controlplane_args(parser)
    config = gateway_config_from_args(parser.parse_args(flags))
    assert config.access_log is on
    if excluded is not None:
        assert config.access_log_exclude == excluded
