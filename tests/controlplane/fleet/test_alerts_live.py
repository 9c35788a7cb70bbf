"""The alerting rules in a real Prometheus (2.42, Debian's binary unpacked by scripts/install_prometheus.sh) against a
real fleet: a control plane and two fake-runner agents as processes on loopback, scraped as the shipped
deploy/prometheus/prometheus.yml scrapes them (the control plane as a static target, the agents found through its
HTTP service discovery), its rule file loaded as shipped. Only the intervals (1 s) and the addresses change.

The control plane's and the agents' series are stored under their own names (vllm:..., zoo:...); every query of the
Grafana dashboard runs on them; a healthy fleet raises no alert and every rule evaluates without an error on the real
series (label matching included, which synthetic series cannot prove); an agent killed is ZooNodeHeartbeatsLost,
firing, and reaches the chat receiver through a real Alertmanager with deploy/prometheus/alertmanager.yml; the other
drained, ZooNoRoutableNode for the model, pending (its `for` is a minute)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from transport.local_ports import free_port

yaml = pytest.importorskip("yaml")

REPO_ROOT = Path(__file__).resolve().parents[3]
CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
RULES = REPO_ROOT / "deploy" / "prometheus" / "silicon_zoo_rules.yml"
DASHBOARD = REPO_ROOT / "observe" / "grafana" / "silicon_zoo.json"
DEADLINE_S = 90.0


def _wait(what: str, check, log: Path):
    """``check()`` until it returns something truthy; the test fails naming ``what`` after DEADLINE_S."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        try:
            result = check()
        except httpx.HTTPError:
            result = None
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"never: {what}\n--- prometheus log ---\n{log.read_text()[-4000:]}")
        time.sleep(0.2)


def _config(cp_http: str, alertmanager: str | None = None) -> dict:
    """The shipped configuration, its intervals shortened and its addresses this fleet's (and its alerting block
    uncommented, sending to ``alertmanager``)."""
    config = yaml.safe_load(CONFIG.read_text())
    config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
    config["rule_files"] = [str(RULES)]
    if alertmanager is not None:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    jobs["zoo-controlplane"]["static_configs"] = [{"targets": [cp_http]}]
    (sd,) = jobs["zoo-agents"]["http_sd_configs"]
    sd["url"] = f"http://{cp_http}/metrics/targets"
    sd["refresh_interval"] = "1s"
    return config


def _api(api: str, path: str, **params: str) -> dict:
    """Prometheus's HTTP API answer's ``data``. An answer other than 200 raises (httpx.HTTPStatusError, which ``_wait``
    counts as not yet): Prometheus answers 503 "Service Unavailable" until its storage has started."""
    r = httpx.get(f"{api}/api/v1/{path}", params=params, timeout=5)
    r.raise_for_status()
    return r.json()["data"]


def _query(api: str, expr: str) -> list[dict]:
    return _api(api, "query", query=expr)["result"]


def _dashboard_queries() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", [])]
    assert exprs
    return [e.replace("$__rate_interval", "4s").replace("$gpu_type", ".*").replace("$cell", ".*") for e in exprs]


def _alerts(api: str) -> list[dict]:
    return _api(api, "alerts")["alerts"]


def _rules(api: str) -> list[dict]:
    groups = _api(api, "rules")["groups"]
    return [rule for group in groups for rule in group["rules"]]


def _all_rules_evaluated_ok(api: str) -> bool:
    rules = _rules(api)
    return bool(rules) and all(r["health"] == "ok" and not r.get("lastError") for r in rules)


@pytest.fixture
def alertmanager(tmp_path):
    """(the webhook sink, the base URL of a real Alertmanager whose receivers post to it)."""
    from tests.observe.alert_pipeline import WebhookSink, need, running_alertmanager

    need("prometheus-alertmanager")
    sink = WebhookSink()
    try:
        with running_alertmanager(tmp_path, sink) as base:
            yield sink, base
    finally:
        sink.close()


def test_a_real_prometheus_evaluates_the_rules_on_a_real_fleet(spawn_controlplane, spawn_agent, alertmanager, tmp_path):
    from client import ZooClient
    from tests.observe.alert_pipeline import need, stop

    prometheus_bin = need("prometheus")

    sink, alertmanager_url = alertmanager
    cp = spawn_controlplane(None, "--heartbeat-timeout-s", "5")  # a slow host does not lose a node by itself
    agents = {n: spawn_agent(cp.agent_endpoint, n, "--metrics-port", str(free_port())) for n in ("a", "b")}
    base = f"http://{cp.http}"
    log = tmp_path / "prometheus.log"
    log.touch()
    _wait("both agents in the service discovery",
          lambda: len(httpx.get(f"{base}/metrics/targets", timeout=5).json()) == 2, log)  # fmt: skip
    (model,) = [m["id"] for m in httpx.get(f"{base}/v1/models", timeout=5).json()["data"]]
    for i in range(4):
        r = httpx.post(
            f"{base}/v1/completions", json={"model": model, "prompt": f"hi {i}", "max_tokens": 3}, timeout=30
        )
        assert r.status_code == 200, r.text

    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump(_config(cp.http, alertmanager_url.removeprefix("http://"))))
    api = f"http://127.0.0.1:{free_port()}"
    argv = [prometheus_bin, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address={api.removeprefix('http://')}"]  # fmt: skip
    with log.open("w") as out:
        prometheus = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT)
    try:

        def scraped() -> bool:
            targets = _api(api, "targets")["activeTargets"]
            return len(targets) == 3 and all(t["health"] == "up" for t in targets)

        _wait("the control plane and both agents scraped", scraped, log)

        def recorded() -> bool:  # the recording rules have run on the scraped series
            series = _query(api, "zoo:node_asleep")
            return {(s["metric"]["node"], s["value"][1]) for s in series} == {("a", "0"), ("b", "0")}

        _wait("zoo:node_asleep recorded for both nodes, awake", recorded, log)
        # the agents' series are stored under their own names too (an OpenMetrics scrape of their WSGI /metrics)
        running = _query(api, "vllm:num_requests_running")
        assert {s["metric"]["node"] for s in running} == {"a", "b"}, running
        # every query of the Grafana dashboard runs on these series ($__rate_interval as Grafana makes it: 4 scrapes)
        for expr in _dashboard_queries():
            q = httpx.get(f"{api}/api/v1/query", params={"query": expr}, timeout=5).json()
            assert q["status"] == "success", (expr, q)
        _wait("every rule evaluated on the fleet's series", lambda: _all_rules_evaluated_ok(api), log)
        assert _alerts(api) == [], "a healthy fleet raises no alert"

        agents["a"].kill()  # SIGKILL: no leave, its heartbeats stop

        def lost() -> list[dict]:
            return [a for a in _alerts(api) if a["labels"]["alertname"] == "ZooNodeHeartbeatsLost"]

        (alert,) = _wait("ZooNodeHeartbeatsLost after a killed agent", lost, log)
        assert alert["state"] == "firing" and alert["labels"]["severity"] == "warning"
        assert not [a for a in _alerts(api) if a["labels"]["alertname"] == "ZooNoRoutableNode"]  # b is up

        # through the shipped Alertmanager configuration to the receiver of its severity (a warning: the chat)
        def delivered() -> list[dict]:
            return [a for a in sink.alerts("chat") if a["labels"]["alertname"] == "ZooNodeHeartbeatsLost"][:1]

        (sent,) = _wait("ZooNodeHeartbeatsLost at the chat receiver", delivered, log)
        assert (
            sent["status"] == "firing" and sent["annotations"]["runbook_url"] == "docs/ALERTS.md#zoonodeheartbeatslost"
        )
        assert not sink.alerts("pager")

        with ZooClient(cp.client_endpoint, timeout_s=30.0) as zoo:
            zoo.drain("b")

        def unroutable() -> list[dict]:
            return [a for a in _alerts(api) if a["labels"]["alertname"] == "ZooNoRoutableNode"]

        (alert,) = _wait("ZooNoRoutableNode once the only live node is drained", unroutable, log)
        assert alert["state"] == "pending" and alert["labels"]["model"] == model
        assert alert["annotations"]["summary"] == f"Model {model}: no node can be routed to."
        assert _all_rules_evaluated_ok(api), [r for r in _rules(api) if r["health"] != "ok"]
    finally:
        stop(prometheus)
