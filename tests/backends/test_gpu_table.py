from __future__ import annotations

import pytest

from backends.gpu_table import GPU_TABLE, gpu_profile, match_gpu_name, power_score


def test_power_score_is_one_for_the_a100_80gb():
    assert power_score(gpu_profile("a100-80gb")) == pytest.approx(1.0)


def test_power_score_orders_the_table():
    order = ["h200", "h100-sxm", "h100-pcie", "a100-80gb", "a100-40gb", "l40s", "a10", "l4", "t4"]
    scores = [power_score(gpu_profile(name)) for name in order]
    assert scores == sorted(scores, reverse=True)
    assert len(set(scores)) == len(scores)
    assert set(order) == set(GPU_TABLE)


def test_gpu_profile_figures_and_errors():
    h100 = gpu_profile("H100-SXM")
    assert (h100.gpu_type, h100.memory_bandwidth_gbps, h100.peak_tflops, h100.compute_capability) == (
        "H100",
        3350.0,
        989.0,
        "9.0",
    )
    assert h100.source == "profile:h100-sxm"
    with pytest.raises(ValueError, match=r"unknown GPU profile 'b200'.*h200.*t4"):
        gpu_profile("b200")


@pytest.mark.parametrize(
    ("device_name", "memory_gib", "profile"),
    [
        ("NVIDIA H200", 139.8, "h200"),
        ("NVIDIA H100 80GB HBM3", 79.2, "h100-sxm"),
        ("NVIDIA H100 PCIe", 79.2, "h100-pcie"),
        ("NVIDIA A100-SXM4-80GB", 79.2, "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", 39.4, "a100-40gb"),
        ("NVIDIA A100-PCIE-40GB", 39.4, "a100-40gb"),
        ("NVIDIA A100 80GB PCIe", 79.2, "a100-80gb"),
        ("NVIDIA L40S", 44.5, "l40s"),
        ("NVIDIA L4", 22.0, "l4"),
        ("NVIDIA A10", 22.0, "a10"),
        ("Tesla T4", 14.7, "t4"),
        ("NVIDIA GeForce RTX 4090", 24.0, None),
        ("NVIDIA A10G", 22.0, None),
    ],
)
def test_match_gpu_name(device_name, memory_gib, profile):
    spec = match_gpu_name(device_name, memory_gib)
    assert (spec.profile if spec else None) == profile
