"""The agent's hardware probe: what this host's device can do, from the GPU table or measured.

``describe_hardware`` picks: a ``--gpu-profile`` (the table's figures), a CUDA device (matched by name
against backends/gpu_table.py, memory as the device reports it), or this CPU, measured (memory bandwidth
and fp32 matrix-product throughput, < 1 s). It does I/O and takes time: the agent calls it once, at start-up,
in a worker thread.

torch is imported inside the functions that need it, never at module import.
"""

from __future__ import annotations

import math
import time

from backends.gpu_table import GPU_TABLE, gpu_info, gpu_profile, match_gpu_name
from transport.messages import HardwareInfo


def describe_hardware(engine_device: str, profile: str | None) -> HardwareInfo:
    """``profile`` (--gpu-profile) wins; else the CUDA table for a CUDA device; else measured on this CPU."""
    if profile is not None:
        return gpu_profile(profile)
    if engine_device.startswith("cuda"):
        index = int(engine_device.split(":")[1]) if ":" in engine_device else 0
        return describe_cuda_device(index)
    import torch

    return measure_cpu(torch.get_num_threads())


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
    return gpu_info(spec, "gpu-table", spec.gpu_type, round(memory_gib, 2), device_name=props.name)


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
