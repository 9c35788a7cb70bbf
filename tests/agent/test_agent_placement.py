"""A node's placement: zoo agent --host-id/--rack, AgentConfig, the hello on the wire, the registry's view,
zoo.toml's host/rack (bad values: a clear error)."""

from __future__ import annotations

import argparse

import anyio
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import build_trivial_engine, cpu_test_hardware
from backends.gpu_table import gpu_profile
from controlplane.registry import ClusterRegistry
from engine.clock import ManualClock
from transport.codec import decode, encode
from transport.messages import KVInfo, NodeHello
from zoo.agent_cmd import add_agent_args
from zoo.placement_args import default_host_id
from zoo.up_config import load_up_config


def _hello(**fields) -> NodeHello:
    kv = KVInfo(num_device_blocks=8, num_host_blocks=0, block_size=16, bytes_per_block=4096)
    return NodeHello(node_id="n", model="m", backend="sim", hardware=gpu_profile("l4"), kv=kv, max_model_len=64,
                     power_score=1.0, **fields)  # fmt: skip


def test_the_hello_carries_host_and_rack_and_an_old_hello_says_none():
    msg, _ = decode(encode(_hello(host="gpu-box-7", rack="r12")))
    assert (msg.host, msg.rack) == ("gpu-box-7", "r12")
    old, _ = decode(encode(_hello()))
    assert (old.host, old.rack) == ("", "")


def test_the_registry_keeps_the_placement_and_refuses_a_bad_one():
    registry = ClusterRegistry(ManualClock())
    registry.join(_hello(host="gpu-box-7", rack="r12"))
    (view,) = registry.views()
    assert (view.host, view.rack) == ("gpu-box-7", "r12")
    with pytest.raises(ValueError, match="host must be"):
        registry.join(_hello(host="bad host"))


def test_agent_config_checks_host_and_rack():
    assert (AgentConfig(node_id="n").host_id, AgentConfig(node_id="n").rack) == ("", "")
    assert AgentConfig(node_id="n", host_id="h1.local", rack="r-2").rack == "r-2"
    with pytest.raises(ValueError, match="host_id must be"):
        AgentConfig(node_id="n", host_id="h 1")
    with pytest.raises(ValueError, match="rack must be"):
        AgentConfig(node_id="n", rack="x" * 300)


def test_zoo_agent_flags_default_to_this_machines_hostname_and_no_rack(monkeypatch):
    from zoo.agent_cmd import agent_from_args

    parser = argparse.ArgumentParser()
    add_agent_args(parser)
    args = parser.parse_args(["--fake-runner", "--node-id", "n"])
    assert (args.host_id, args.rack) == (None, "")
    monkeypatch.setattr("socket.gethostname", lambda: "my box_1")
    assert default_host_id() == "my-box_1"
    agent = agent_from_args(args)
    assert (agent.config.host_id, agent.config.rack) == ("my-box_1", "")
    agent = agent_from_args(parser.parse_args(["--fake-runner", "--node-id", "n", "--host-id", "h7", "--rack", "r1"]))
    assert (agent.config.host_id, agent.config.rack) == ("h7", "r1")


@pytest.mark.anyio
async def test_a_running_agent_says_its_placement_in_the_hello(router_peer):
    agent = NodeAgent(
        router_peer.endpoint,
        build_trivial_engine(),
        AgentConfig(node_id="n1", model_name="fake-bytes", host_id="box-7", rack="r12", profile_at_start=False),
        hardware=cpu_test_hardware(),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(agent.run)
        _, hello = await router_peer.expect(NodeHello, 10.0)
        assert (hello.node_id, hello.host, hello.rack) == ("n1", "box-7", "r12")
        tg.cancel_scope.cancel()


def test_zoo_toml_host_and_rack_become_agent_flags(tmp_path):
    p = tmp_path / "zoo.toml"
    p.write_text('[[agents]]\nnode_id = "a"\nhost = "box1"\nrack = "r1"\n\n[[agents]]\nnode_id = "b"\n')
    a, b = load_up_config(p).agents
    argv = a.argv("tcp://x:1")
    assert argv[argv.index("--host-id") + 1] == "box1" and argv[argv.index("--rack") + 1] == "r1"
    assert "--host-id" not in b.argv("tcp://x:1")  # not said: the agent's own hostname


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("host = 3", r"agents\[0\]: host must be a string"),
        ('host = "two words"', r"agents\[0\]: host must be 1..255 characters"),
        ('rack = ""', r"agents\[0\]: rack must be 1..255 characters"),
        ('host = "a"\nhost_id = "b"', r"agents\[0\]: give host or host_id, not both"),
    ],
)
def test_zoo_toml_bad_placement_is_a_clear_error(tmp_path, body, message):
    p = tmp_path / "zoo.toml"
    p.write_text(f'[[agents]]\nnode_id = "a"\n{body}\n')
    with pytest.raises(ValueError, match=message):
        load_up_config(p)
