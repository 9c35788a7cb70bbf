"""backends/jax/huge_params.py: XLA's CPU buffers collapsed onto huge pages in place keep their values, small
arrays are left alone with the reason, and the runner reports what it got in its kernels line."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from backends import huge_pages as hp
from backends.jax.huge_params import collapse_arrays

AVAILABLE = hp.unavailable_reason() == ""


@pytest.mark.skipif(not AVAILABLE, reason=f"no transparent huge pages here: {hp.unavailable_reason()}")
def test_collapse_keeps_values():
    host = np.arange(3 << 20, dtype=np.float32)  # 12 MiB
    big = jnp.asarray(host)
    result = collapse_arrays({"w": big, "same": big})  # one buffer, counted once
    assert result.requested == host.nbytes
    assert result.huge >= hp.HUGE, result
    np.testing.assert_array_equal(np.asarray(big), host)
    assert float((big * 2).sum()) == float((host.astype(np.float64) * 2).sum())


def test_small_arrays_stay_with_a_reason():
    result = collapse_arrays([jnp.ones(16), jnp.zeros((4, 4))])
    assert result.huge == 0 and result.reason


def test_runner_reports_its_pages(tiny):
    from backends.jax.runner import JaxModelRunner

    config, sd, _ = tiny
    runner = JaxModelRunner(config, state_dict={k: v.numpy() for k, v in sd.items()}, progress=False)
    assert "jax decode=" in runner.kernels and "huge-pages" in runner.kernels
    off = JaxModelRunner(config, state_dict={k: v.numpy() for k, v in sd.items()}, progress=False, huge_pages=False)
    assert off.huge_pages_result is None and "huge-pages" not in off.kernels
