"""A control plane in the test's event loop (its exporter and stats observer attached) and fake-runner
agent processes on loopback. Every child process is stopped in a finally, whatever the test did."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def spawn_agent() -> Iterator:
    """``spawn_agent(control, node_id, *flags) -> Popen`` (``--fake-runner``); all stopped at teardown."""
    started: list[subprocess.Popen] = []

    def spawn(control: str, node_id: str, *extra: str) -> subprocess.Popen:
        argv = [sys.executable, "-m", "zoo.serve", "agent", "--control", control, "--node-id", node_id, "--fake-runner"]
        log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed with the process object)
        proc = subprocess.Popen(
            [*argv, *extra], cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        proc.log = log
        started.append(proc)
        return proc

    try:
        yield spawn
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=5)
            proc.log.close()


@pytest.fixture
def observed_controlplane():
    """``async with observed_controlplane(policy=...) as (cp, exporter, observer)``: a ControlPlane on free
    loopback ports (byte tokenizer) with a ControlPlaneExporter and a FleetObserver; ``router_knobs``: RouterConfig
    fields besides the policy."""
    import anyio

    from backends.fake import FAKE_MODEL_NAME, ByteTokenizer
    from controlplane.router.router_config import RouterConfig
    from controlplane.server import ControlPlane, ControlPlaneConfig
    from observe.controlplane_exporter import ControlPlaneExporter
    from observe.stats_stream import FleetObserver

    @contextlib.asynccontextmanager
    async def start(policy: str = "round_robin", router_knobs: dict | None = None, **config) -> AsyncIterator:
        config.setdefault("heartbeat_interval_s", 0.2)
        config.setdefault("heartbeat_timeout_s", 1.0)
        config.setdefault("report_interval_s", 0.05)
        cp = ControlPlane(
            ControlPlaneConfig(
                agent_endpoint="tcp://127.0.0.1:0",
                client_endpoint="tcp://127.0.0.1:0",
                model_name=FAKE_MODEL_NAME,
                router=RouterConfig(policy=policy, **(router_knobs or {})),
                **config,
            ),
            ByteTokenizer(),
        )
        exporter = ControlPlaneExporter(cp.stats)
        observer = FleetObserver(cp, exporter, ebpf_source=cp.latest_probe_snapshot)
        async with anyio.create_task_group() as tg:
            await tg.start(cp.run)
            try:
                yield cp, exporter, observer
            finally:
                tg.cancel_scope.cancel()

    return start
