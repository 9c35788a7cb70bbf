"""The kernel dispatch table, row by row, from the compute capability alone (no GPU needed)."""

from __future__ import annotations

import pytest

from backends.kernel_dispatch import choose_kernels


@pytest.mark.parametrize(
    ("capability", "attention"),
    [
        ((7, 0), "gather_sdpa"),  # V100: no Triton kernel
        ((7, 5), "triton_paged"),  # T4
        ((8, 0), "flash_sdpa"),  # A100
        ((8, 6), "flash_sdpa"),  # A10
        ((8, 9), "triton_paged"),  # L4, L40S
        ((9, 0), "flash_sdpa"),  # H100, H200
        ((10, 0), "flash_sdpa"),  # newer
    ],
)
def test_each_capability_gets_its_kernel(capability, attention):
    plan = choose_kernels("cuda", capability)
    assert plan.attention == attention
    assert plan.kv_dtype == "auto"
    assert plan.cuda_graphs == (attention != "gather_sdpa")  # graphs need the static-shape kernel
    assert plan.device == f"cuda SM{capability[0]}{capability[1]}"
    assert attention in plan.summary() and plan.reason


def test_cpu_gets_gather_and_no_graphs():
    plan = choose_kernels("cpu")
    assert (plan.attention, plan.cuda_graphs) == ("gather_sdpa", False)
    assert plan.summary() == "gather_sdpa kv=auto graphs=off (cpu)"


def test_without_triton_cuda_falls_back_to_gather():
    plan = choose_kernels("cuda", (9, 0), triton_available=False)
    assert (plan.attention, plan.cuda_graphs) == ("gather_sdpa", False)
    with pytest.raises(ValueError, match="needs triton"):
        choose_kernels("cuda", (9, 0), attention="triton_paged", triton_available=False)


@pytest.mark.parametrize("capability", [(8, 9), (9, 0)])
def test_fp8_kv_on_sm89_and_sm90(capability):
    plan = choose_kernels("cuda", capability, kv_dtype="fp8_e4m3")
    assert plan.kv_dtype == "fp8_e4m3"
    assert "kv=fp8_e4m3" in plan.summary()


@pytest.mark.parametrize(("device", "capability"), [("cuda", (8, 0)), ("cuda", (7, 5)), ("cpu", None)])
def test_fp8_kv_refused_elsewhere(device, capability):
    with pytest.raises(ValueError, match="FP8"):
        choose_kernels(device, capability, kv_dtype="fp8_e4m3")


def test_fp8_kv_refused_with_the_gather_kernel():
    with pytest.raises(ValueError, match="Triton decode kernel"):
        choose_kernels("cuda", (9, 0), attention="gather_sdpa", kv_dtype="fp8_e4m3")


def test_flag_forces_a_kernel():
    plan = choose_kernels("cuda", (9, 0), attention="triton_paged")
    assert (plan.attention, plan.reason) == ("triton_paged", "forced by flag")
    assert choose_kernels("cuda", (9, 0), attention="gather_sdpa").cuda_graphs is False
    assert choose_kernels("cuda", (9, 0), cuda_graphs=False).cuda_graphs is False
    with pytest.raises(ValueError, match="SM80"):
        choose_kernels("cuda", (7, 5), attention="flash_sdpa")
    with pytest.raises(ValueError, match="TRITON_INTERPRET"):
        choose_kernels("cpu", attention="triton_paged")
    assert choose_kernels("cpu", attention="triton_paged", triton_interpret=True).cuda_graphs is False


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        (dict(device_type="tpu"), "device type"),
        (dict(device_type="cuda"), "compute capability"),
        (dict(device_type="cpu", attention="flashinfer"), "unknown attention kernel"),
        (dict(device_type="cpu", kv_dtype="int4"), "unknown kv dtype"),
    ],
)
def test_bad_input_is_a_clear_error(kwargs, match):
    with pytest.raises(ValueError, match=match):
        choose_kernels(**kwargs)
