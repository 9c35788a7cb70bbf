"""An OpenMetrics scrape gets the metrics' names as they are (observe/exposition_names.py): the control plane's ASGI
/metrics and an agent's WSGI /metrics, asked as Prometheus 2.x asks, answer OpenMetrics whose sample lines carry the
names of their families (``vllm:...``, ``zoo:...``), colon and all, where prometheus_client alone writes
``vllm_...`` under ``# TYPE vllm:...`` (prometheus/client_python#1177). A real Prometheus storing them so:
tests/controlplane/fleet/test_alerts_live.py."""

from __future__ import annotations

import re
import urllib.request

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import Gauge, Histogram
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from observe import metrics_names
from observe.agent_http import AgentHttpServer
from observe.exporter import PrometheusExporter
from observe.exposition_names import keep_names

# what Prometheus 2.42 sends with every scrape (scrape/scrape.go, scrapeAcceptHeader)
PROMETHEUS_2_ACCEPT = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
)
LEGACY_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")


def test_each_openmetrics_range_asks_for_names_as_they_are():
    assert keep_names(PROMETHEUS_2_ACCEPT) == (
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8,"
        "application/openmetrics-text;version=0.0.1;q=0.75;escaping=allow-utf-8,"
        "text/plain;version=0.0.4;q=0.5,*/*;q=0.1"
    )
    # a scheme asked for is replaced; a range without a version gets the one prometheus_client answers then
    assert keep_names("Application/OpenMetrics-Text; escaping=underscores") == (
        "Application/OpenMetrics-Text;version=1.0.0;escaping=allow-utf-8"
    )
    assert (
        keep_names("text/plain;version=1.0.0;escaping=underscores") == "text/plain;version=1.0.0;escaping=underscores"
    )
    assert keep_names("") == ""


def test_every_exported_name_is_a_legacy_name_so_no_escaping_should_change_it():
    names = [v for k, v in vars(metrics_names).items() if k.isupper() and isinstance(v, str) and ":" in v]
    assert len(names) > 50 and all(LEGACY_NAME.fullmatch(name) for name in names)


def _exporter() -> PrometheusExporter:
    exporter = PrometheusExporter()
    Gauge(metrics_names.NUM_REQUESTS_RUNNING, "Running.", ["node"], registry=exporter.registry).labels("a").set(3)
    Histogram(metrics_names.ROUTER_QUEUE_WAIT, "Wait.", registry=exporter.registry).observe(0.01)
    return exporter


def _check_openmetrics(content_type: str, body: str) -> None:
    assert (
        content_type.startswith("application/openmetrics-text; version=1.0.0")
        and "escaping=allow-utf-8" in content_type
    )
    families = {f.name: f for f in text_string_to_metric_families(body)}  # the strict parser: names must agree
    assert families["vllm:num_requests_running"].samples[0].name == "vllm:num_requests_running"
    assert families["vllm:num_requests_running"].samples[0].value == 3
    assert {s.name for s in families["zoo:router_queue_wait_seconds"].samples} >= {
        "zoo:router_queue_wait_seconds_bucket", "zoo:router_queue_wait_seconds_count",
    }  # fmt: skip
    samples = [line.split("{")[0].split(" ")[0] for line in body.splitlines() if line and not line.startswith("#")]
    assert samples and all(":" in name for name in samples), samples


@pytest.mark.anyio
async def test_the_control_planes_asgi_metrics_keep_the_names():
    app = _exporter().asgi_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://cp") as http:
        r = await http.get("/metrics", headers={"Accept": PROMETHEUS_2_ACCEPT})
        _check_openmetrics(r.headers["content-type"], r.text)
        plain = await http.get("/metrics")  # no Accept: the text format, as before
    assert plain.headers["content-type"].startswith("text/plain") and "vllm:num_requests_running{" in plain.text


def test_an_agents_wsgi_metrics_keep_the_names():
    server = AgentHttpServer(_exporter(), lambda: {"status": "ok"})
    url = server.serve("127.0.0.1", 0)
    try:
        request = urllib.request.Request(url, headers={"Accept": PROMETHEUS_2_ACCEPT})
        with urllib.request.urlopen(request, timeout=10) as r:
            _check_openmetrics(r.headers["Content-Type"], r.read().decode())
    finally:
        server.close()


def test_a_version_prometheus_client_cannot_read_is_replaced_or_left_out():
    assert keep_names("application/openmetrics-text;version=abc") == (
        "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8"
    )
    assert keep_names("text/plain;version=abc;q=0.5") == "text/plain;q=0.5"
    assert keep_names("text/plain;version=0.0.4") == "text/plain;version=0.0.4"


@pytest.mark.anyio
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    accept=st.lists(
        st.sampled_from([
            "application/openmetrics-text", "text/plain", "*/*", ";", ",", "=", "version", "escaping", "1.0.0", "abc",
            "q=0.5", " ", "allow-utf-8", "underscores", "0.0.4", ".", "2",
        ]),
        max_size=14,
    ).map("".join)
    | st.text(st.characters(min_codepoint=32, max_codepoint=126), max_size=60)
)  # fmt: skip
async def test_any_accept_header_gets_the_exposition(accept):
    """Whatever a scraper sends as Accept, /metrics answers 200 with the names as they are, never a 500."""
    app = _exporter().asgi_app()
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://cp") as http:
        r = await http.get("/metrics", headers={"Accept": accept})
    assert r.status_code == 200
    assert "vllm:num_requests_running" in r.text and "vllm_num_requests_running" not in r.text
