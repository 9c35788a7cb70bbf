"""--profiler-config (backends/profiler_config.py): vLLM's keys, defaults and checks, ours beside them, and which
profiler a backend's node may run (backends/profiler_sessions.py)."""

from __future__ import annotations

import os

import pytest

from backends.profiler_config import ProfilerConfig, parse_profiler_config, profiler_config_from_env
from backends.profiler_sessions import check_profiler_backend


def test_vllm_defaults_and_an_absolute_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = parse_profiler_config('{"profiler": "torch", "torch_profiler_dir": "traces"}')
    assert config.enabled and config.trace_dir == os.path.join(str(tmp_path), "traces")
    assert (config.torch_profiler_use_gzip, config.torch_profiler_dump_cuda_time_total) == (True, True)
    assert (config.active_iterations, config.torch_profiler_with_stack) == (5, False)  # stacks: off unless asked
    assert (config.delay_iterations, config.max_iterations, config.warmup_iterations) == (0, 0, 0)
    assert not parse_profiler_config("{}").enabled  # vLLM's default: no profiler


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ('{"profiler": "torch"}', "torch_profiler_dir must be set"),  # vLLM's rule
        ('{"profiler": "cuda", "torch_profiler_dir": "/tmp/x"}', "only applicable when profiler is 'torch'"),
        ('{"profiler": "jax"}', "jax_profiler_dir must be set"),
        ('{"profiler": "torch", "jax_profiler_dir": "/tmp/x", "torch_profiler_dir": "/tmp/y"}', "jax_profiler_dir"),
        ('{"profiler": "nsight"}', "profiler must be one of torch, cuda, jax"),
        ('{"profiler": "torch", "torch_profiler_dir": "gs://bucket/t"}', "local directory"),
        ('{"profiler": "cuda", "max_iterations": -1}', "max_iterations must be >= 0"),
        ('{"profiler": "cuda", "active_iterations": 0}', "active_iterations must be >= 1"),
        ('{"profiler": "cuda", "delay_iterations": "3"}', "Expected `int`"),
        ('{"profiler": "cuda", "torch_profiler_with_stack": 1}', "Expected `bool`"),
        ('{"profiler": "cuda", "capture_torch_profiler": true}', "not supported here"),
        ('{"profiler": "cuda", "detailed_trace_annotation": true}', "not supported here"),
        ('{"profiler": "cuda", "speed": "max"}', "unknown field `speed`"),
        ('["torch"]', "must be a JSON object"),
        ("{profiler: torch}", "not JSON"),
        ("[" * 100_000, "not JSON"),
    ],
)
def test_a_bad_config_is_refused_naming_what_is_wrong(text, says):
    with pytest.raises(ValueError, match="--profiler-config") as raised:
        parse_profiler_config(text)
    assert says in str(raised.value)


def test_vllms_earlier_environment_variable_turns_the_torch_profiler_on(tmp_path):
    config = profiler_config_from_env({"VLLM_TORCH_PROFILER_DIR": str(tmp_path)})
    assert (config.profiler, config.trace_dir) == ("torch", str(tmp_path))
    assert profiler_config_from_env({}) is None


def test_a_jax_node_runs_jaxs_profiler_and_the_others_torchs():
    jax, torch = ProfilerConfig(profiler="jax", jax_profiler_dir="/t"), ProfilerConfig(profiler="torch")
    check_profiler_backend(jax, "jax")
    for backend in ("torch", "sim", "fake"):
        check_profiler_backend(torch, backend)
        with pytest.raises(ValueError, match="use 'torch' or 'cuda'"):
            check_profiler_backend(jax, backend)
    with pytest.raises(ValueError, match="use 'jax'"):
        check_profiler_backend(torch, "jax")
    check_profiler_backend(ProfilerConfig(), "jax")  # off: nothing to check
