"""The kernel flags reach the EngineConfig, and bad values are refused with the field's name."""

from __future__ import annotations

import argparse

import pytest

from engine.config import EngineConfig
from zoo.engine_args import add_engine_args, engine_config_from_args


def _parse(*argv: str) -> EngineConfig:
    p = argparse.ArgumentParser()
    add_engine_args(p)
    return engine_config_from_args(p.parse_args(list(argv)))


def test_defaults_leave_the_choice_to_the_dispatch_table():
    config = _parse()
    assert (config.attention_backend, config.kv_dtype, config.cuda_graphs) == (None, "auto", True)


def test_flags_force_a_kernel_fp8_kv_and_eager_decode():
    config = _parse("--attention-backend", "triton_paged", "--kv-dtype", "fp8_e4m3", "--no-cuda-graphs")
    assert (config.attention_backend, config.kv_dtype, config.cuda_graphs) == ("triton_paged", "fp8_e4m3", False)


def test_the_cpu_decode_kernel_is_on_by_default_and_a_flag_turns_it_off():
    assert _parse().cpu_decode_kernel is True
    assert _parse("--no-cpu-decode-kernel").cpu_decode_kernel is False


def test_unknown_names_are_refused():
    with pytest.raises(SystemExit):
        _parse("--attention-backend", "flashinfer")
    with pytest.raises(ValueError, match="attention_backend"):
        EngineConfig(attention_backend="flashinfer")
    with pytest.raises(ValueError, match="kv_dtype"):
        EngineConfig(kv_dtype="int4")


def test_huge_pages_are_on_by_default_and_a_flag_turns_them_off():
    assert _parse().huge_pages is True
    assert _parse("--no-huge-pages").huge_pages is False
