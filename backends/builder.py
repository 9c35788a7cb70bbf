"""Builds an LLMEngine from an EngineConfig: the one place that picks a backend by name."""

from __future__ import annotations

from engine.clock import Clock
from engine.config import EngineConfig
from engine.llm_engine import LLMEngine

SIM_GPU_MEMORY_UTILIZATION = 0.9  # a simulated node's share of its GPU's memory when not given (vLLM's default)


def build_engine(config: EngineConfig, clock: Clock | None = None, progress: bool = True) -> LLMEngine:
    """Load the checkpoint, build the backend's runner, and wire them into an engine.

    Backend "sim" loads nothing: a ``sim:*`` model shape, a runner that sleeps each step's predicted time
    on ``config.tp`` x ``config.gpu_profile`` (paced: backends/sim/paced_runner.py), KV blocks from that
    GPU memory, and ``SimTokenizer`` (every generated token decodes to a placeholder, so no client mistakes
    a simulated answer for text).
    """
    if config.backend == "sim":
        from backends.sim.engine import build_sim_engine

        engine = build_sim_engine(
            config.model,
            config.gpu_profile,
            config.tp,
            scheduler_config=config.scheduler,
            cache_config=config.cache,
            clock=clock,
            lora_config=config.lora,
            gpu_memory_utilization=config.gpu_memory_utilization or SIM_GPU_MEMORY_UTILIZATION,
        )
        if config.speculative is not None:
            from backends.sim.spec_model import attach_sim_speculator

            attach_sim_speculator(engine, config.speculative, config.gpu_profile)
        for lora in config.lora_modules:
            engine.add_lora(lora)  # simulated: nothing is read (backends/sim/lora_cost.py)
        return engine
    from backends.checkpoint import load_checkpoint

    checkpoint = load_checkpoint(config.model)
    if config.backend == "torch":
        import torch

        from backends.torch import TorchModelRunner

        if config.num_threads is not None:
            torch.set_num_threads(config.num_threads)

        if config.tp > 1:  # rank 0 here, ranks 1..tp-1 in child processes (backends/torch/tp_serve.py)
            from backends.torch.tp_group import TPConfig
            from backends.torch.tp_serve import start_tp_runner

            tp = TPConfig(config.tp, config.tp_allreduce, config.tp_domain_size, config.tp_compression)
            runner = start_tp_runner(
                checkpoint, tp, config.dtype, config.device, config.num_threads, progress, seed=config.seed
            )
        else:
            runner = TorchModelRunner(
                checkpoint,
                dtype=config.dtype,
                device=config.device,
                progress=progress,
                attention_backend=config.attention_backend,
                kv_dtype=config.kv_dtype,
                cuda_graphs=config.cuda_graphs,
                lora_config=config.lora,
                cpu_decode_kernel=config.cpu_decode_kernel,
                huge_pages=config.huge_pages,
                seed=config.seed,
            )
    elif config.backend == "jax":
        if config.num_threads is not None:
            _limit_xla_cpu_threads(config.num_threads)
        from backends.jax import JaxModelRunner

        runner = JaxModelRunner(
            checkpoint, dtype=config.dtype, device=config.device, progress=progress, lora_config=config.lora,
            cpu_decode_kernel=config.cpu_decode_kernel, cpu_decode_threads=config.num_threads,
            huge_pages=config.huge_pages, seed=config.seed,
        )  # fmt: skip
    else:  # EngineConfig validated the name
        raise AssertionError(config.backend)
    config.scheduler.max_model_len = min(config.scheduler.max_model_len, runner.max_model_len)
    if config.gpu_memory_utilization is not None or config.kv_cache_memory_bytes is not None:
        from backends.kv_sizing import device_blocks

        config.cache.num_device_blocks = device_blocks(config, runner, checkpoint.config)  # from the device's memory
    if config.swap_space_bytes is not None:  # vLLM's --swap-space: host RAM in bytes, as blocks
        config.cache.num_host_blocks = config.swap_space_bytes // runner.kv_bytes_per_block(config.cache.block_size)
    from backends.grammar import LLGuidanceCompiler

    grammars = LLGuidanceCompiler(checkpoint.tokenizer, checkpoint.config.vocab_size)  # structured outputs
    engine = LLMEngine(runner, checkpoint.tokenizer, config.scheduler, config.cache, clock=clock, grammars=grammars)
    if config.speculative is not None:
        from backends.spec_builder import attach_speculator

        attach_speculator(engine, config.speculative, config.model)
    for lora in config.lora_modules:
        engine.add_lora(lora)  # a bad adapter fails the start-up, naming it
    return engine


def _limit_xla_cpu_threads(num_threads: int) -> None:
    """XLA reads its CPU thread settings from XLA_FLAGS when jax first starts a backend."""
    import os
    import sys

    if "jax" in sys.modules:
        return  # too late to change; the process's first backend already chose
    flags = os.environ.get("XLA_FLAGS", "")
    if num_threads == 1:
        flags += " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
    os.environ["XLA_FLAGS"] = flags.strip()
