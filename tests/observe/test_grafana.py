"""The Grafana dashboard only queries metrics that the exporters define, with P50/P99 per GPU type."""

from __future__ import annotations

import json
import re
from pathlib import Path

from observe import metrics_names

DASHBOARD = Path(__file__).resolve().parents[2] / "observe" / "grafana" / "silicon_zoo.json"


def test_dashboard_queries_only_exported_metrics_with_p50_p99_per_gpu_type():
    dash = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    known = {v for k, v in vars(metrics_names).items() if k.isupper() and isinstance(v, str)}
    used = {re.sub(r"_(bucket|total)$", "", name) for e in exprs for name in re.findall(r"\b(?:vllm|zoo):\w+", e)}
    assert used and used <= known, used - known
    for metric in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds"):
        quantiles = [e for e in exprs if metric in e and "by (le, gpu_type)" in e]
        assert any("histogram_quantile(0.5," in e for e in quantiles)
        assert any("histogram_quantile(0.99," in e for e in quantiles)


def test_the_dashboard_shows_the_fleets_alerts():
    """A table of the alerts pending or firing, and the firing ones marked on every time series (an annotation):
    every alert of deploy/prometheus/silicon_zoo_rules.yml is named Zoo..., which both select."""
    dash = json.loads(DASHBOARD.read_text())
    (table,) = [p for p in dash["panels"] if any("ALERTS{" in t["expr"] for t in p.get("targets", []))]
    assert table["type"] == "table" and table["targets"][0]["expr"] == 'ALERTS{alertname=~"Zoo.*"}'
    (annotation,) = [a for a in dash["annotations"]["list"] if "ALERTS{" in a.get("expr", "")]
    assert 'alertname=~"Zoo.*"' in annotation["expr"] and 'alertstate="firing"' in annotation["expr"]
    rules = (DASHBOARD.parents[2] / "deploy" / "prometheus" / "silicon_zoo_rules.yml").read_text()
    alerts = re.findall(r"^\s*- alert: (\w+)$", rules, re.M)
    assert alerts and all(name.startswith("Zoo") for name in alerts)
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
