"""Prometheus HTTP service discovery: the control plane lists every live agent's ``/metrics``.

    agent ── NodeTelemetry(metrics_url) ──► control plane (FleetLedger.metrics_urls) ── stats() ──┐
    Prometheus ── GET /metrics/targets (every refresh_interval) ◄── http_sd_targets(stats) ◄──────┘

The document is Prometheus's ``http_sd_configs`` format
(https://prometheus.io/docs/prometheus/latest/http_sd/): a JSON list of target groups
``{"targets": ["host:port"], "labels": {...}}``, answered 200 with ``Content-Type: application/json``
(an empty list when no agent exports metrics). One group per live node: its ``__metrics_path__`` and
``__scheme__`` come from the URL the agent reported, and what the control plane knows of the node is
given as ``__meta_zoo_*`` labels (node, cell, gpu_type, model, state): relabel them if wanted. They are
meta labels on purpose: the agent's own series already carry ``node``, ``cell`` and ``gpu_type``, and a
target label of the same name would rename those to ``exported_*``.

    scrape_configs:
      - job_name: zoo-agents
        http_sd_configs: [{url: "http://CONTROL_PLANE:8000/metrics/targets", refresh_interval: 15s}]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from urllib.parse import urlsplit

SD_PATH = "/metrics/targets"
META_PREFIX = "__meta_zoo_"


def http_sd_targets(stats: dict) -> list[dict]:
    """The target groups for ``ControlPlane.stats()``: live nodes with a metrics URL, sorted by node id.
    A URL that is not ``http(s)://host:port/...`` is skipped (it could not be scraped anyway)."""
    groups = []
    for node_id, node in sorted(stats.get("nodes", {}).items()):
        url = node.get("metrics_url") or ""
        if not node.get("alive") or not url:
            continue
        parts = urlsplit(url)
        try:
            port = parts.port
        except ValueError:
            continue
        if parts.scheme not in ("http", "https") or not parts.hostname or port is None:
            continue
        meta = {
            "node": node_id,
            "cell": node.get("cell"),
            "gpu_type": node.get("gpu_type"),
            "model": node.get("model"),
            "state": node.get("state"),
        }
        labels = {"__metrics_path__": parts.path or "/metrics", "__scheme__": parts.scheme}
        labels |= {META_PREFIX + k: str(v) for k, v in meta.items() if v is not None}
        groups.append({"targets": [parts.netloc], "labels": labels})
    return groups


def http_sd_app(stats_fn: Callable[[], dict]):
    """An ASGI app answering ``http_sd_targets(stats_fn())`` as JSON (GET; HEAD without the body)."""

    async def app(scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        body = json.dumps(http_sd_targets(stats_fn())).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body})

    return app
