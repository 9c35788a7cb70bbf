"""The real alerting parts the tests run (Debian's binaries unpacked by scripts/install_prometheus.sh, which `make
test` runs): an Alertmanager on loopback with deploy/prometheus/alertmanager.yml, its receivers pointed at a webhook
sink in the test, and the sink itself, which keeps what each receiver was sent."""

from __future__ import annotations

import contextlib
import json
import subprocess
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from transport.local_ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
BIN = REPO_ROOT / ".cache" / "prometheus" / "usr" / "bin"
ALERTMANAGER_CONFIG = REPO_ROOT / "deploy" / "prometheus" / "alertmanager.yml"


# Debian's alertmanager reads its notification templates from here (compiled in); scripts/install_prometheus.sh puts
# them there when run as root, as `make test` in CI is
DEBIAN_TEMPLATES = Path("/usr/share/prometheus/alertmanager/default.tmpl")


def need(binary: str) -> Path:
    path = BIN / binary
    if not path.exists():
        pytest.skip(f"{binary} is not unpacked here: scripts/install_prometheus.sh (make test runs it)")
    if binary == "prometheus-alertmanager" and not DEBIAN_TEMPLATES.exists():
        pytest.skip(f"Debian's alertmanager needs {DEBIAN_TEMPLATES}: run scripts/install_prometheus.sh as root")
    return path


class WebhookSink:
    """An HTTP server on loopback taking Alertmanager's webhook posts: ``received[receiver]`` is the list of alert
    groups (the posted JSON objects) sent to ``url(receiver)``."""

    def __init__(self) -> None:
        self.received: dict[str, list[dict]] = {}
        sink = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                sink.received.setdefault(self.path.strip("/"), []).append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    def url(self, receiver: str) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/{receiver}"

    def alerts(self, receiver: str) -> list[dict]:
        return [alert for group in self.received.get(receiver, []) for alert in group["alerts"]]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def alertmanager_config(sink: WebhookSink, group_wait: str = "0s") -> dict:
    """The shipped configuration, each receiver's webhook the sink's, its waits short."""
    import yaml

    config = yaml.safe_load(ALERTMANAGER_CONFIG.read_text())
    for receiver in config["receivers"]:
        (webhook,) = receiver["webhook_configs"]
        webhook["url"] = sink.url(receiver["name"])
    config["route"]["group_wait"] = group_wait
    config["route"]["group_interval"] = "1s"
    for route in config["route"]["routes"]:
        route.pop("group_interval", None)
    return config


@contextlib.contextmanager
def running_alertmanager(tmp_path: Path, sink: WebhookSink) -> Iterator[str]:
    """An Alertmanager with the shipped configuration (its receivers the sink's); yields its base URL."""
    import yaml

    binary = need("prometheus-alertmanager")
    config = tmp_path / "alertmanager.yml"
    config.write_text(yaml.safe_dump(alertmanager_config(sink)))
    base = f"http://127.0.0.1:{free_port()}"
    log = tmp_path / "alertmanager.log"
    argv = [str(binary), f"--config.file={config}", f"--storage.path={tmp_path / 'am-data'}",
            f"--web.listen-address={base.removeprefix('http://')}", "--cluster.listen-address="]  # fmt: skip
    with log.open("w") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{base}/-/ready", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail(f"alertmanager never got ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.1)
        yield base
    finally:
        stop(proc)


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM, then SIGKILL if it has not ended within 10 s."""
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)
