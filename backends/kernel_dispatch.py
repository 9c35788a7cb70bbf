"""The kernel dispatch table: which attention kernel, KV dtype and decode mode a device gets.

Chosen once at start-up from the device kind and CUDA compute capability (a pure function of them, so
every row of the table is tested without a GPU), then logged, sent in the node's hello and shown in
``zoo top``'s detail view. A flag (``--attention-backend``) forces a kernel; ``--kv-dtype fp8_e4m3``
asks for an FP8 KV cache; ``--no-cuda-graphs`` keeps decode eager::

    device / SM            examples          attention      prefill (fresh prompt)   decode              graphs
    cpu                    -                 gather_sdpa    SDPA (causal)            gather + SDPA       no
    cuda  < SM75           V100, P100        gather_sdpa    SDPA                     gather + SDPA       no
    cuda  SM75             T4                triton_paged   Triton paged kernel      Triton paged        yes
    cuda  SM80, SM86, SM87 A100, A10         flash_sdpa     SDPA (FlashAttention-2)  Triton paged        yes
    cuda  SM89             L4, L40S          triton_paged   Triton paged kernel      Triton paged        yes
    cuda  SM90 and newer   H100, H200        flash_sdpa     SDPA (FlashAttention)    Triton paged        yes

FlashAttention through SDPA serves fresh prompts on SM80+ (its kernels need SM80, so a T4 gets the
Triton kernel throughout; so does SM89, where the Triton kernel reads an FP8 cache natively and SDPA has
no FP8 path: one kernel for both phases keeps the cache format single there). Decode always reads
the paged cache with the Triton kernel on CUDA: its metadata lives in fixed-shape buffers, so the
decode step can be captured in a CUDA graph. FP8 (e4m3) KV is offered where the hardware converts
FP8 natively: SM89 and SM90+. Without Triton, a CUDA device falls back to ``gather_sdpa``.

Pure Python: no torch import (``backends/torch/attention.py`` turns a plan into a backend object).
"""

from __future__ import annotations

from dataclasses import dataclass

from engine.config import ATTENTION_KERNELS, KV_DTYPES

__all__ = ["ATTENTION_KERNELS", "KV_DTYPES", "KernelPlan", "choose_kernels"]
FP8_MIN_CAPABILITY = (8, 9)
TRITON_MIN_CAPABILITY = (7, 5)


@dataclass(frozen=True, slots=True)
class KernelPlan:
    """What one device runs. attention: a name of ATTENTION_KERNELS; kv_dtype: one of KV_DTYPES;
    cuda_graphs: decode steps are captured per batch bucket and replayed; reason: why, in words."""

    device: str  # "cpu" | "cuda SM89"
    attention: str
    kv_dtype: str
    cuda_graphs: bool
    reason: str

    def summary(self) -> str:
        """One line for logs, the hello and ``zoo top``: ``flash_sdpa kv=auto graphs=on (cuda SM90)``."""
        graphs = "on" if self.cuda_graphs else "off"
        return f"{self.attention} kv={self.kv_dtype} graphs={graphs} ({self.device})"


def choose_kernels(
    device_type: str,
    capability: tuple[int, int] | None = None,
    *,
    attention: str | None = None,
    kv_dtype: str = "auto",
    cuda_graphs: bool = True,
    triton_available: bool = True,
    triton_interpret: bool = False,
) -> KernelPlan:
    """The plan for a device (``device_type`` "cpu" or "cuda"; ``capability`` (major, minor) on CUDA).

    attention: force a kernel (ValueError for an unknown name or one the device cannot run).
    kv_dtype: "fp8_e4m3" only on SM89 / SM90+ with a Triton decode kernel (ValueError elsewhere).
    cuda_graphs: False keeps decode eager; graphs also need a kernel with static metadata (not gather).
    triton_available / triton_interpret: whether triton imports, and whether it runs on CPU tensors
        (``TRITON_INTERPRET=1``, the tests' way of forcing ``triton_paged`` on a CPU).
    """
    if device_type not in ("cpu", "cuda"):
        raise ValueError(f"device type must be 'cpu' or 'cuda', got {device_type!r}")
    if attention is not None and attention not in ATTENTION_KERNELS:
        raise ValueError(f"unknown attention kernel {attention!r}; have {', '.join(ATTENTION_KERNELS)}")
    if kv_dtype not in KV_DTYPES:
        raise ValueError(f"unknown kv dtype {kv_dtype!r}; have {', '.join(KV_DTYPES)}")
    if device_type == "cuda":
        if capability is None:
            raise ValueError("a CUDA device needs its compute capability")
        device = f"cuda SM{capability[0]}{capability[1]}"
        name, reason = _table(capability, triton_available)
    else:
        device = "cpu"
        name, reason = "gather_sdpa", "CPU: gather the blocks, then SDPA"
    if attention is not None and attention != name:
        name, reason = attention, "forced by flag"
        if name != "gather_sdpa" and not (triton_available and (device_type == "cuda" or triton_interpret)):
            raise ValueError(f"{name} needs triton on a CUDA device (or TRITON_INTERPRET=1 on a CPU)")
        if name == "flash_sdpa" and device_type == "cuda" and capability < (8, 0):
            raise ValueError(f"flash_sdpa needs SM80 or newer, this device is {device}")
    if kv_dtype == "fp8_e4m3":
        if device_type != "cuda" or capability < FP8_MIN_CAPABILITY:
            raise ValueError(f"an FP8 KV cache needs SM89 or newer (L4, L40S, H100, H200), this device is {device}")
        if name == "gather_sdpa":
            raise ValueError("an FP8 KV cache needs a Triton decode kernel (triton_paged or flash_sdpa)")
    graphs = cuda_graphs and device_type == "cuda" and name != "gather_sdpa"
    return KernelPlan(device, name, kv_dtype, graphs, reason)


def _table(capability: tuple[int, int], triton_available: bool) -> tuple[str, str]:
    if capability < TRITON_MIN_CAPABILITY:
        return "gather_sdpa", "before SM75: no Triton kernel, gather + SDPA"
    if not triton_available:
        return "gather_sdpa", "triton is not installed: gather + SDPA"
    if capability == (7, 5):
        return "triton_paged", "SM75 (T4): no FlashAttention; Triton paged kernel throughout"
    if capability == (8, 9):
        return "triton_paged", "SM89 (L4, L40S): Triton paged kernel throughout"
    return "flash_sdpa", "SM80+/SM90+: FlashAttention (SDPA) for prompts, Triton paged kernel for decode"
