"""zoo.toml parsing for `zoo up`."""

from __future__ import annotations

import pytest

from zoo import up
from zoo.up_config import AgentSpec, UpConfig, cpu_threads_each, load_up_config


def test_no_file_gives_a_torch_and_a_jax_agent():
    cfg = load_up_config(None)
    assert [(a.node_id, a.backend) for a in cfg.agents] == [("torch-0", "torch"), ("jax-0", "jax")]
    assert cfg.control == "tcp://127.0.0.1:5555"
    assert cfg.base_url == "http://127.0.0.1:8000"


def test_file_sections_become_flags(tmp_path):
    p = tmp_path / "zoo.toml"
    p.write_text(
        """
[controlplane]
listen = "tcp://127.0.0.1:6000"
http = "127.0.0.1:9000"
policy = "least_requests"
max_queue_global = 64

[[agents]]
node_id = "a"
backend = "torch"
num_device_blocks = 256
gpu_profile = "L4"

[[agents]]
node_id = "b"
"""
    )
    cfg = load_up_config(p)
    assert cfg.controlplane_argv() == [
        "controlplane", "--listen", "tcp://127.0.0.1:6000", "--http", "127.0.0.1:9000",
        "--policy", "least_requests", "--max-queue-global", "64",
        "--router-knobs-file", str(p.resolve()),  # its [controlplane.router], re-read at a SIGHUP
    ]  # fmt: skip
    assert cfg.agents[0].argv(cfg.control) == [
        "agent", "--control", "tcp://127.0.0.1:6000", "--node-id", "a", "--backend", "torch",
        "--num-device-blocks", "256", "--gpu-profile", "L4", "--metrics-port", "0",
    ]  # fmt: skip
    assert cfg.agents[1].backend == "torch"


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("[controlplane\n", "invalid TOML"),
        ("[agents]\nx = 1\n[[oops]]\n", "unknown sections"),
        ("[[agents]]\nbackend = 'torch'\n", "needs a node_id"),
        ("[[agents]]\nnode_id = 'a'\n[[agents]]\nnode_id = 'a'\n", "unique"),
        ("[controlplane]\nlisten = 'ipc:///x'\n", "tcp://"),
        ("[agents]\nnode_id = 'a'\n", "array of tables"),
        ("[capacity]\ntarget_utilisation = 2\n", r"zoo\.toml: capacity plan: target_utilisation must be in"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path, text, match):
    p = tmp_path / "zoo.toml"
    p.write_text(text)
    with pytest.raises(ValueError, match=match):
        load_up_config(p)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.toml"):
        load_up_config(tmp_path / "nope.toml")


def test_http_must_be_host_port():
    with pytest.raises(ValueError, match="HOST:PORT"):
        UpConfig(http="8000")


def test_agents_on_one_host_share_its_cores_unless_they_set_their_own():
    """`zoo up` (and `make demo`) start every agent on this host: each that does not set num_threads gets the
    cores the others leave, shared, at least 1; a simulated agent computes nothing and takes no share."""
    torch_jax = [AgentSpec("t", "torch"), AgentSpec("j", "jax")]
    assert cpu_threads_each(torch_jax, cores=2) == 1
    assert cpu_threads_each(torch_jax, cores=16) == 8
    assert cpu_threads_each([*torch_jax, AgentSpec("s", "sim")], cores=16) == 8
    assert cpu_threads_each([AgentSpec("t", "torch", {"num_threads": 10}), AgentSpec("j", "jax")], cores=16) == 6
    assert cpu_threads_each([AgentSpec("t", "torch", {"num_threads": 4})], cores=2) is None
    assert cpu_threads_each([AgentSpec("a", "torch"), AgentSpec("b", "torch"), AgentSpec("c", "jax")], cores=2) == 1
    assert cpu_threads_each([AgentSpec("s", "sim")], cores=2) is None
    for bad in ("abc", -3, 0, True, 2.5, [4], 10**30):  # the agent refuses these at its start; the share ignores them
        spec = AgentSpec("t", "torch", {"num_threads": bad})
        assert cpu_threads_each([spec, AgentSpec("j", "jax")], cores=4) == (1 if bad == 10**30 else 4)
    argv = AgentSpec("t", "torch").argv("tcp://127.0.0.1:5555", 3)
    assert argv[argv.index("--num-threads") + 1] == "3"
    own = AgentSpec("t", "torch", {"num_threads": 5}).argv("tcp://127.0.0.1:5555", 3)
    assert own[own.index("--num-threads") + 1] == "5"


def test_the_local_zoo_passes_each_agent_its_share(tmp_path, monkeypatch):
    monkeypatch.setattr(up, "usable_cores", lambda: 4)
    config = UpConfig(agents=[AgentSpec("t", "torch"), AgentSpec("j", "jax"), AgentSpec("s", "sim")])
    zoo = up.LocalZoo(config, tmp_path)
    argvs = {child.name: child.argv for child in zoo._agents}
    assert argvs["t"][argvs["t"].index("--num-threads") + 1] == "2"
    assert argvs["j"][argvs["j"].index("--num-threads") + 1] == "2"
    assert "--num-threads" not in argvs["s"]


def test_a_profiler_table_is_the_control_planes_and_every_agents_profiler_config(tmp_path):
    from zoo.cli import build_parser

    p = tmp_path / "zoo.toml"
    traces = tmp_path / "traces"
    p.write_text(
        f"""
[controlplane.profiler_config]
profiler = "torch"
torch_profiler_dir = "{traces}"
max_iterations = 64

[[agents]]
node_id = "a"

[[agents]]
node_id = "j"
backend = "jax"
profiler_config = {{profiler = "jax", jax_profiler_dir = "{traces}"}}
"""
    )
    cfg = load_up_config(p)
    cp = build_parser().parse_args(cfg.controlplane_argv())
    assert cp.profiler_config.max_iterations == 64 and cp.profiler_config.trace_dir == str(traces)
    a, j = (build_parser().parse_args(agent.argv(cfg.control)) for agent in cfg.agents)
    assert (a.profiler_config.profiler, a.profiler_config.max_iterations) == ("torch", 64)  # the control plane's
    assert j.profiler_config.profiler == "jax"  # its own


def test_a_capacity_table_is_the_control_planes_capacity_plan(tmp_path):
    p = tmp_path / "zoo.toml"
    p.write_text("[capacity]\ntarget_utilisation = 0.6\n[capacity.gpu_cost]\nL4 = 0.5\n")
    argv = load_up_config(p).controlplane_argv()
    assert argv[argv.index("--capacity-plan") + 1] == str(p)  # zoo controlplane reads [capacity] from it
