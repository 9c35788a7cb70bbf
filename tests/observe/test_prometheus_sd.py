"""The Prometheus HTTP service discovery document (observe/prometheus_sd.py) and an agent's own HTTP endpoint
(observe/agent_http.py: /metrics, the readiness /health, HEAD/OPTIONS, errors)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request

import httpx
import pytest

from observe.agent_http import AgentHttpServer, advertised_host
from observe.exporter import PrometheusExporter
from observe.prometheus_sd import http_sd_app, http_sd_targets


def _node(url: str, alive: bool = True, **extra) -> dict:
    return {
        "alive": alive,
        "metrics_url": url,
        "cell": "vip",
        "gpu_type": "h100-sxm",
        "model": "m",
        "state": "up",
    } | extra


STATS = {
    "nodes": {
        "b": _node("http://10.0.0.2:9100/metrics", state="draining"),
        "a": _node("https://[fd00::1]:9200/custom"),
        "dead": _node("http://10.0.0.3:9100/metrics", alive=False),
        "silent": _node(""),
        "bad": _node("http://no-port/metrics"),
        "bad-port": _node("http://host:99999/metrics"),
    }
}


def test_one_target_group_per_live_agent_with_a_scrapable_url():
    groups = http_sd_targets(STATS)
    assert [g["targets"] for g in groups] == [["[fd00::1]:9200"], ["10.0.0.2:9100"]]
    a, b = (g["labels"] for g in groups)
    assert a["__scheme__"] == "https" and a["__metrics_path__"] == "/custom"
    assert b == {
        "__metrics_path__": "/metrics",
        "__scheme__": "http",
        "__meta_zoo_node": "b",
        "__meta_zoo_cell": "vip",
        "__meta_zoo_gpu_type": "h100-sxm",
        "__meta_zoo_model": "m",
        "__meta_zoo_state": "draining",
    }
    assert http_sd_targets({"nodes": {}}) == [] and http_sd_targets({}) == []


@pytest.mark.anyio
async def test_the_sd_app_answers_json_and_head():
    app = http_sd_app(lambda: STATS)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://cp") as http:
        r = await http.get("/metrics/targets")
        assert r.status_code == 200 and r.headers["content-type"] == "application/json"
        assert r.json() == http_sd_targets(STATS)
        r = await http.head("/metrics/targets")
        assert r.status_code == 200 and r.content == b"" and int(r.headers["content-length"]) > 2


def test_advertised_host():
    assert advertised_host("127.0.0.1") == "127.0.0.1"
    assert advertised_host("0.0.0.0", "10.1.2.3") == "10.1.2.3"
    assert advertised_host("::1") == "[::1]" and advertised_host("0.0.0.0", "[fd00::2]") == "[fd00::2]"
    assert advertised_host("0.0.0.0") not in ("", "0.0.0.0")


def _request(method: str, url: str) -> tuple[int, dict, bytes]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method=method), timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def test_an_agents_endpoint_serves_metrics_and_readiness():
    exporter = PrometheusExporter()
    health = {"status": "starting", "node_id": "n"}

    def health_fn() -> dict:
        if health.get("status") == "broken":
            raise RuntimeError("broken")
        return health

    server = AgentHttpServer(exporter, health_fn)
    url = server.serve("127.0.0.1", 0, advertise_host="localhost")
    try:
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        assert url == exporter.url == f"http://localhost:{port}/metrics"
        base = f"http://127.0.0.1:{port}"
        status, _, body = _request("GET", f"{base}/health")
        assert status == 503 and json.loads(body) == health  # not ready yet: no traffic, rollouts wait
        health["status"] = "ok"
        status, headers, body = _request("GET", f"{base}/health")
        assert status == 200 and json.loads(body)["status"] == "ok" and headers["Content-Type"] == "application/json"
        status, headers, body = _request("GET", f"{base}/metrics")
        assert status == 200 and b"python_info" not in body and headers["Content-Type"].startswith("text/plain")
        status, headers, body = _request("HEAD", f"{base}/metrics")
        assert status == 200 and body == b"" and "Content-Length" in headers
        status, headers, _ = _request("OPTIONS", f"{base}/metrics")
        assert status == 204 and "HEAD" in headers["Allow"]
        status, headers, _ = _request("POST", f"{base}/health")
        assert status == 405 and "GET" in headers["Allow"]
        assert _request("GET", f"{base}/nothing")[0] == 404
        health["status"] = "broken"  # a health function that raises reads as not ready; the server lives on
        status, _, body = _request("GET", f"{base}/health")
        assert status == 503 and json.loads(body) == {"status": "error"}
        assert _request("GET", f"{base}/metrics")[0] == 200
    finally:
        server.close()
