"""`zoo up` stops its children whatever stops it: SIGINT even when started in the background from a script
(which starts it with SIGINT ignored), SIGHUP, and SIGKILL of `zoo up` itself (the children die with it)."""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import anyio
import psutil
import pytest

from transport.local_ports import free_port

pytestmark = pytest.mark.anyio

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 90.0


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def _zoo_toml(tmp_path: Path) -> Path:
    path = tmp_path / "zoo.toml"
    path.write_text(
        f"""
[controlplane]
listen = "tcp://127.0.0.1:{free_port()}"
http = "127.0.0.1:{free_port()}"
policy = "round_robin"
fake_tokenizer = true
client_listen = "none"
stats_listen = "none"

[[agents]]
node_id = "a"
fake_runner = true
"""
    )
    return path


async def _start(tmp_path: Path, *, background: bool):
    """`zoo up` (or a script that starts it with `&`); returns (process, its stdout, zoo up's pid)."""
    up = [sys.executable, "-m", "zoo", "up", "--config", str(_zoo_toml(tmp_path)), "--log-dir", str(tmp_path)]
    if background:  # a non-interactive shell starts background jobs with SIGINT ignored
        argv = ["bash", "-c", " ".join(up) + " & echo $!; wait"]
    else:
        argv = up
    proc = await anyio.open_process(argv, cwd=REPO_ROOT)
    lines = _lines(proc.stdout)
    pid = int(await lines.__anext__()) if background else proc.pid
    with anyio.fail_after(READY_TIMEOUT_S):
        async for line in lines:
            if line == "ready.":
                break
    return proc, lines, pid


async def _lines(stream):
    buffer = b""
    async for data in stream:
        buffer += data
        *complete, buffer = buffer.split(b"\n")
        for line in complete:
            yield line.decode()


def _children(pid: int) -> list[psutil.Process]:
    children = psutil.Process(pid).children()
    assert len(children) == 2  # the control plane and the agent
    return children


async def test_children_die_with_a_killed_zoo_up(tmp_path):
    proc, _, pid = await _start(tmp_path, background=False)
    children = _children(pid)
    proc.kill()  # SIGKILL: no clean-up code runs in `zoo up`
    await proc.wait()
    gone, alive = await anyio.to_thread.run_sync(lambda: psutil.wait_procs(children, timeout=30))
    assert alive == [] and len(gone) == 2


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGHUP])
async def test_zoo_up_started_from_a_script_stops_its_children_on_a_signal(tmp_path, signum):
    proc, lines, pid = await _start(tmp_path, background=True)
    children = _children(pid)
    psutil.Process(pid).send_signal(signum)
    with anyio.fail_after(60):
        async for line in lines:
            if "shutting down" in line:
                break
        assert await proc.wait() == 0  # the script's `wait` returns zoo up's exit status
    gone, alive = await anyio.to_thread.run_sync(lambda: psutil.wait_procs(children, timeout=30))
    assert alive == [] and len(gone) == 2
