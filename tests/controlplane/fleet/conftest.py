"""A fleet on loopback: the control plane in the test's event loop, agents as real child processes.

Under ``--import-mode=importlib`` test modules cannot import this file, so helpers are fixtures.
Every child process is terminated (then killed) in a finally, whatever the test did.
"""

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

from transport.local_ports import free_port

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


class AgentProcess:
    """``python -m zoo.serve agent --fake-runner ...`` (or the real model with fake=False)."""

    def __init__(self, control: str, node_id: str, *extra: str, fake: bool = True) -> None:
        argv = [sys.executable, "-m", "zoo.serve", "agent", "--control", control, "--node-id", node_id]
        if fake:
            argv.append("--fake-runner")
        self.node_id = node_id
        # a file, not a pipe: a chatty child never blocks; closed with the object
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [*argv, *extra], cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip

    def kill(self) -> None:
        """SIGKILL: no NodeLeave, the control plane must notice the silence."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(timeout=10)

    def terminate(self, timeout_s: float = 10.0) -> int:
        """SIGTERM: a clean shutdown (NodeLeave); the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
            raise

    def output(self) -> str:
        self._log.seek(0)
        return self._log.read()


class ControlPlaneProcess(AgentProcess):
    """``python -m zoo.serve controlplane --fake-tokenizer`` on fixed loopback ports (so that a restart can
    take them again); ``agent_endpoint`` / ``client_endpoint`` / ``stats_endpoint`` / ``http``."""

    def __init__(self, ports: dict[str, int], *extra: str) -> None:
        self.agent_endpoint = f"tcp://127.0.0.1:{ports['agents']}"
        self.client_endpoint = f"tcp://127.0.0.1:{ports['clients']}"
        self.stats_endpoint = f"tcp://127.0.0.1:{ports['stats']}"
        self.http = f"127.0.0.1:{ports['http']}"
        argv = [
            sys.executable, "-m", "zoo.serve", "controlplane", "--fake-tokenizer", "--policy", "round_robin",
            "--listen", self.agent_endpoint, "--client-listen", self.client_endpoint, "--http", self.http,
            "--stats-listen", self.stats_endpoint, "--stats-interval-s", "0.05", *extra,
        ]  # fmt: skip
        self.node_id = "controlplane"
        self._log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
        self.proc = subprocess.Popen(
            argv, cwd=REPO_ROOT, stdout=self._log, stderr=subprocess.STDOUT, text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip


@pytest.fixture
def spawn_controlplane() -> Iterator:
    """``spawn_controlplane(ports=None, *flags) -> ControlPlaneProcess`` (``ports``: reuse a killed one's);
    all are stopped at teardown."""
    started: list[ControlPlaneProcess] = []

    def spawn(ports: dict[str, int] | None = None, *extra: str) -> ControlPlaneProcess:
        ports = ports or {name: free_port() for name in ("agents", "clients", "stats", "http")}
        cp = ControlPlaneProcess(ports, *extra)
        cp.ports = ports
        started.append(cp)
        return cp

    try:
        yield spawn
    finally:
        for cp in started:
            with contextlib.suppress(Exception):
                cp.kill()


@pytest.fixture
def spawn_agent() -> Iterator:
    """``spawn_agent(control, node_id, *flags, fake=True) -> AgentProcess``; all are stopped at teardown."""
    started: list[AgentProcess] = []

    def spawn(control: str, node_id: str, *extra: str, fake: bool = True) -> AgentProcess:
        agent = AgentProcess(control, node_id, *extra, fake=fake)
        started.append(agent)
        return agent

    try:
        yield spawn
    finally:
        for agent in started:
            with contextlib.suppress(Exception):
                agent.terminate(timeout_s=5)
            with contextlib.suppress(Exception):
                agent.kill()


@pytest.fixture
def controlplane():
    """``async with controlplane(policy=..., **config) as cp``: a ControlPlane on free loopback ports
    (byte tokenizer unless ``tokenizer`` is given), stopped on exit."""
    import anyio

    from backends.fake import FAKE_MODEL_NAME, ByteTokenizer
    from controlplane.admission import AdmissionConfig
    from controlplane.router.router_config import RouterConfig
    from controlplane.server import ControlPlane, ControlPlaneConfig

    @contextlib.asynccontextmanager
    async def start(
        policy: str = "round_robin",
        tokenizer=None,
        agent_endpoint: str = "tcp://127.0.0.1:0",
        admission: AdmissionConfig | None = None,
        **config,
    ) -> AsyncIterator[ControlPlane]:
        config.setdefault("heartbeat_interval_s", 0.2)
        config.setdefault("heartbeat_timeout_s", 1.0)
        config.setdefault("report_interval_s", 0.05)
        config.setdefault("model_name", FAKE_MODEL_NAME if tokenizer is None else None)
        config.setdefault("client_endpoint", "tcp://127.0.0.1:0")
        cp = ControlPlane(
            ControlPlaneConfig(
                agent_endpoint=agent_endpoint,
                router=RouterConfig(policy=policy),
                admission=admission,
                **config,
            ),
            tokenizer or ByteTokenizer(),
        )
        async with anyio.create_task_group() as tg:
            await tg.start(cp.run)
            try:
                yield cp
            finally:
                tg.cancel_scope.cancel()

    return start


@pytest.fixture
def fleet_with_agents(controlplane):
    """``async with fleet_with_agents(*node_ids, engines=None, **controlplane_config) as cp``: conftest's control
    plane with an agent in this process per node id (a trivial engine each, or ``engines[i]``), every one joined."""
    import anyio

    from agent.agent_config import AgentConfig
    from agent.node_agent import NodeAgent
    from backends.fake import FAKE_MODEL_NAME, build_trivial_engine, cpu_test_hardware

    @contextlib.asynccontextmanager
    async def start(*node_ids: str, engines=None, **config):
        async with controlplane(**config) as cp, anyio.create_task_group() as tg:
            for i, node_id in enumerate(node_ids):
                engine = engines[i] if engines is not None else build_trivial_engine(step_s=0.002)
                agent_config = AgentConfig(node_id=node_id, model_name=FAKE_MODEL_NAME)
                await tg.start(NodeAgent(cp.agent_endpoint, engine, agent_config, hardware=cpu_test_hardware()).run)
            await cp.wait_until(lambda: len(cp.registry) == len(node_ids), 10)
            yield cp
            tg.cancel_scope.cancel()

    return start


async def _sse_events(http, path: str, body: dict, on_event) -> list[str]:
    """POST a streaming ``body`` to ``path``; the data of its SSE events, ``await on_event(events)`` after each."""
    events: list[str] = []
    async with http.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        async for line in response.aiter_lines():
            if line.startswith("data: "):
                events.append(line.removeprefix("data: "))
                await on_event(events)
    return events


@pytest.fixture
def sse_events():
    """``await sse_events(http, path, body, on_event)``: see ``_sse_events``."""
    return _sse_events


@pytest.fixture
def client():
    """``async with client(cp) as c``: an AsyncZooClient on the control plane's client endpoint."""
    from client import AsyncZooClient

    def make(cp, timeout_s: float = 20.0) -> AsyncZooClient:
        return AsyncZooClient(cp.client_endpoint, timeout_s=timeout_s)

    return make
