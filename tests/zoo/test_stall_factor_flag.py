"""``--stall-factor`` (engine/stall_free.py) reaches the SchedulerConfig; bad values are refused; the bench's
engine is built as the CLIs build one."""

from __future__ import annotations

import argparse

import pytest

from engine.stall_free import DEFAULT_STALL_FACTOR
from zoo.engine_args import add_engine_args, engine_config_from_args


def _parse(*argv: str):
    p = argparse.ArgumentParser()
    add_engine_args(p)
    return engine_config_from_args(p.parse_args(list(argv))).scheduler


def test_stall_free_batching_is_on_by_default_and_0_turns_it_off():
    assert _parse().stall_factor == DEFAULT_STALL_FACTOR == 2.0
    assert _parse("--stall-factor", "3").stall_factor == 3.0
    assert _parse("--stall-factor", "0").stall_factor is None


@pytest.mark.parametrize("bad", ["1", "0.5", "-2", "nan", "fast"])
def test_bad_stall_factors_are_refused(bad):
    with pytest.raises(SystemExit):
        _parse("--stall-factor", bad)


def test_the_bench_engine_takes_the_cli_default(monkeypatch):
    import backends.builder
    from bench.engine import _build

    built = []
    monkeypatch.setattr(backends.builder, "build_engine", lambda cfg, progress=False: built.append(cfg))
    _build(None, "float32", num_device_blocks=64, num_host_blocks=0)
    (config,) = built
    assert config.scheduler == _parse()  # same budget, same stall factor as `zoo agent` by default
