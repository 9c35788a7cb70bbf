"""Explicit, validated configuration of the engine core (one dataclass per component)."""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # an annotation only: bench/gpu_check.py imports this module where msgspec is absent
    from engine.spec.spec_config import SpecDecodeConfig

from engine.lora import LoraConfig, LoraRequest


class PreemptionMode(StrEnum):
    SWAP = "swap"  # move the victim's KV blocks to host RAM, resume them later (default)
    RECOMPUTE = "recompute"  # drop the victim's KV blocks, recompute its tokens later


HASH_ALGOS = ("sha256", "xxhash")  # how full KV blocks are named for prefix caching (engine/kv/block_hash.py)


def check_hash_algo(algo: str) -> str:
    """``algo`` if it names a chain algorithm (``HASH_ALGOS``) usable here, else a ValueError that says why."""
    if algo not in HASH_ALGOS:
        raise ValueError(f"prefix hash algorithm must be one of {list(HASH_ALGOS)}, got {str(algo)[:64]!r}")
    if algo == "xxhash" and importlib.util.find_spec("xxhash") is None:
        raise ValueError("prefix hash algorithm 'xxhash' needs the xxhash package, which is not importable here")
    return algo


@dataclass(slots=True)
class CacheConfig:
    """Paged KV cache.

    block_size: tokens per block.
    num_device_blocks: KV blocks on the accelerator (on a CPU host: in the runner's main tensors).
    num_host_blocks: KV blocks in host RAM for swapped-out requests (0 disables swapping).
    enable_prefix_caching: reuse full blocks whose token-hash chain matches an earlier request.
    remote_swap: the REMOTE tier (KV of preempted requests held by a peer, engine/kv/remote_tier.py): "off";
        "fallback": when host RAM cannot take a victim (instead of recomputing it); "prefer": before host RAM.
        Used only while the engine has a remote mover (an agent with peers); otherwise it recomputes.
    max_remote_requests: requests whose KV may be remote at once.
    prefix_hash_algo: how full blocks are named for prefix caching (engine/kv/block_hash.py): "sha256" (the
        default: collision-resistant, for a fleet shared by tenants) or "xxhash" (~5x faster to hash, for one
        tenant or a simulation); vLLM's --prefix-caching-hash-algo. The node says it in its hello.
    """

    block_size: int = 16
    num_device_blocks: int = 2048
    num_host_blocks: int = 2048
    enable_prefix_caching: bool = True
    remote_swap: str = "off"
    max_remote_requests: int = 256
    prefix_hash_algo: str = "sha256"

    def __post_init__(self) -> None:
        check_hash_algo(self.prefix_hash_algo)
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two >= 1, got {self.block_size}")
        if self.num_device_blocks < 1:
            raise ValueError(f"num_device_blocks must be >= 1, got {self.num_device_blocks}")
        if self.num_host_blocks < 0:
            raise ValueError(f"num_host_blocks must be >= 0, got {self.num_host_blocks}")
        if self.remote_swap not in REMOTE_SWAP_MODES:
            raise ValueError(f"remote_swap must be one of {list(REMOTE_SWAP_MODES)}, got {self.remote_swap!r}")
        if self.max_remote_requests < 1:
            raise ValueError(f"max_remote_requests must be >= 1, got {self.max_remote_requests}")


@dataclass(slots=True)
class SchedulerConfig:
    """Continuous batching.

    max_num_batched_tokens: token budget of one step (decode tokens + prefill chunks).
    max_num_seqs: cap on running sequences in one step.
    max_model_len: longest prompt + output accepted.
    enable_chunked_prefill: split long prompts across steps to fit the token budget.
    preemption_mode: what to do with a victim under KV pressure.
    max_loras: distinct LoRA adapters the running set may hold (the runner's device slots); 0 = no limit.
    stall_factor: stall-free batching (engine/stall_free.py): a step with decode rows carries at most the prefill
        tokens that keep its predicted time within stall_factor x their decode-only step; None = the budget only.
    """

    max_num_batched_tokens: int = 512
    max_num_seqs: int = 64
    max_model_len: int = 8192
    enable_chunked_prefill: bool = True
    preemption_mode: PreemptionMode = PreemptionMode.SWAP
    max_loras: int = 0
    stall_factor: float | None = None

    def __post_init__(self) -> None:
        if self.max_num_batched_tokens < 1:
            raise ValueError(f"max_num_batched_tokens must be >= 1, got {self.max_num_batched_tokens}")
        if self.max_num_seqs < 1:
            raise ValueError(f"max_num_seqs must be >= 1, got {self.max_num_seqs}")
        if self.max_model_len < 1:
            raise ValueError(f"max_model_len must be >= 1, got {self.max_model_len}")
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                "max_num_batched_tokens must be >= max_model_len when chunked prefill is off "
                f"({self.max_num_batched_tokens} < {self.max_model_len})"
            )
        self.preemption_mode = PreemptionMode(self.preemption_mode)
        if self.max_loras < 0:
            raise ValueError(f"max_loras must be >= 0, got {self.max_loras}")
        if self.stall_factor is not None and not self.stall_factor > 1:
            raise ValueError(f"stall_factor must be > 1 (or None), got {self.stall_factor}")


@dataclass(slots=True)
class EngineConfig:
    """One node's engine: which model, on which backend, with which core settings.

    model: a GGUF file or a Hugging Face directory; None = the embedded default (SmolLM2-135M-Instruct).
        With backend "sim": a simulated model's name (``sim:llama-3-8b``, backends/sim/model_shapes.py).
    backend: "torch" or "jax" (same checkpoint, same paged KV layout, interchangeable per node), or
        "sim": no checkpoint, a runner that sleeps each step's predicted time on ``tp`` x ``gpu_profile``.
    dtype: "float32" or "bfloat16" (weights and KV cache).
    device: "cpu", "cuda", "cuda:N".
    num_threads: CPU threads for the backend's kernels; None = the framework's default. Set it when
        several agents share one host, so their thread pools do not oversubscribe the cores.
    gpu_profile / tp: the simulated node (backend "sim" only; a backends/gpu_table.py profile name and
        a power-of-two GPU count). Its KV blocks follow from the GPU memory, not ``cache.num_device_blocks``.
        With backend "torch", ``tp`` > 1 splits the model over that many local processes (tensor parallelism,
        backends/torch/tp_serve.py; the model's KV heads must divide by it).
    tp_allreduce / tp_domain_size / tp_compression: the TP all-reduce ("flat" | "hierarchical" | "sharded"),
        ranks per fast domain (0 = all), and the slow link's compression ("none" | "bf16" | "int8"; not flat).
    attention_backend: force an attention kernel (ATTENTION_KERNELS; torch backend); None = the dispatch
        table's choice for the device (backends/kernel_dispatch.py).
    kv_dtype: "auto" (the model's dtype) or "fp8_e4m3" (an FP8 KV cache; SM89 / SM90+, torch backend).
    cuda_graphs: capture decode steps as CUDA graphs per batch bucket (torch on CUDA); False = eager.
    cpu_decode_kernel: torch on a CPU in fp32: steps of at most 4 plain decode rows in the C decode kernel
        (backends/torch/cpu_decode.py); False = torch ops. jax on a CPU in fp32: the same kernel as an XLA FFI
        custom call (backends/jax/cpu_kernel.py); False = the pure-XLA programs.
    huge_pages: on a CPU, the weights on transparent huge pages (backends/huge_pages.py); False = as loaded.
    gpu_memory_utilization / kv_cache_memory_bytes: size the device's KV blocks from its memory instead of
        ``cache.num_device_blocks`` (vLLM's flags; backends/kv_sizing.py); at most one of them.
    swap_space_bytes: host RAM for swapped-out KV instead of ``cache.num_host_blocks`` (vLLM's --swap-space).
    speculative: speculative decoding (engine/spec/), or None for plain decoding.
    """

    model: str | None = None
    backend: str = "torch"
    dtype: str = "float32"
    device: str = "cpu"
    num_threads: int | None = None
    gpu_profile: str | None = None
    tp: int = 1
    tp_allreduce: str = "flat"
    tp_domain_size: int = 0
    tp_compression: str = "none"
    scheduler: SchedulerConfig = field(default_factory=SchedulerConfig)
    cache: CacheConfig = field(default_factory=CacheConfig)
    attention_backend: str | None = None
    kv_dtype: str = "auto"
    cuda_graphs: bool = True
    cpu_decode_kernel: bool = True
    huge_pages: bool = True
    seed: int = 0  # the sampler's generator for requests without a seed of their own (vLLM's --seed)
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    swap_space_bytes: int | None = None
    speculative: SpecDecodeConfig | None = None
    lora: LoraConfig | None = None  # serve LoRA adapters (torch, jax); None = the base model only
    lora_modules: list[LoraRequest] = field(default_factory=list)  # adapters loaded at start

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {sorted(BACKENDS)}, got {self.backend!r}")
        if self.attention_backend is not None and self.attention_backend not in ATTENTION_KERNELS:
            raise ValueError(
                f"attention_backend must be one of {list(ATTENTION_KERNELS)}, got {self.attention_backend!r}"
            )
        if self.kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {list(KV_DTYPES)}, got {self.kv_dtype!r}")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {sorted(DTYPES)}, got {self.dtype!r}")
        if not 0 <= self.seed < 2**63:
            raise ValueError(f"seed must be in [0, 2**63), got {self.seed}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads must be >= 1, got {self.num_threads}")
        if not (self.device == "cpu" or self.device == "cuda" or self.device.startswith("cuda:")):
            raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {self.device!r}")
        if self.tp < 1 or (self.backend == "sim" and self.tp & (self.tp - 1)):
            raise ValueError(f"tp must be >= 1 (a power of two on backend 'sim'), got {self.tp}")
        if self.backend == "sim":
            if self.gpu_profile is None:
                raise ValueError("backend 'sim' needs a gpu_profile (the simulated GPU)")
            if not (self.model or "").startswith(SIM_PREFIX):
                raise ValueError(f"backend 'sim' serves simulated models named {SIM_PREFIX}..., got {self.model!r}")
        elif self.tp != 1 and self.backend != "torch":
            raise ValueError(f"tp > 1 runs on backend 'torch' (or 'sim'), got tp={self.tp} on {self.backend!r}")
        if self.lora_modules and self.lora is None:
            raise ValueError("lora_modules need LoRA enabled (a LoraConfig)")
        if self.lora is not None and self.tp > 1:
            raise ValueError("LoRA adapters are not served under tensor parallelism (tp > 1) yet")
        if self.gpu_memory_utilization is not None and self.kv_cache_memory_bytes is not None:
            raise ValueError("give gpu_memory_utilization or kv_cache_memory_bytes, not both")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {self.gpu_memory_utilization}")
        if self.kv_cache_memory_bytes is not None and self.kv_cache_memory_bytes < 1:
            raise ValueError(f"kv_cache_memory_bytes must be >= 1, got {self.kv_cache_memory_bytes}")
        if self.swap_space_bytes is not None and self.swap_space_bytes < 0:
            raise ValueError(f"swap_space_bytes must be >= 0, got {self.swap_space_bytes}")
        if self.kv_cache_memory_bytes is not None and self.backend == "sim":
            raise ValueError("a simulated node's KV follows its GPU's memory: give gpu_memory_utilization")
        if self.lora is not None and self.backend == "sim":
            raise ValueError("LoRA adapters are served by the torch and jax backends, not 'sim'")


BACKENDS = frozenset({"torch", "jax", "sim"})
SIM_PREFIX = "sim:"  # the name of every simulated model starts so (backends/sim/model_shapes.py)
DTYPES = frozenset({"float32", "bfloat16"})
ATTENTION_KERNELS = ("gather_sdpa", "triton_paged", "flash_sdpa")  # backends/kernel_dispatch.py's table
KV_DTYPES = ("auto", "fp8_e4m3")  # auto = the model's dtype
REMOTE_SWAP_MODES = ("off", "fallback", "prefer")  # CacheConfig.remote_swap
