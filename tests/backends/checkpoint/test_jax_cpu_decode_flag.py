"""``--no-cpu-decode-kernel`` (EngineConfig.cpu_decode_kernel) reaches the JAX runner through build_engine (its FFI
decode kernel, backends/jax/cpu_kernel.py), and both paths give the same greedy tokens."""

from __future__ import annotations

import pytest

from backends.builder import build_engine
from backends.jax import cpu_kernel
from engine.config import CacheConfig, EngineConfig
from engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def _engine(path, cpu_decode_kernel: bool):
    cache = CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=16)
    config = EngineConfig(
        model=str(path), backend="jax", num_threads=1, cache=cache, cpu_decode_kernel=cpu_decode_kernel
    )
    return build_engine(config, progress=False)


def _greedy(engine, prompt: str) -> list[int]:
    req_id = engine.add_request(prompt, GREEDY)
    out: list[int] = []
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.req_id == req_id:
                out += o.new_token_ids
    return out


@pytest.mark.skipif(not cpu_kernel.load(), reason="no C/C++ compiler: the FFI kernel cannot be built here")
def test_the_flag_turns_the_jax_kernel_off_and_the_tokens_stay(tiny_gguf_path):
    on, off = _engine(tiny_gguf_path, True), _engine(tiny_gguf_path, False)
    assert on.runner.decode_path.startswith("cpu-kernel") and on.runner.kernel_threads == 1
    assert off.runner.decode_path == "xla"
    assert _greedy(on, "hello world") == _greedy(off, "hello world")
