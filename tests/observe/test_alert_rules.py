"""The Prometheus rules of deploy/prometheus/silicon_zoo_rules.yml, checked by Prometheus's own tool (promtool 2.42,
Debian's package unpacked by scripts/install_prometheus.sh, which `make test` runs): they parse and their PromQL
compiles; every alert fires on the history of series in tests/observe/alert_cases.py where it should, with the
labels and rendered summary expected, and stays quiet on the one beside it where it should not; the recording rules
give the values expected; they query only metrics the exporters define; every alert is documented in docs/ALERTS.md;
the bare-metal Prometheus configuration that loads them checks; the Kubernetes PrometheusRule is rendered from
them; the example Alertmanager configuration checks (amtool 0.25) and routes every alert to the receiver of its
severity (a real Alertmanager: tests/observe/test_alertmanager_live.py)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from observe import metrics_names
from tests.observe.alert_cases import CASES, RECORDS, Case
from tests.observe.alert_pipeline import need

yaml = pytest.importorskip("yaml")  # the dev extra

REPO_ROOT = Path(__file__).resolve().parents[2]
RULES = REPO_ROOT / "deploy" / "prometheus" / "silicon_zoo_rules.yml"
CONFIG = REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml"
ALERTMANAGER = REPO_ROOT / "deploy" / "prometheus" / "alertmanager.yml"
ALERTS_DOC = REPO_ROOT / "docs" / "ALERTS.md"
PROMETHEUS_RULE = REPO_ROOT / "deploy" / "k8s" / "41-alerts.yaml"
SEVERITIES = ("critical", "warning", "info")


def _rules() -> list[dict]:
    return [rule for group in yaml.safe_load(RULES.read_text())["groups"] for rule in group["rules"]]


ALERTS = {rule["alert"]: rule for rule in _rules() if "alert" in rule}


@pytest.fixture(scope="module")
def promtool() -> Path:
    return need("promtool")


def _run(*argv: str | Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120)


def test_the_rules_parse_and_compile(promtool):
    result = _run(promtool, "check", "rules", RULES)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in result.stdout


def test_the_bare_metal_config_loads_the_rules(promtool):
    """deploy/prometheus/prometheus.yml names the rules file; promtool checks the configuration and the rules."""
    config = yaml.safe_load(CONFIG.read_text())
    assert config["rule_files"] == [RULES.name]
    result = _run(promtool, "check", "config", CONFIG)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 1 rule files found" in result.stdout


def _expected(case: Case) -> list[dict]:
    rule = ALERTS[case.alert]
    annotations = {key: value.strip() for key, value in rule["annotations"].items()}
    return [
        {
            "exp_labels": {**labels, "severity": rule["labels"]["severity"]},
            "exp_annotations": {**annotations, "summary": summary},
        }
        for labels, summary in case.fires
    ]


def _unit_tests() -> dict:
    tests = [
        {
            "interval": "1m",
            "name": f"{case.alert} {'fires' if case.fires else 'stays quiet'} #{i}",
            "input_series": [{"series": name, "values": values} for name, values in case.input_series],
            "alert_rule_test": [{"eval_time": case.eval_time, "alertname": case.alert, "exp_alerts": _expected(case)}],
        }
        for i, case in enumerate(CASES)
    ]
    tests += [
        {
            "interval": "1m",
            "name": f"record {expr}",
            "input_series": [{"series": name, "values": values} for name, values in input_series],
            "promql_expr_test": [
                {
                    "expr": expr,
                    "eval_time": eval_time,
                    "exp_samples": [{"labels": labels, "value": value} for labels, value in samples],
                }
            ],
        }
        for input_series, expr, eval_time, samples in RECORDS
    ]
    return {"rule_files": [str(RULES)], "evaluation_interval": "1m", "tests": tests}


def test_every_alert_fires_where_it_should_and_only_there(promtool, tmp_path):
    path = tmp_path / "silicon_zoo_rules_test.yml"
    path.write_text(yaml.safe_dump(_unit_tests(), sort_keys=False))
    result = _run(promtool, "test", "rules", path)
    assert result.returncode == 0, result.stdout[-20_000:] + result.stderr[-5_000:]
    assert "SUCCESS" in result.stdout


def test_a_wrong_expectation_fails(promtool, tmp_path):
    """The harness can fail: an alert expected with another summary, or expected where it is quiet, is reported."""
    firing = next(c for c in CASES if c.fires)
    quiet = next(c for c in CASES if not c.fires)
    wrong = [
        Case(firing.alert, firing.input_series, firing.eval_time, [(firing.fires[0][0], "another summary")]),
        Case(quiet.alert, quiet.input_series, quiet.eval_time, [({}, "an alert that is not there")]),
    ]
    for i, case in enumerate(wrong):
        tests = _unit_tests()
        tests["tests"] = [t for t in tests["tests"] if t["name"].startswith(case.alert)][:1]
        tests["tests"][0]["alert_rule_test"][0]["exp_alerts"] = _expected(case)
        path = tmp_path / f"wrong_{i}_test.yml"
        path.write_text(yaml.safe_dump(tests, sort_keys=False))
        result = _run(promtool, "test", "rules", path)
        assert result.returncode != 0 and "FAILED" in result.stdout + result.stderr


def test_every_alert_has_a_firing_and_a_quiet_case():
    fires = {c.alert for c in CASES if c.fires}
    quiet = {c.alert for c in CASES if not c.fires}
    assert set(ALERTS) == fires == quiet, (set(ALERTS) ^ fires, set(ALERTS) ^ quiet)
    assert {c.alert for c in CASES} <= set(ALERTS)


def test_every_alert_is_labelled_and_documented():
    doc = ALERTS_DOC.read_text()
    anchors = {re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.+)$", doc,
                                                                                                  re.M)}  # fmt: skip
    for name, rule in ALERTS.items():
        assert re.fullmatch(r"Zoo[A-Z][A-Za-z]+", name), name
        assert rule["labels"]["severity"] in SEVERITIES, name
        assert set(rule["annotations"]) == {"summary", "description", "runbook_url"}, name
        assert "{{" not in rule["annotations"]["description"], f"{name}: keep the description static"
        assert rule["annotations"]["runbook_url"] == f"docs/ALERTS.md#{name.lower()}", name
        assert name.lower() in anchors, f"docs/ALERTS.md has no section {name}"
    documented = {a for a in anchors if a.startswith("zoo") and " " not in a}
    assert documented == {n.lower() for n in ALERTS}, documented ^ {n.lower() for n in ALERTS}


def test_the_rules_query_only_exported_metrics():
    known = {v for k, v in vars(metrics_names).items() if k.isupper() and isinstance(v, str)}
    recorded = {rule["record"] for rule in _rules() if "record" in rule}
    used: set[str] = set()
    for rule in _rules():
        expr = re.sub(r'"[^"]*"', '""', rule["expr"])  # label values (regexes) are not metric names
        names = re.findall(r"(?<![\w:])(?:vllm|zoo):[A-Za-z0-9_:]+", expr)
        used |= {re.sub(r"_(bucket|total)$", "", n) for n in names if n not in recorded}
    assert used and used <= known, used - known
    assert re.search(r"\bup\{", next(r["expr"] for r in _rules() if r.get("alert") == "ZooControlPlaneDown"))


def test_the_kubernetes_prometheus_rule_is_rendered_from_the_rules_file():
    """deploy/k8s/41-alerts.yaml is scripts/render_k8s_monitoring.py's PrometheusRule of the rules file, as it is now
    (tests/deploy/test_deploy.py checks the script's --check)."""
    doc = yaml.safe_load(PROMETHEUS_RULE.read_text())
    assert doc["kind"] == "PrometheusRule" and doc["spec"]["groups"] == yaml.safe_load(RULES.read_text())["groups"]
