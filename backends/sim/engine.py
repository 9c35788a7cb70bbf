"""A simulated node's engine (an agent serving ``sim:*`` models, or a test on a manual clock).

    engine = build_sim_engine("sim:llama-3-8b", "l4", tp=1, scheduler_config=..., realtime=True)

In real time the runner keeps the simulated GPU's pace (paced_runner.py); otherwise it only predicts each
step's time. KV blocks follow from the GPU memory (the cache config's ``num_device_blocks`` is replaced by
it unless ``keep_cache_blocks``). ``SimTokenizer`` stands in for a
real tokenizer: one id per whitespace-separated word (a stable hash into the vocabulary), and every
generated id decodes to the same placeholder word, so no client mistakes the output for text.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import replace

from backends.sim.cost_model import NodeHardware
from backends.sim.model_shapes import sim_model
from backends.sim.paced_runner import DEFAULT_MAX_CATCH_UP_S, PacedRunner
from backends.sim.runner import SimModelRunner
from backends.tool_prompt_formats import fold_tools
from engine.clock import Clock
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.lora import LoraConfig

PLACEHOLDER = " sim"
_FIRST_WORD_ID = 10


class SimTokenizer:
    def __init__(self, vocab_size: int, eos_token_id: int | None) -> None:
        self.vocab_size = vocab_size
        self.eos_token_id = eos_token_id

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        span = self.vocab_size - _FIRST_WORD_ID
        return [_FIRST_WORD_ID + zlib.crc32(word.encode()) % span for word in text.split()]

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return PLACEHOLDER * sum(1 for i in ids if not (skip_special_tokens and i == self.eos_token_id))

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        template_kwargs: dict | None = None,  # a fixed template: it reads no variable
        tool_format: str = "hermes",  # how tools are written in (backends/tool_prompt_formats.py)
    ) -> str:
        text = "\n".join(f"{m['role']}: {m['content']}" for m in fold_tools(messages, tools, tool_format))
        return text + ("\nassistant:" if add_generation_prompt else "")


def build_sim_engine(
    model: str,
    gpu_profile: str,
    tp: int = 1,
    *,
    scheduler_config: SchedulerConfig | None = None,
    cache_config: CacheConfig | None = None,
    realtime: bool = True,
    clock: Clock | None = None,
    gpu_memory_utilization: float = 0.9,
    keep_cache_blocks: bool = False,
    max_catch_up_s: float = DEFAULT_MAX_CATCH_UP_S,
    detokenize: bool = True,
    hardware: NodeHardware | None = None,
    lora_config: LoraConfig | None = None,
) -> LLMEngine:
    """``hardware``, when given, is the node (TP across hosts, all-reduce kind) instead of gpu_profile x tp;
    ``lora_config``: serve LoRA adapters (simulated slots, backends/sim/lora_cost.py)."""
    config = sim_model(model)
    cache_config = cache_config or CacheConfig()
    hardware = hardware or NodeHardware(gpu_profile, tp)
    runner = SimModelRunner(config, hardware, block_size=cache_config.block_size, lora_config=lora_config)
    scheduler_config = scheduler_config or SchedulerConfig()
    scheduler_config.max_model_len = min(scheduler_config.max_model_len, runner.max_model_len)
    if not keep_cache_blocks:
        num_blocks = runner.num_device_blocks(cache_config.block_size, gpu_memory_utilization)
        if num_blocks < 1:
            raise ValueError(f"{config.name} does not fit on {tp} x {gpu_profile}")
        cache_config = replace(cache_config, num_device_blocks=num_blocks)
    tokenizer = SimTokenizer(config.vocab_size, config.eos_token_id)
    paced = PacedRunner(runner, max_catch_up_s) if realtime else runner
    return LLMEngine(paced, tokenizer, scheduler_config, cache_config, clock=clock, detokenize=detokenize)
