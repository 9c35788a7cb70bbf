"""Builds an LLMEngine from an EngineConfig: the one place that picks a backend by name."""

from __future__ import annotations

from controlplane.engine.clock import Clock
from controlplane.engine.config import EngineConfig
from controlplane.engine.llm_engine import LLMEngine


def build_engine(config: EngineConfig, clock: Clock | None = None, progress: bool = True) -> LLMEngine:
    """Load the checkpoint, build the backend's runner, and wire them into an engine."""
    from backends.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(config.model)
    if config.backend == "torch":
        from backends.torch import TorchModelRunner

        runner = TorchModelRunner(checkpoint, dtype=config.dtype, device=config.device, progress=progress)
    elif config.backend == "jax":
        from backends.jax import JaxModelRunner

        runner = JaxModelRunner(checkpoint, dtype=config.dtype, device=config.device, progress=progress)
    else:  # EngineConfig validated the name
        raise AssertionError(config.backend)
    config.scheduler.max_model_len = min(config.scheduler.max_model_len, runner.max_model_len)
    return LLMEngine(runner, checkpoint.tokenizer, config.scheduler, config.cache, clock=clock)
