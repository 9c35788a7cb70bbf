from __future__ import annotations

import pytest

from agent.hardware_probe import measure_cpu
from backends.gpu_table import power_score


def test_measure_cpu_returns_positive_figures():
    hw = measure_cpu(1)
    assert hw.gpu_type == "cpu" and hw.source == "measured" and hw.compute_capability is None
    assert hw.memory_bandwidth_gbps > 0 and hw.peak_tflops > 0
    assert power_score(hw) > 0
    with pytest.raises(ValueError):
        measure_cpu(0)


@pytest.mark.cuda
def test_describe_cuda_device():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    try:
        from agent.hardware_probe import describe_cuda_device

        hw = describe_cuda_device(0)
    except ValueError as e:  # a GPU the table lacks
        pytest.skip(str(e))
    assert hw.source == "gpu-table" and hw.memory_gib > 0 and hw.peak_tflops > 0
