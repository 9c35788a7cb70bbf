"""``--no-cpu-decode-kernel`` (EngineConfig.cpu_decode_kernel) reaches the torch runner through build_engine, and
both paths give the same greedy tokens. (Here because it needs a checkpoint file: the tiny GGUF this folder
writes.)"""

from __future__ import annotations

import pytest

from backends.builder import build_engine
from backends.torch.cpu_decode import load_library
from engine.config import CacheConfig, EngineConfig
from engine.sampling_params import SamplingParams

GREEDY = SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True)


def _engine(path, cpu_decode_kernel: bool):
    cache = CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=16)
    config = EngineConfig(model=str(path), num_threads=1, cache=cache, cpu_decode_kernel=cpu_decode_kernel)
    return build_engine(config, progress=False)


def _greedy(engine, prompt: str) -> list[int]:
    req_id = engine.add_request(prompt, GREEDY)
    out: list[int] = []
    while engine.has_unfinished_requests():
        for o in engine.step():
            if o.req_id == req_id:
                out += o.new_token_ids
    return out


@pytest.mark.skipif(load_library() is None, reason="no C compiler: the kernel cannot be built here")
def test_the_flag_turns_the_kernel_off_and_the_tokens_stay(tiny_gguf_path):
    on, off = _engine(tiny_gguf_path, True), _engine(tiny_gguf_path, False)
    assert on.runner.cpu_decoder is not None and "cpu-kernel" in on.runner.kernels
    assert off.runner.cpu_decoder is None and "cpu-kernel" not in off.runner.kernels
    assert _greedy(on, "hello world") == _greedy(off, "hello world")


def test_no_huge_pages_reaches_the_runner(tiny_gguf_path):
    cache = CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=16)
    off = build_engine(EngineConfig(model=str(tiny_gguf_path), cache=cache, huge_pages=False), progress=False)
    on = build_engine(EngineConfig(model=str(tiny_gguf_path), cache=cache), progress=False)
    assert off.runner.huge_pages is None and "huge-pages" not in off.runner.kernels
    assert on.runner.huge_pages is not None and "huge-pages" in on.runner.kernels
    assert _greedy(on, "hello world") == _greedy(off, "hello world")
