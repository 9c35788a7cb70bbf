"""A node's role in the prefill/decode split: zoo agent --role, AgentConfig, the hello on the wire, zoo.toml."""

from __future__ import annotations

import argparse

import pytest

from agent.agent_config import AgentConfig
from backends.gpu_table import gpu_profile
from transport.codec import decode, encode
from transport.messages import KVInfo, NodeHello
from zoo.agent_cmd import add_agent_args
from zoo.up_config import AgentSpec


def _hello(**fields) -> NodeHello:
    kv = KVInfo(num_device_blocks=8, num_host_blocks=0, block_size=16, bytes_per_block=4096)
    return NodeHello(node_id="n", model="m", backend="sim", hardware=gpu_profile("l4"), kv=kv, max_model_len=64,
                     power_score=1.0, **fields)  # fmt: skip


def test_the_hello_says_the_role_and_an_old_hello_means_both():
    assert _hello().role == "both"
    msg, _ = decode(encode(_hello(role="decode")))
    assert msg.role == "decode"


def test_agent_config_refuses_an_unknown_role():
    assert AgentConfig(node_id="n").role == "both"
    assert AgentConfig(node_id="n", role="prefill").role == "prefill"
    with pytest.raises(ValueError, match="role must be one of"):
        AgentConfig(node_id="n", role="sometimes")


def test_zoo_agent_flag_and_zoo_toml_agent_spec():
    parser = argparse.ArgumentParser()
    add_agent_args(parser)
    assert parser.parse_args(["--role", "decode"]).role == "decode"
    assert parser.parse_args([]).role == "both"
    with pytest.raises(SystemExit):
        parser.parse_args(["--role", "sometimes"])
    argv = AgentSpec("d0", "torch", {"role": "decode", "data_endpoint": "tcp://127.0.0.1:0"}).argv("tcp://x:1")
    assert argv[argv.index("--role") + 1] == "decode"
