"""What a node's hardware can do: a GPU datasheet table, a quick CPU measurement, and the power score.

Sources: /work/shared/calibration/README.md (datasheet figures, dense, no sparsity), except H100 PCIe,
which that table lacks (NVIDIA H100 PCIe datasheet: 2.0 TB/s HBM2e, 756 bf16 TFLOP/s dense). T4 has no
bf16: its fp16 figure (65 TFLOP/s) stands in. Memory is the nominal figure; ``describe_cuda_device``
reports what the device itself says.

Power score (higher is stronger; an A100-80GB is 1.0)::

    power_score = sqrt( (memory_bandwidth_gbps / 2039) * (peak_tflops / 312) )

the geometric mean of bandwidth (what decode is bound by) and compute (what prefill is bound by), each
relative to the A100-80GB SXM. It orders the table H200 (2.73) > H100 SXM (2.28) > H100 PCIe (1.54)
> A100-80GB (1.00) > A100-40GB (0.87) > L40S (0.70) > A10 (0.34) > L4 (0.24) > T4 (0.18).

torch is imported inside ``describe_cuda_device`` and ``measure_cpu`` only, never at module import.
"""

from __future__ import annotations

import math
import re
import time
from dataclasses import dataclass

from transport.messages import HardwareInfo

REFERENCE_BANDWIDTH_GBPS = 2039.0  # A100-80GB SXM
REFERENCE_TFLOPS = 312.0


@dataclass(frozen=True, slots=True)
class GpuSpec:
    profile: str  # --gpu-profile name
    gpu_type: str  # HardwareInfo.gpu_type
    memory_gib: float
    memory_bandwidth_gbps: float
    peak_tflops: float  # dense bf16 (fp16 on T4)
    compute_capability: str


GPU_TABLE: dict[str, GpuSpec] = {
    spec.profile: spec
    for spec in (
        GpuSpec("h200", "H200", 141.0, 4800.0, 989.0, "9.0"),
        GpuSpec("h100-sxm", "H100", 80.0, 3350.0, 989.0, "9.0"),
        GpuSpec("h100-pcie", "H100-PCIe", 80.0, 2000.0, 756.0, "9.0"),
        GpuSpec("a100-80gb", "A100-80GB", 80.0, 2039.0, 312.0, "8.0"),
        GpuSpec("a100-40gb", "A100-40GB", 40.0, 1555.0, 312.0, "8.0"),
        GpuSpec("l40s", "L40S", 48.0, 864.0, 362.0, "8.9"),
        GpuSpec("l4", "L4", 24.0, 300.0, 121.0, "8.9"),
        GpuSpec("a10", "A10", 24.0, 600.0, 125.0, "8.6"),
        GpuSpec("t4", "T4", 16.0, 320.0, 65.0, "7.5"),
    )
}


def power_score(hw: HardwareInfo) -> float:
    """Relative serving power (see the module docstring); 0 for a device with no figures."""
    bandwidth = max(hw.memory_bandwidth_gbps, 0.0) / REFERENCE_BANDWIDTH_GBPS
    compute = max(hw.peak_tflops, 0.0) / REFERENCE_TFLOPS
    return math.sqrt(bandwidth * compute)


def describe_hardware(engine_device: str, profile: str | None) -> HardwareInfo:
    """``profile`` (--gpu-profile) wins; else the CUDA table for a CUDA device; else measured on this CPU."""
    if profile is not None:
        return gpu_profile(profile)
    if engine_device.startswith("cuda"):
        index = int(engine_device.split(":")[1]) if ":" in engine_device else 0
        return describe_cuda_device(index)
    import torch

    return measure_cpu(torch.get_num_threads())


def gpu_profile(name: str) -> HardwareInfo:
    """The table's figures for ``--gpu-profile name`` (case-insensitive); ValueError listing valid names."""
    spec = GPU_TABLE.get(name.strip().lower())
    if spec is None:
        raise ValueError(f"unknown GPU profile {name!r}; valid profiles: {', '.join(GPU_TABLE)}")
    return _info(spec, f"profile:{spec.profile}", spec.gpu_type, spec.memory_gib)


def match_gpu_name(device_name: str, memory_gib: float | None = None) -> GpuSpec | None:
    """The table entry for a CUDA device name ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-40GB",
    "Tesla T4", ...), or None for a GPU the table does not know. ``memory_gib`` tells A100 40/80GB apart
    when the name does not."""
    tokens = set(re.split(r"[^A-Z0-9]+", device_name.upper()))
    if "H200" in tokens:
        return GPU_TABLE["h200"]
    if "H100" in tokens:
        if "NVL" in tokens:
            return None
        return GPU_TABLE["h100-pcie" if "PCIE" in tokens else "h100-sxm"]
    if "A100" in tokens:
        if "40GB" in tokens or ("80GB" not in tokens and memory_gib is not None and memory_gib < 60):
            return GPU_TABLE["a100-40gb"]
        return GPU_TABLE["a100-80gb"]
    for profile, token in (("l40s", "L40S"), ("l4", "L4"), ("a10", "A10"), ("t4", "T4")):
        if token in tokens:
            return GPU_TABLE[profile]
    return None


def describe_cuda_device(index: int = 0) -> HardwareInfo:
    """HardwareInfo of CUDA device ``index`` from the GPU table (memory as the device reports it).
    ValueError for a GPU the table lacks: pass --gpu-profile with the closest profile."""
    import torch

    props = torch.cuda.get_device_properties(index)
    memory_gib = props.total_memory / 2**30
    spec = match_gpu_name(props.name, memory_gib)
    if spec is None:
        raise ValueError(
            f"GPU {props.name!r} (cuda:{index}) is not in the GPU table; pass --gpu-profile with one of "
            f"{', '.join(GPU_TABLE)}"
        )
    return _info(spec, "gpu-table", spec.gpu_type, round(memory_gib, 2), device_name=props.name)


def measure_cpu(num_threads: int) -> HardwareInfo:
    """Measure this host's memory bandwidth and fp32 matrix-product throughput with ``num_threads``
    torch threads (< 1 s): best of 3 sums over a 128 MiB array (bytes read / s) and of 3 1024^3
    products (2 n^3 FLOP / s)."""
    if num_threads < 1:
        raise ValueError(f"num_threads must be >= 1, got {num_threads}")
    import torch

    previous_threads = torch.get_num_threads()
    torch.set_num_threads(num_threads)
    try:
        data = torch.ones(32 * 1024 * 1024, dtype=torch.float32)  # 128 MiB
        data.sum()
        read_s = _best_of(3, data.sum)
        bandwidth_gbps = data.numel() * 4 / read_s / 1e9
        n = 1024
        a, b = torch.randn(n, n), torch.randn(n, n)
        torch.mm(a, b)
        gemm_s = _best_of(3, lambda: torch.mm(a, b))
        peak_tflops = 2 * n**3 / gemm_s / 1e12
    finally:
        torch.set_num_threads(previous_threads)
    total = _host_memory_gib()
    return HardwareInfo(
        device_name=f"cpu: {_cpu_model_name()} ({num_threads} threads)",
        gpu_type="cpu",
        compute_capability=None,
        memory_gib=total,
        memory_bandwidth_gbps=round(bandwidth_gbps, 2),
        peak_tflops=round(peak_tflops, 4),
        source="measured",
    )


def _info(spec: GpuSpec, source: str, gpu_type: str, memory_gib: float, device_name: str = "") -> HardwareInfo:
    return HardwareInfo(
        device_name=device_name or f"{spec.gpu_type} (profile)",
        gpu_type=gpu_type,
        compute_capability=spec.compute_capability,
        memory_gib=memory_gib,
        memory_bandwidth_gbps=spec.memory_bandwidth_gbps,
        peak_tflops=spec.peak_tflops,
        source=source,
    )


def _best_of(num_runs: int, fn) -> float:
    best_s = math.inf
    for _ in range(num_runs):
        t0 = time.perf_counter()
        fn()
        best_s = min(best_s, time.perf_counter() - t0)
    return max(best_s, 1e-9)


def _cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine() or "unknown"


def _host_memory_gib() -> float:
    try:
        import psutil

        return round(psutil.virtual_memory().total / 2**30, 2)
    except ImportError:
        return 0.0
