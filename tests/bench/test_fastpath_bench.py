"""`zoo bench fastpath`'s measurement on a tiny random model: all paths run, agree, and report every figure."""

from __future__ import annotations

from types import SimpleNamespace

from backends.runner_driver import tiny_config
from backends.torch import TorchModelRunner
from bench.fastpath import _measure


def test_fastpath_measure_on_a_tiny_model():
    config = tiny_config()
    model = TorchModelRunner(config, "float32", seed=1, progress=False).model  # its own: _measure wraps forward
    lines: list[str] = []
    fig = _measure(model, SimpleNamespace(config=config), batch=2, steps=2, say=lines.append)
    assert fig["same_tokens"] is True and len(lines) == 1
    assert fig["matmul_cpu_ms"] > 0 and fig["weights_read_ms"] > 0
    for name in ("baseline", "fast"):
        f = fig[name]
        assert f["step_cpu_ms"] >= f["forward_cpu_ms"] > 0
        assert f["ops_per_step"] > 0
    assert fig["fast"]["ops_per_step"] < fig["baseline"]["ops_per_step"]  # the fast path runs fewer ops
    k = fig["kernel"]  # batch 2: the C decode kernel serves it (a C compiler is present where tests run)
    assert k["step_cpu_ms"] > 0 and fig["kernel_matmul_cpu_ms"] > 0
    assert k["ops_per_step"] < fig["fast"]["ops_per_step"]  # one call instead of the layers' ops
    assert model.fast_path is True
