"""What a real Prometheus stores from a real fleet: a control plane and two fake-runner agents as processes on
loopback, scraped by Debian's prometheus 2.42 (scripts/install_prometheus.sh) as deploy/prometheus/prometheus.yml
scrapes them (intervals 1 s), after a few requests. Counts the metric names stored per job, those under the exporters'
own names (observe/metrics_names.py: vllm:..., zoo:...) and those stored under another name (a colon turned into an
underscore), and which families those are.

    python scripts/prometheus_stored_names.py [--out bench/results/DATE-prometheus-stored-names.json]

Run on two commits to compare (observe/exposition_names.py: prometheus_client 0.26's OpenMetrics exposition renames
the samples of colon names, prometheus/client_python#1177).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from observe import metrics_names  # noqa: E402
from transport.local_ports import free_port  # noqa: E402

PROMETHEUS = REPO_ROOT / ".cache" / "prometheus" / "usr" / "bin" / "prometheus"


def _wait(check, what: str, timeout_s: float = 60.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if result := check():
                return result
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    raise SystemExit(f"never: {what}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="write the JSON here too")
    args = parser.parse_args()
    ports = {name: free_port() for name in ("agents", "clients", "stats", "http")}
    http = f"127.0.0.1:{ports['http']}"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    procs = []
    with tempfile.TemporaryDirectory() as tmp:
        try:
            procs.append(subprocess.Popen(
                [sys.executable, "-m", "zoo.serve", "controlplane", "--fake-tokenizer", "--policy", "round_robin",
                 "--listen", f"tcp://127.0.0.1:{ports['agents']}", "--client-listen", f"tcp://127.0.0.1:{ports['clients']}",
                 "--http", http, "--stats-listen", f"tcp://127.0.0.1:{ports['stats']}"],
                cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            for node in ("a", "b"):
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "zoo.serve", "agent", "--control", f"tcp://127.0.0.1:{ports['agents']}",
                     "--node-id", node, "--fake-runner", "--metrics-port", str(free_port())],
                    cwd=REPO_ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            _wait(lambda: len(httpx.get(f"http://{http}/metrics/targets", timeout=5).json()) == 2, "two agents")
            (model,) = [m["id"] for m in httpx.get(f"http://{http}/v1/models", timeout=5).json()["data"]]
            for i in range(8):
                body = {"model": model, "prompt": f"hello {i}", "max_tokens": 4}
                httpx.post(f"http://{http}/v1/completions", json=body, timeout=30).raise_for_status()
            config = yaml.safe_load((REPO_ROOT / "deploy" / "prometheus" / "prometheus.yml").read_text())
            config["global"] = {"scrape_interval": "1s", "evaluation_interval": "1s"}
            config.pop("rule_files", None)
            jobs = {job["job_name"]: job for job in config["scrape_configs"]}
            jobs["zoo-controlplane"]["static_configs"] = [{"targets": [http]}]
            jobs["zoo-agents"]["http_sd_configs"][0].update(url=f"http://{http}/metrics/targets", refresh_interval="1s")
            Path(tmp, "prometheus.yml").write_text(yaml.safe_dump(config))
            api = f"127.0.0.1:{free_port()}"
            procs.append(subprocess.Popen(
                [str(PROMETHEUS), f"--config.file={tmp}/prometheus.yml", f"--storage.tsdb.path={tmp}/data",
                 f"--web.listen-address={api}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip

            def scraped() -> bool:
                targets = httpx.get(f"http://{api}/api/v1/targets", timeout=5).json()["data"]["activeTargets"]
                return len(targets) == 3 and all(t["health"] == "up" and t["lastScrape"][:4] != "0001" for t in targets)

            _wait(scraped, "three targets scraped")
            time.sleep(3)  # a few more scrapes
            ours = {v for k, v in vars(metrics_names).items() if k.isupper() and isinstance(v, str) and ":" in v}
            renamed_of = {name.replace(":", "_"): name for name in ours}
            report: dict = {}
            for job in ("zoo-controlplane", "zoo-agents"):
                q = {"query": f'count by (__name__) ({{job="{job}"}})'}
                result = httpx.get(f"http://{api}/api/v1/query", params=q, timeout=5).json()["data"]["result"]
                names = sorted(r["metric"]["__name__"] for r in result)
                kept = sorted({n for n in names if n.split(":")[0] in ("vllm", "zoo") and ":" in n})
                renamed = sorted({n for n in names if _family(n, renamed_of)})
                report[job] = {
                    "names_stored": len(names),
                    "under_their_own_colon_names": len(kept),
                    "under_an_underscore_name": len(renamed),
                    "renamed_families": sorted({_family(n, renamed_of) for n in renamed}),
                }
        finally:
            for proc in reversed(procs):
                proc.terminate()
            for proc in procs:
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=REPO_ROOT)
    version = subprocess.run([str(PROMETHEUS), "--version"], capture_output=True, text=True)
    out = {
        "date": datetime.date.today().isoformat(),
        "commit": commit.stdout.strip(),
        "what": __doc__.split("\n\n")[0].replace("\n", " "),
        "prometheus": version.stdout.split("\n")[0],
        "jobs": report,
    }
    text = json.dumps(out, indent=1)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    return 0


def _family(stored: str, renamed_of: dict[str, str]) -> str | None:
    """The exporter's own name a stored underscore name came from (None: not one of ours renamed)."""
    for suffix in ("", "_total", "_bucket", "_count", "_sum", "_created"):
        base = stored.removesuffix(suffix) if suffix else stored
        if (not suffix or stored.endswith(suffix)) and base in renamed_of:
            return renamed_of[base]
    return None


if __name__ == "__main__":
    sys.exit(main())
