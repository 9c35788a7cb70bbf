"""How many KV blocks a node's device gets, from its memory rather than a block count: vLLM's
``--gpu-memory-utilization`` and ``--kv-cache-memory-bytes`` (vllm/config/cache.py, vllm/v1/worker/gpu_worker.py
``determine_available_memory``).

    --kv-cache-memory-bytes N    N bytes of KV: N // (bytes of one block, all layers, K and V); any backend; more
                                 than the device has (a CPU's: the host's RAM) refused
    --gpu-memory-utilization U   this node may use U of its CUDA device's total memory: what is in use once the
                                 weights are loaded (the weights, the CUDA context, any other process's) and the
                                 activations' reserve come off U x total, the rest is KV

The rule is vLLM's; its activation figure is not. vLLM runs a dummy forward pass of ``max_num_batched_tokens`` and
reads the allocator's peak; here the reserve is worked out from the model's shapes (``activation_reserve_bytes``:
one step's largest buffers per token, the sampled rows' fp32 logits, times ``ACTIVATION_SAFETY``), so it is known
before the runner can run. Where the rule cannot apply the start-up stops saying which flag to give instead: a CPU
device (no device memory to share: give ``--num-device-blocks`` or ``--kv-cache-memory-bytes``), tensor parallelism
(each rank's share: ``--num-device-blocks``), the JAX backend (XLA preallocates its own pool: the bytes flag). A
simulated node takes the utilization (its GPU's memory, backends/sim/engine.py) and not the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.config import EngineConfig

ACTIVATION_SAFETY = 2.0  # the estimate's margin over the buffers it counts (allocator slack, fragmentation)
LOGIT_BYTES = 4  # fp32 logits of each sampled row


@dataclass(frozen=True, slots=True)
class DeviceMemory:
    total_bytes: int
    free_bytes: int  # once the weights are loaded


def cuda_memory(device: str) -> DeviceMemory:
    """The CUDA device's memory now (``torch.cuda.mem_get_info``)."""
    import torch

    free, total = torch.cuda.mem_get_info(torch.device(device))
    return DeviceMemory(total_bytes=int(total), free_bytes=int(free))


def _device_total(device: str) -> DeviceMemory:
    """The memory a KV byte budget must fit: the CUDA device's, or this host's RAM for a CPU device."""
    if device.startswith("cuda"):
        return cuda_memory(device)
    import psutil

    ram = psutil.virtual_memory()
    return DeviceMemory(total_bytes=int(ram.total), free_bytes=int(ram.available))


def activation_reserve_bytes(model: Any, max_num_batched_tokens: int, max_num_seqs: int, itemsize: int) -> int:
    """A step's activations at most, from the model's shapes (``model``: backends/checkpoint ModelConfig): per token
    the residual stream and its norm (2 x hidden), the attention's q, k, v and output (heads, kv heads, hidden), the
    MLP's gate, up and product (3 x intermediate); the sampled rows' fp32 logits; all times ``ACTIVATION_SAFETY``."""
    attention = (model.num_attention_heads + 2 * model.num_key_value_heads) * model.head_dim + model.hidden_size
    per_token = (2 * model.hidden_size + attention + 3 * model.intermediate_size) * itemsize
    logits = max_num_seqs * model.vocab_size * LOGIT_BYTES
    return int(ACTIVATION_SAFETY * (per_token * max_num_batched_tokens + logits))


def kv_budget_bytes(memory: DeviceMemory, utilization: float, activation_bytes: int) -> int:
    """vLLM's rule: ``utilization`` of the total, less what is in use now and the activations' reserve."""
    in_use = memory.total_bytes - memory.free_bytes
    return int(memory.total_bytes * utilization) - in_use - activation_bytes


def device_blocks(config: EngineConfig, runner: Any, model: Any, memory: DeviceMemory | None = None) -> int:
    """``config.cache.num_device_blocks`` as the memory flags size it (neither set: as configured). ``runner``: the
    built runner (its ``kv_bytes_per_block``); ``model``: its ModelConfig; ``memory``: the device's (None: read from
    CUDA when the utilization rule needs it). ValueError naming the flag when the rule cannot apply or leaves no
    block."""
    bytes_per_block = runner.kv_bytes_per_block(config.cache.block_size)
    if config.kv_cache_memory_bytes is not None:
        wanted = config.kv_cache_memory_bytes
        total = (memory or _device_total(config.device)).total_bytes
        if wanted > total:
            raise ValueError(f"--kv-cache-memory-bytes: {wanted:,} bytes is more than the device has ({_gib(total)})")
        return _at_least_one(wanted // bytes_per_block, "--kv-cache-memory-bytes", f"{wanted:,} bytes", bytes_per_block)
    utilization = config.gpu_memory_utilization
    if utilization is None:
        return config.cache.num_device_blocks
    if not config.device.startswith("cuda"):
        raise ValueError("--gpu-memory-utilization sizes a CUDA device's KV cache; on a CPU give --num-device-blocks "
                         "or --kv-cache-memory-bytes")  # fmt: skip
    if config.backend != "torch":
        raise ValueError("--gpu-memory-utilization: the JAX backend's XLA keeps its own memory pool; give "
                         "--kv-cache-memory-bytes")  # fmt: skip
    if config.tp > 1:
        raise ValueError("--gpu-memory-utilization is not worked out per rank under tensor parallelism yet; give "
                         "--num-device-blocks")  # fmt: skip
    memory = memory or cuda_memory(config.device)
    itemsize = 2 if config.dtype == "bfloat16" else 4
    activations = activation_reserve_bytes(
        model, config.scheduler.max_num_batched_tokens, config.scheduler.max_num_seqs, itemsize
    )
    budget = kv_budget_bytes(memory, utilization, activations)
    in_use = memory.total_bytes - memory.free_bytes
    what = (f"{utilization} of {_gib(memory.total_bytes)} less {_gib(in_use)} in use and {_gib(activations)} of "
            "activations")  # fmt: skip
    return _at_least_one(max(budget, 0) // bytes_per_block, "--gpu-memory-utilization", what, bytes_per_block)


def _at_least_one(num_blocks: int, flag: str, what: str, bytes_per_block: int) -> int:
    if num_blocks < 1:
        raise ValueError(f"{flag}: {what} leaves no room for one KV block ({bytes_per_block:,} bytes)")
    return num_blocks


def _gib(n: int) -> str:
    return f"{n / 2**30:.2f} GiB"
