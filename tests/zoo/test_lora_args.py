"""vLLM's LoRA flags on the engine commands and the control plane."""

from __future__ import annotations

import pytest

from engine.lora import LoraRequest
from zoo.cli import build_parser
from zoo.engine_args import engine_config_from_args


def test_lora_modules_enable_lora_with_their_limits():
    args = build_parser().parse_args(
        ["generate", "hi", "--lora-modules", "sql=/a/sql", "chat=/a/chat", "--max-loras", "4", "--lora", "sql"]
    )
    config = engine_config_from_args(args)
    assert config.lora is not None and (config.lora.max_loras, config.lora.max_lora_rank) == (4, 16)
    assert config.lora_modules == [LoraRequest("sql", "/a/sql"), LoraRequest("chat", "/a/chat")]
    assert args.lora == "sql"
    plain = engine_config_from_args(build_parser().parse_args(["generate", "hi"]))
    assert plain.lora is None and plain.lora_modules == []
    assert engine_config_from_args(build_parser().parse_args(["generate", "hi", "--enable-lora"])).lora is not None


@pytest.mark.parametrize("bad", ["sql", "=/a/sql", "sql="])
def test_a_lora_module_is_name_equals_path(bad, capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["generate", "hi", "--lora-modules", bad])
    assert "NAME=PATH" in capsys.readouterr().err


def test_controlplane_lora_flags():
    args = build_parser().parse_args(
        ["controlplane", "--lora-modules", "sql=/a/sql", "--allow-runtime-lora-updating", "--max-lora-rank", "64"]
    )
    assert args.lora_modules == [LoraRequest("sql", "/a/sql")]
    assert args.allow_runtime_lora_updating and args.max_lora_rank == 64
    assert not build_parser().parse_args(["controlplane"]).allow_runtime_lora_updating


def test_the_built_engine_serves_the_lora_modules_sim_backend_too():
    """`zoo agent --backend sim` with --lora-modules: the adapters reach the runner's (simulated) slots and the
    engine (loaded at start), as on torch and JAX."""
    from backends.builder import build_engine
    from zoo.agent_cmd import sim_engine_config_from_args

    args = build_parser().parse_args(
        ["agent", "--backend", "sim", "--gpu-profile", "h100-sxm", "--model", "sim:llama-3-8b",
         "--lora-modules", "sql=/a/sql", "--max-loras", "3"]
    )  # fmt: skip
    config, _ = sim_engine_config_from_args(args)
    engine = build_engine(config, progress=False)
    assert engine.runner.lora_config.max_loras == 3 and engine.scheduler_config.max_loras == 3
    assert [lora.name for lora in engine.list_loras()] == ["sql"]
    plain = build_parser().parse_args(
        ["agent", "--backend", "sim", "--gpu-profile", "h100-sxm", "--model", "sim:llama-3-8b"]
    )
    plain, _ = sim_engine_config_from_args(plain)
    assert build_engine(plain, progress=False).runner.lora_config is None
