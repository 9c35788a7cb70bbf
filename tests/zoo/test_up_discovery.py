"""Prometheus finds a `zoo up` fleet's agents: the control plane's HTTP service discovery document
(/metrics/targets, observe/prometheus_sd.py) lists every live agent's /metrics, each scrapes, each
agent's /health says it is ready, the banner prints the URLs, and an agent that leaves drops out.
Real processes (a control plane and two fake-runner agents) on loopback."""

from __future__ import annotations

import json
import signal
import time
import urllib.error
import urllib.request

from transport.local_ports import free_port
from zoo.up import LocalZoo
from zoo.up_config import AgentSpec, UpConfig

WAIT_S = 30.0


def _get(url: str) -> tuple[int, dict, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def _targets(base_url: str) -> list[dict]:
    status, headers, body = _get(f"{base_url}/metrics/targets")
    assert status == 200 and headers["content-type"] == "application/json"
    return json.loads(body)


def _wait_for(predicate, what: str):
    deadline = time.monotonic() + WAIT_S
    while (value := predicate()) is None or value is False:
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)
    return value


def test_the_control_plane_lists_every_agents_metrics_for_prometheus(tmp_path):
    fake = {"fake_runner": True}
    config = UpConfig(
        control=f"tcp://127.0.0.1:{free_port()}",
        http=f"127.0.0.1:{free_port()}",
        policy="round_robin",
        controlplane_options={"fake_tokenizer": True, "client_listen": "none", "stats_listen": "none"},
        agents=[AgentSpec("a", options=dict(fake)), AgentSpec("b", options={**fake, "fake_gpu_type": "l4"})],
        ready_timeout_s=90.0,
    )
    with LocalZoo(config, tmp_path) as zoo:
        urls = zoo.agent_metrics_urls(timeout_s=WAIT_S)
        assert set(urls) == {"a", "b"}
        banner = zoo.describe(urls)
        assert f"{config.base_url}/metrics/targets" in banner
        assert all(url in banner for url in urls.values())

        groups = _targets(config.base_url)
        by_node = {g["labels"]["__meta_zoo_node"]: g for g in groups}
        assert set(by_node) == {"a", "b"}
        assert by_node["b"]["labels"]["__meta_zoo_gpu_type"] == "l4"
        for node_id, group in by_node.items():
            (target,) = group["targets"]
            labels = group["labels"]
            assert labels["__scheme__"] == "http" and labels["__metrics_path__"] == "/metrics"
            assert labels["__meta_zoo_state"] == "up" and labels["__meta_zoo_cell"] == "default"
            assert urls[node_id] == f"http://{target}/metrics"
            # what Prometheus will do with the target: scrape it; the series carry the node's own labels
            status, _, body = _get(f"http://{target}/metrics")
            assert status == 200 and f'node="{node_id}"' in body.decode()
            status, headers, body = _get(f"http://{target}/health")
            assert status == 200 and headers["Content-Type"] == "application/json"
            assert json.loads(body) == {"status": "ok", "node_id": node_id, "model": json.loads(body)["model"]}
            head = urllib.request.Request(f"http://{target}/metrics", method="HEAD")
            with urllib.request.urlopen(head, timeout=5) as r:
                assert r.status == 200 and r.read() == b"" and int(r.headers["Content-Length"]) > 0

        # an agent that leaves is no longer a target
        leaving = next(c for c in zoo._agents if c.name == "a")
        leaving.proc.send_signal(signal.SIGINT)  # leaves at once (NodeLeave)
        leaving.proc.wait(timeout=WAIT_S)
        remaining = _wait_for(
            lambda: (g := _targets(config.base_url)) and len(g) == 1 and g, "the departed agent to drop out"
        )
        assert remaining[0]["labels"]["__meta_zoo_node"] == "b"
