"""The GPU datasheet table and the power score: what each GPU type can do, on paper.

Sources: /work/shared/calibration/README.md (datasheet figures, dense, no sparsity), except H100 PCIe,
which that table lacks (NVIDIA H100 PCIe datasheet: 2.0 TB/s HBM2e, 756 bf16 TFLOP/s dense). T4 has no
bf16: its fp16 figure (65 TFLOP/s) stands in. Memory is the nominal figure; the agent's probe
(agent/hardware_probe.py) reports what a device itself says.

Power score (higher is stronger; an A100-80GB is 1.0)::

    power_score = sqrt( (memory_bandwidth_gbps / 2039) * (peak_tflops / 312) )

the geometric mean of bandwidth (what decode is bound by) and compute (what prefill is bound by), each
relative to the A100-80GB SXM. It orders the table H200 (2.73) > H100 SXM (2.28) > H100 PCIe (1.54)
> A100-80GB (1.00) > A100-40GB (0.87) > L40S (0.70) > A10 (0.34) > L4 (0.24) > T4 (0.18).

Pure data and arithmetic: nothing here measures or imports torch.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where built: the table itself loads without msgspec (bench/gpu_check.py)
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


def gpu_profile(name: str) -> HardwareInfo:
    """The table's figures for ``--gpu-profile name`` (case-insensitive); ValueError listing valid names."""
    spec = GPU_TABLE.get(name.strip().lower())
    if spec is None:
        raise ValueError(f"unknown GPU profile {name!r}; valid profiles: {', '.join(GPU_TABLE)}")
    return gpu_info(spec, f"profile:{spec.profile}", spec.gpu_type, spec.memory_gib)


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


def gpu_info(spec: GpuSpec, source: str, gpu_type: str, memory_gib: float, device_name: str = "") -> HardwareInfo:
    from transport.messages import HardwareInfo

    return HardwareInfo(
        device_name=device_name or f"{spec.gpu_type} (profile)",
        gpu_type=gpu_type,
        compute_capability=spec.compute_capability,
        memory_gib=memory_gib,
        memory_bandwidth_gbps=spec.memory_bandwidth_gbps,
        peak_tflops=spec.peak_tflops,
        source=source,
    )
