"""`zoo keys` and the authentication flags, down to a secured `zoo controlplane` + `zoo agent` pair of processes."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys

import httpx
import pytest

from backends.fake import FAKE_MODEL_NAME
from bench.workload import REPO_ROOT
from transport.curve import CurveKeyError, CurveKeyPair, load_controlplane_curve, load_curve_client
from transport.local_ports import free_port
from transport.process import stop_processes
from zoo.cli import build_parser, main
from zoo.keys import agent_node_id_and_curve, api_keys_from_args, controlplane_curve_from_args

WAIT_S = 60.0


def _controlplane_args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["controlplane", *argv])


def test_zoo_keys_makes_a_curve_dir_and_api_keys(tmp_path, capsys):
    assert main(["keys", str(tmp_path), "--agent", "gpu-0", "--client", "app", "--api-keys", "2"]) == 0
    out = capsys.readouterr().out
    assert str(tmp_path / "agents" / "gpu-0.key_secret") in out
    curve = load_controlplane_curve(tmp_path)
    assert list(curve.agents.values()) == ["gpu-0"] and list(curve.clients.values()) == ["app"]
    keys = (tmp_path / "api_keys").read_text().split()
    assert len(keys) == 2 and all(k.startswith("zk-") and len(k) > 40 for k in keys) and keys[0] != keys[1]
    # a second run adds an agent and keeps the control plane's key (every agent trusts it)
    before = CurveKeyPair.load(tmp_path / "controlplane.key_secret")
    assert main(["keys", str(tmp_path), "--agent", "gpu-1"]) == 0
    assert CurveKeyPair.load(tmp_path / "controlplane.key_secret") == before
    assert main(["keys", str(tmp_path), "--agent", "gpu-1"]) == 2  # exists: refused, nothing overwritten
    assert main(["keys", str(tmp_path), "--agent", "../x"]) == 2


def test_api_keys_from_file_and_environment(tmp_path):
    file = tmp_path / "keys"
    file.write_text("zk-from-file\n")
    args = _controlplane_args("--api-keys", str(file))
    config = api_keys_from_args(args, environ={"ZOO_API_KEYS": "zk-env-1, zk-env-2"})
    assert config.keys == {"zk-from-file", "zk-env-1", "zk-env-2"}
    assert (config.protect_health, config.protect_metrics) == (False, True)
    assert api_keys_from_args(_controlplane_args(), environ={}) is None  # no keys: the API stays open
    only_env = api_keys_from_args(_controlplane_args("--protect-health", "--open-metrics"), {"ZOO_API_KEYS": "k"})
    assert only_env.keys == {"k"} and (only_env.protect_health, only_env.protect_metrics) == (True, False)
    file.write_text("# nothing yet\n")
    with pytest.raises(ValueError, match="holds no key"):
        api_keys_from_args(args, environ={})


def test_curve_flags(tmp_path):
    assert controlplane_curve_from_args(_controlplane_args()) is None
    main(["keys", str(tmp_path), "--agent", "gpu-0"])
    curve = controlplane_curve_from_args(_controlplane_args("--curve-dir", str(tmp_path), "--curve-clients", "any"))
    assert curve.clients is None and list(curve.agents.values()) == ["gpu-0"]
    assert controlplane_curve_from_args(_controlplane_args("--curve-dir", str(tmp_path))).clients == {}
    (tmp_path / "clients").rmdir()
    with pytest.raises(CurveKeyError, match="does not exist"):  # allow-listed clients, but no clients/ folder
        controlplane_curve_from_args(_controlplane_args("--curve-dir", str(tmp_path)))

    agent = build_parser().parse_args(["agent", "--curve-dir", str(tmp_path)])
    node_id, client = agent_node_id_and_curve(agent, "host-123")
    assert node_id == "gpu-0"  # the one agent key there names the node
    assert client == load_curve_client(tmp_path, "agents", "gpu-0")
    assert agent_node_id_and_curve(build_parser().parse_args(["agent"]), "host-123") == ("host-123", None)
    main(["keys", str(tmp_path), "--agent", "gpu-1"])
    with pytest.raises(ValueError, match="--node-id"):
        agent_node_id_and_curve(agent, "host-123")
    with pytest.raises(CurveKeyError):
        unknown = build_parser().parse_args(["agent", "--curve-dir", str(tmp_path), "--node-id", "x"])
        agent_node_id_and_curve(unknown, "")


def _read_until(proc: subprocess.Popen, needle: str) -> list[str]:
    """Lines of ``proc``'s output up to the one containing ``needle`` (readline blocks: no polling)."""
    lines: list[str] = []
    while True:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError(f"exited before {needle!r}:\n{''.join(lines)}")
        lines.append(line)
        if needle in line:
            return lines


def test_secured_controlplane_and_agent_processes(tmp_path):
    """The multi-host layout on one host: each process gets only the files its host would hold."""
    keys = tmp_path / "keys"
    main(["keys", str(keys), "--agent", "gpu-0", "--client", "app", "--api-keys", "1"])
    cp_host, agent_host = tmp_path / "cp-host", tmp_path / "agent-host"
    for folder in ("agents", "clients"):
        (cp_host / folder).mkdir(parents=True)
        for public in (keys / folder).glob("*.key"):
            shutil.copy(public, cp_host / folder)
    shutil.copy(keys / "controlplane.key_secret", cp_host)
    (agent_host / "agents").mkdir(parents=True)
    shutil.copy(keys / "controlplane.key", agent_host)
    shutil.copy(keys / "agents" / "gpu-0.key_secret", agent_host / "agents")
    api_key = (keys / "api_keys").read_text().split()[0]

    port, agent_port, client_port = free_port(), free_port(), free_port()
    zoo = [sys.executable, "-m", "zoo.serve"]
    procs = []
    try:
        cp = subprocess.Popen(
            [*zoo, "controlplane", "--listen", f"tcp://127.0.0.1:{agent_port}",
             "--client-listen", f"tcp://127.0.0.1:{client_port}", "--http", f"127.0.0.1:{port}",
             "--stats-listen", "none", "--fake-tokenizer", "--curve-dir", str(cp_host),
             "--api-keys", str(keys / "api_keys")],
            cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        procs.append(cp)
        _read_until(cp, "OpenAI API")
        agent = subprocess.Popen(
            [*zoo, "agent", "--control", f"tcp://127.0.0.1:{agent_port}", "--fake-runner",
             "--curve-dir", str(agent_host)],
            cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        procs.append(agent)
        _read_until(cp, "node gpu-0 joined")

        base = f"http://127.0.0.1:{port}"
        body = {"model": FAKE_MODEL_NAME, "prompt": "hi", "max_tokens": 2}
        with httpx.Client(base_url=base, timeout=WAIT_S) as http:
            assert http.post("/v1/completions", json=body).status_code == 401
            assert http.get("/health").status_code == 200
            assert http.get("/metrics").status_code == 401
            r = http.post("/v1/completions", json=body, headers={"Authorization": f"Bearer {api_key}"})
        assert r.status_code == 200, r.text
        assert r.json()["usage"]["completion_tokens"] == 2

        from client import ZooClient

        curve = load_curve_client(keys, "clients", "app")
        with ZooClient(f"tcp://127.0.0.1:{client_port}", timeout_s=WAIT_S, curve=curve) as client:
            done = client.generate(prompt_token_ids=[5, 6, 7], max_tokens=2)
        assert done.node_id == "gpu-0" and done.num_output_tokens == 2
    finally:
        stop_processes(procs)
        if procs and procs[0].stdout is not None:
            procs[0].stdout.close()


def test_zoo_toml_curve_dir_reaches_the_control_plane_and_every_agent(tmp_path):
    from zoo.up_config import load_up_config

    path = tmp_path / "zoo.toml"
    path.write_text(
        '[controlplane]\ncurve_dir = "keys"\napi_keys = "keys/api_keys"\n\n'
        '[[agents]]\nnode_id = "a"\n\n[[agents]]\nnode_id = "b"\ncurve_dir = "other"\n'
    )
    cfg = load_up_config(path)
    argv = cfg.controlplane_argv()
    assert argv[argv.index("--curve-dir") + 1] == "keys" and argv[argv.index("--api-keys") + 1] == "keys/api_keys"
    curve_dirs = [a.argv(cfg.control)[a.argv(cfg.control).index("--curve-dir") + 1] for a in cfg.agents]
    assert curve_dirs == ["keys", "other"]
    assert "--curve-dir" not in load_up_config(None).agents[0].argv(cfg.control)


def test_drain_flags_make_a_curve_client(tmp_path):
    from zoo.keys import client_curve_from_args

    main(["keys", str(tmp_path), "--client", "ops"])
    args = build_parser().parse_args(["drain", "gpu-0", "--curve-dir", str(tmp_path), "--curve-client", "ops"])
    assert client_curve_from_args(args) == load_curve_client(tmp_path, "clients", "ops")
    fresh = client_curve_from_args(build_parser().parse_args(["drain", "gpu-0", "--curve-dir", str(tmp_path)]))
    assert fresh.server_public_key == CurveKeyPair.load(tmp_path / "controlplane.key_secret").public_key
    assert client_curve_from_args(build_parser().parse_args(["drain", "gpu-0"])) is None
