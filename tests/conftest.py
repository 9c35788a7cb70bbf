"""Session-wide fixtures: the real default model is loaded at most once per test session."""

from __future__ import annotations

from pathlib import Path

import pytest

from backends.checkpoint import default_model_path


@pytest.fixture(scope="session")
def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF; `make test` installs it, so its absence is an error, not a skip."""
    return Path(default_model_path())


@pytest.fixture(scope="session")
def smollm2_checkpoint(smollm2_gguf_path):
    from backends.checkpoint import load_checkpoint

    return load_checkpoint(smollm2_gguf_path)


@pytest.fixture(scope="session")
def smollm2_model(smollm2_checkpoint):
    """Our fp32 LlamaModel of SmolLM2, built once (runners share it)."""
    from backends.torch import build_model

    return build_model(smollm2_checkpoint, "float32", progress=False)


@pytest.fixture(scope="session")
def hf_reference(smollm2_gguf_path):
    """transformers' own model of the same GGUF (the independent reference), fp32."""
    from bench.hf_reference import load_hf_reference

    return load_hf_reference(smollm2_gguf_path)


@pytest.fixture(scope="session")
def tiny():
    """(config, HF-named fp32 torch state dict, torch LlamaModel) of a 2-layer random Llama, shared by
    the torch and JAX backend tests."""
    from backends.runner_driver import tiny_config
    from backends.torch import build_model, random_state_dict

    config = tiny_config()
    sd = random_state_dict(config, seed=1, std=0.2)
    return config, sd, build_model(config, "float32", state_dict=sd)
