"""A vLLM command line's flags work here where they mean what ours do: ``--api-key`` and ``$VLLM_API_KEY`` (whole
strings, beside ``--api-keys FILE``), ``--tensor-parallel-size``/``-tp``, ``--served-model-name``,
``--enforce-eager``, ``--kv-cache-dtype``; ``--enable-auto-tool-choice`` (auto is on with a parser),
``--enable-server-load-tracking``, ``--enable-prompt-tokens-details`` and ``--exclude-tools-when-tool-choice-none``
taken: what they turn on is always so here; ``--profiler-config`` (and ``$VLLM_TORCH_PROFILER_DIR``) for both."""

from __future__ import annotations

import json

import pytest

from zoo.cli import build_parser
from zoo.gateway_args import gateway_config_from_args
from zoo.keys import api_keys_from_args


def _args(*argv: str):
    return build_parser().parse_args(list(argv))


def test_vllms_api_key_flag_and_variable_add_keys_as_whole_strings(tmp_path):
    args = _args("controlplane", "--api-key", "sk-one#two", "--api-key", "sk-three")
    config = api_keys_from_args(args, environ={"VLLM_API_KEY": " sk-env "})
    assert config.keys == {"sk-one#two", "sk-three", "sk-env"}  # a '#' or ',' in a key is the key's, not a comment
    file = tmp_path / "keys"
    file.write_text("zk-file\n")
    both = api_keys_from_args(_args("controlplane", "--api-keys", str(file), "--api-key", "sk-x"), environ={})
    assert both.keys == {"zk-file", "sk-x"}
    assert api_keys_from_args(_args("controlplane"), environ={"VLLM_API_KEY": "  "}) is None  # blank: no key


def test_vllms_engine_and_agent_flag_names_set_ours():
    for tp in (("--tp", "2"), ("--tensor-parallel-size", "2"), ("-tp", "2")):
        assert _args("agent", *tp).tp == 2
    assert _args("agent", "--served-model-name", "llama").model_name == "llama"
    assert _args("agent", "--enforce-eager").cuda_graphs is False and _args("agent").cuda_graphs is True
    assert _args("agent", "--kv-cache-dtype", "fp8_e4m3").kv_dtype == "fp8_e4m3"


def test_flags_of_what_is_always_so_are_taken_and_change_nothing():
    plain = gateway_config_from_args(_args("controlplane", "--fake-tokenizer"))
    vllm = gateway_config_from_args(_args("controlplane", "--fake-tokenizer", "--enable-auto-tool-choice"))
    assert plain == vllm and vllm.tool_call_parser == "hermes"
    for flag in (
        "--enable-server-load-tracking",
        "--enable-prompt-tokens-details",
        "--exclude-tools-when-tool-choice-none",
    ):
        assert gateway_config_from_args(_args("controlplane", "--fake-tokenizer", flag)) == plain


def test_profiler_config_serves_the_profile_routes_and_reaches_the_agent(tmp_path, monkeypatch):
    monkeypatch.delenv("VLLM_TORCH_PROFILER_DIR", raising=False)
    from zoo.agent_cmd import _profiler_for

    config = json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path), "max_iterations": 8})
    assert not gateway_config_from_args(_args("controlplane", "--fake-tokenizer")).profiling
    on = gateway_config_from_args(_args("controlplane", "--fake-tokenizer", "--profiler-config", config))
    assert on.profiling and on.profile_dir == str(tmp_path)  # the control plane's own profile too
    quiet = json.dumps({"profiler": "torch", "torch_profiler_dir": str(tmp_path), "ignore_frontend": True})
    quiet = gateway_config_from_args(_args("controlplane", "--fake-tokenizer", "--profiler-config", quiet))
    assert quiet.profiling and quiet.profile_dir is None  # vLLM's ignore_frontend: the nodes only
    agent = _profiler_for(_args("agent", "--profiler-config", config))
    assert (agent.profiler, agent.trace_dir, agent.max_iterations) == ("torch", str(tmp_path), 8)
    assert _profiler_for(_args("agent")) is None
    monkeypatch.setenv("VLLM_TORCH_PROFILER_DIR", str(tmp_path))  # vLLM's earlier switch, for both
    assert _profiler_for(_args("agent")).trace_dir == str(tmp_path)
    assert gateway_config_from_args(_args("controlplane", "--fake-tokenizer")).profiling
    with pytest.raises(SystemExit, match="use 'jax'"):  # torch's profiler sees nothing of a JAX node
        _profiler_for(_args("agent", "--backend", "jax"))
    with pytest.raises(SystemExit):
        _args("agent", "--profiler-config", '{"profiler": "torch"}')  # argparse names the flag and why


def test_the_tokenizer_info_endpoint_is_off_unless_turned_on():
    assert not gateway_config_from_args(_args("controlplane", "--fake-tokenizer")).tokenizer_info_endpoint
    on = gateway_config_from_args(_args("controlplane", "--fake-tokenizer", "--enable-tokenizer-info-endpoint"))
    assert on.tokenizer_info_endpoint


def test_sleep_mode_is_off_unless_turned_on_and_its_idle_ttl_needs_it():
    from zoo.gateway_args import idle_ttl_from_args

    assert not gateway_config_from_args(_args("controlplane", "--fake-tokenizer")).sleep_mode
    on = _args("controlplane", "--fake-tokenizer", "--enable-sleep-mode", "--sleep-idle-ttl", "300")
    assert gateway_config_from_args(on).sleep_mode and idle_ttl_from_args(on) == 300.0
    assert idle_ttl_from_args(_args("controlplane")) == 0.0
    with pytest.raises(SystemExit, match="--sleep-idle-ttl needs --enable-sleep-mode"):
        idle_ttl_from_args(_args("controlplane", "--sleep-idle-ttl", "60"))
    with pytest.raises(SystemExit, match="must be >= 0 seconds"):
        idle_ttl_from_args(_args("controlplane", "--enable-sleep-mode", "--sleep-idle-ttl", "nan"))


def test_vllms_host_and_port_give_the_apis_address():
    from zoo.serve import DEFAULT_HTTP
    from zoo.vllm_server_args import http_address

    assert http_address(_args("controlplane"), DEFAULT_HTTP) == "127.0.0.1:8000"
    assert http_address(_args("controlplane", "--host", "0.0.0.0", "--port", "9000"), DEFAULT_HTTP) == "0.0.0.0:9000"
    assert http_address(_args("controlplane", "--port", "9001"), DEFAULT_HTTP) == "127.0.0.1:9001"
    assert http_address(_args("controlplane", "--host", "::1"), DEFAULT_HTTP) == "::1:8000"
    assert http_address(_args("controlplane", "--http", "none"), DEFAULT_HTTP) is None
    with pytest.raises(SystemExit, match="give one"):
        http_address(_args("controlplane", "--http", "0.0.0.0:7000", "--port", "9000"), DEFAULT_HTTP)
    with pytest.raises(SystemExit, match=r"0\.\.65535"):
        http_address(_args("controlplane", "--port", "70000"), DEFAULT_HTTP)
