"""The engine flags every command that builds an engine takes (``zoo generate``, ``zoo agent``, ``zoo bench``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

from engine.config import (
    ATTENTION_KERNELS,
    BACKENDS,
    HASH_ALGOS,
    KV_DTYPES,
    CacheConfig,
    EngineConfig,
    SchedulerConfig,
)
from engine.lora import LoraConfig, LoraRequest
from engine.stall_free import DEFAULT_STALL_FACTOR


def add_engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="GGUF file or Hugging Face directory (default: SmolLM2-135M-Instruct)")
    p.add_argument("--backend", default="torch", choices=sorted(BACKENDS), help="sim: a simulated GPU (--gpu-profile)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-threads", type=int, default=None, help="CPU threads for the backend (default: all)")
    p.add_argument("--num-device-blocks", type=int, default=1024, help="KV blocks on the device")
    p.add_argument("--num-host-blocks", type=int, default=1024, help="KV blocks in host RAM for swapping")
    p.add_argument(
        "--gpu-memory-utilization",
        type=parse_utilization,
        default=None,
        metavar="U",
        help="size the KV cache from the CUDA device's memory: this node uses U (0..1] of it, weights and "
        "activations included (vLLM's flag; backends/kv_sizing.py); overrides --num-device-blocks",
    )
    p.add_argument(
        "--swap-space",
        type=float,
        default=None,
        metavar="GIB",
        help="host RAM for swapped-out requests' KV, in GiB (vLLM's flag); overrides --num-host-blocks",
    )
    p.add_argument(
        "--enable-prefix-caching",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="reuse the KV of full blocks an earlier request computed (vLLM's flag; on by default, as vLLM's V1)",
    )
    p.add_argument(
        "--preemption-mode",
        choices=["swap", "recompute"],
        default="swap",
        help="a request preempted under KV pressure: its KV swapped to host RAM (default), or dropped and recomputed",
    )
    p.add_argument(
        "--kv-cache-memory-bytes",
        type=parse_bytes,
        default=None,
        metavar="N",
        help="this many bytes of KV on the device (e.g. 8Gi, 500M; vLLM's flag); overrides --num-device-blocks",
    )
    p.add_argument("--block-size", type=int, default=16)
    p.add_argument(
        "--prefix-hash-algo",
        default="sha256",
        choices=list(HASH_ALGOS),
        help="how prefix-cache blocks are named (vLLM's --prefix-caching-hash-algo): sha256 is collision-resistant "
        "(tenants share the fleet); xxhash is ~5x faster to hash (one tenant)",
    )
    p.add_argument("--max-num-seqs", type=int, default=64)
    p.add_argument(
        "--max-num-batched-tokens",
        type=parse_batched_tokens,
        default=512,
        help="step token budget, or 'auto' (zoo agent: sized from its start-up profile and --tpot-slo, "
        f"Sarathi-Serve's rule, engine/step_budget.py; elsewhere: {AUTO_BUILD_TOKENS})",
    )
    p.add_argument(
        "--tp-allreduce",
        default="flat",
        choices=["flat", "hierarchical", "sharded"],
        help="the all-reduce of --tp > 1 (torch)",
    )
    p.add_argument("--tp-domain-size", type=int, default=0, help="ranks per fast domain (0: all)")
    p.add_argument(
        "--tp-compression", default="none", choices=["none", "bf16", "int8"], help="slow-link format (not flat)"
    )
    p.add_argument(
        "--attention-backend",
        default=None,
        choices=list(ATTENTION_KERNELS),
        help="force an attention kernel (default: the dispatch table's choice for the device)",
    )
    p.add_argument("--kv-dtype", "--kv-cache-dtype", default="auto", choices=list(KV_DTYPES),
                   help="fp8_e4m3: FP8 KV cache (SM89/SM90+); --kv-cache-dtype is vLLM's name")  # fmt: skip
    p.add_argument("--no-cuda-graphs", "--enforce-eager", dest="cuda_graphs", action="store_false",
                   help="run decode steps eagerly (--enforce-eager: vLLM's name)")  # fmt: skip
    p.add_argument(
        "--no-cpu-decode-kernel",
        dest="cpu_decode_kernel",
        action="store_false",
        help="CPU fp32: decode small batches with torch ops, not the C decode kernel",
    )
    p.add_argument(
        "--no-huge-pages",
        dest="huge_pages",
        action="store_false",
        help="CPU: keep the weights on the pages they were loaded on (default: moved onto transparent huge pages)",
    )
    add_lora_args(p)
    p.add_argument(
        "--stall-factor",
        type=parse_stall_factor,
        default=DEFAULT_STALL_FACTOR,
        help="stall-free batching: a step's prefill chunk keeps its decode rows within this factor of their "
        f"decode-only step time (engine/stall_free.py; default {DEFAULT_STALL_FACTOR:g}; 0: the token budget only)",
    )


def add_lora_args(p: argparse.ArgumentParser) -> None:
    """vLLM's LoRA flags: --enable-lora, --lora-modules name=path ..., --max-loras, --max-lora-rank, --max-cpu-loras."""
    p.add_argument("--enable-lora", action="store_true", help="serve LoRA adapters (implied by --lora-modules)")
    p.add_argument(
        "--lora-modules",
        nargs="+",
        type=parse_lora_module,
        default=[],
        metavar="NAME=PATH",
        help="PEFT LoRA adapters to serve from the start; a request selects one by its name as `model`",
    )
    p.add_argument("--max-loras", type=int, default=8, help="LoRA device slots (distinct adapters per step)")
    p.add_argument("--max-lora-rank", type=int, default=16, help="largest LoRA rank accepted")
    p.add_argument("--max-cpu-loras", type=int, default=None, help="adapters kept in host RAM (default: all)")


AUTO = "auto"
AUTO_BUILD_TOKENS = 2048  # `auto`: the engine is built with this budget (the ceiling), the agent lowers it


def int_at_least(minimum: int, what: str = "an integer") -> Callable[[str], int]:
    """An argparse ``type``: an integer >= ``minimum`` (``what``: the value's name in the error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be >= {minimum}, got {value}")
        return value

    return parse


_BYTE_UNITS = {"": 1, "k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "ki": 2**10, "mi": 2**20, "gi": 2**30,
               "ti": 2**40}  # fmt: skip


def parse_bytes(text: str) -> int:
    """A byte count: an integer with an optional unit (k, M, G, T: powers of 1000; Ki, Mi, Gi, Ti: of 1024)."""
    number = text.rstrip("kKmMgGtTiIbB")
    unit = text[len(number) :].lower().removesuffix("b")
    try:
        value = int(number) * _BYTE_UNITS[unit]
    except (ValueError, KeyError):
        raise argparse.ArgumentTypeError(f"a byte count like 8Gi or 500M, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"a byte count >= 1, got {text!r}")
    return value


def swap_space_bytes(args: argparse.Namespace) -> int | None:
    """``--swap-space GIB`` in bytes (None: not given); ValueError for a size that is not a number >= 0."""
    gib = getattr(args, "swap_space", None)
    if gib is None:
        return None
    if not 0 <= gib < math.inf:
        raise ValueError(f"--swap-space must be a number of GiB >= 0, got {gib}")
    return int(gib * 2**30)


def parse_utilization(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 < value <= 1:  # NaN fails too
        raise argparse.ArgumentTypeError(f"a fraction in (0, 1], got {text!r}")
    return value


def parse_batched_tokens(text: str) -> int | str:
    return AUTO if text == AUTO else int_at_least(1, "a number of tokens or 'auto'")(text)


def batched_tokens(args: argparse.Namespace) -> int:
    """The budget an engine is built with: ``auto`` builds with its ceiling (the agent sizes it after profiling)."""
    value = args.max_num_batched_tokens
    return AUTO_BUILD_TOKENS if value == AUTO else value


def parse_lora_module(text: str) -> LoraRequest:
    name, sep, path = text.partition("=")
    if not sep or not name or not path:
        raise argparse.ArgumentTypeError(f"--lora-modules takes NAME=PATH, got {text!r}")
    return LoraRequest(name, path)


def lora_config_from_args(args: argparse.Namespace) -> LoraConfig | None:
    if not (getattr(args, "enable_lora", False) or getattr(args, "lora_modules", None)):
        return None
    return LoraConfig(max_loras=args.max_loras, max_lora_rank=args.max_lora_rank, max_cpu_loras=args.max_cpu_loras)


def engine_config_from_args(args: argparse.Namespace) -> EngineConfig:
    """With ``--speculative`` (zoo generate, zoo agent: zoo/spec_args.py) the engine speculates."""
    speculative = None
    if getattr(args, "speculative", None):
        from zoo.spec_args import spec_config_from_args

        speculative = spec_config_from_args(args)
    return EngineConfig(
        speculative=speculative,
        model=args.model,
        backend=args.backend,
        dtype=args.dtype,
        device=args.device,
        num_threads=args.num_threads,
        tp=getattr(args, "tp", 1),  # `zoo agent --tp N`
        tp_allreduce=args.tp_allreduce,
        tp_domain_size=args.tp_domain_size,
        tp_compression=args.tp_compression,
        scheduler=SchedulerConfig(
            max_num_batched_tokens=batched_tokens(args),
            max_num_seqs=args.max_num_seqs,
            stall_factor=getattr(args, "stall_factor", DEFAULT_STALL_FACTOR) or None,
            preemption_mode=getattr(args, "preemption_mode", "swap"),
        ),
        cache=CacheConfig(
            block_size=args.block_size,
            num_device_blocks=args.num_device_blocks,
            num_host_blocks=args.num_host_blocks,
            enable_prefix_caching=getattr(args, "enable_prefix_caching", True),
            prefix_hash_algo=args.prefix_hash_algo,
        ),
        attention_backend=args.attention_backend,
        kv_dtype=args.kv_dtype,
        cuda_graphs=args.cuda_graphs,
        cpu_decode_kernel=args.cpu_decode_kernel,
        huge_pages=getattr(args, "huge_pages", True),
        seed=getattr(args, "engine_seed", 0),  # `zoo agent --seed` (zoo generate's --seed is its request's)
        gpu_memory_utilization=getattr(args, "gpu_memory_utilization", None),
        kv_cache_memory_bytes=getattr(args, "kv_cache_memory_bytes", None),
        swap_space_bytes=swap_space_bytes(args),
        lora=lora_config_from_args(args),
        lora_modules=list(getattr(args, "lora_modules", None) or []),
    )


def parse_stall_factor(text: str) -> float:
    """``--stall-factor``: a number > 1, or 0 (off)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--stall-factor must be a number, got {text!r}") from None
    if value != 0 and not value > 1:  # NaN fails both
        raise argparse.ArgumentTypeError(f"--stall-factor must be > 1 (or 0: off), got {text!r}")
    return value
