"""eBPF tests run for real as root (CI is root): missing BCC, headers or tracefs is a failure, not a skip."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from observe.ebpf.env import REPO_ROOT, ebpf_status


@pytest.fixture(scope="session")
def ebpf_ready() -> None:
    """Skip when not root (the only reason to skip); as root, eBPF must be usable (`make ebpf` installs it)."""
    available, reason = ebpf_status()
    if os.geteuid() != 0:
        pytest.skip(f"eBPF tests need root: {reason}")
    assert available, f"eBPF unavailable as root (the install step is part of the project): {reason}"


class Child:
    """A Python child process driven line by line over its stdin/stdout (no sleeps: every wait is a read)."""

    def __init__(self, code: str, *args: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(REPO_ROOT),
        )
        self.pid = self.proc.pid

    def readline(self) -> str:
        line = self.proc.stdout.readline()
        assert line, f"child {self.pid} exited early (rc {self.proc.poll()})"
        return line.strip()

    def send(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def finish(self, timeout_s: float = 30.0) -> str:
        out, _ = self.proc.communicate(timeout=timeout_s)
        assert self.proc.returncode == 0, f"child {self.pid} failed with rc {self.proc.returncode}"
        return out

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def spawn():
    children: list[Child] = []

    def make(code: str, *args: str) -> Child:
        child = Child(code, *args)
        children.append(child)
        return child

    yield make
    for child in children:
        child.kill()
