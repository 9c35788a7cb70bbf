"""`zoo probe` finds the zoo's processes by their command lines (needs no root)."""

from __future__ import annotations

from observe.ebpf.probe import _zoo_subcommand, find_zoo_processes

WAIT = "import sys; print('ready', flush=True); sys.stdin.readline()"


def test_zoo_subcommand_forms():
    assert _zoo_subcommand(["python", "-m", "zoo", "agent", "--node-id", "a"]) == ["agent", "--node-id", "a"]
    assert _zoo_subcommand(["/x/.venv/bin/zoo", "controlplane", "--listen", "tcp://*:5555"])[0] == "controlplane"
    assert _zoo_subcommand(["/usr/bin/python3", "/x/.venv/bin/zoo", "agent"]) == ["agent"]
    assert _zoo_subcommand(["python", "-m", "pytest"]) is None
    assert _zoo_subcommand(["bash"]) is None


def test_finds_agents_and_control_plane_by_cmdline(spawn):
    # `python -c CODE -m zoo ...`: the child only waits, but its command line reads like the zoo's
    cp = spawn(WAIT, "-m", "zoo", "controlplane", "--listen", "tcp://127.0.0.1:0")
    a = spawn(WAIT, "-m", "zoo", "agent", "--node-id", "probe-test-a")
    b = spawn(WAIT, "-m", "zoo", "agent", "--node-id=probe-test-b")
    for child in (cp, a, b):
        assert child.readline() == "ready"  # running, its command line in /proc
    controlplane, agents = find_zoo_processes()
    assert agents.get("probe-test-a") == a.pid
    assert agents.get("probe-test-b") == b.pid
    assert controlplane is not None  # ours, or a zoo another test runs on this host
    for child in (cp, a, b):
        child.send("")
        child.finish()
