from __future__ import annotations

from backends.sim.engine import PLACEHOLDER, SimTokenizer, build_sim_engine
from engine.clock import ManualClock
from engine.sampling_params import SamplingParams


def test_sim_engine_serves_placeholder_text_with_predicted_step_times():
    clock = ManualClock()
    engine = build_sim_engine("sim:llama-3-8b", "h100-sxm", realtime=False, clock=clock)
    assert engine.cache_config.num_device_blocks > 20000  # from 80 GB minus 16 GB of weights
    (out,) = engine.generate(["hello there simulated world"], SamplingParams(max_tokens=5))
    assert out.num_output_tokens == 5 and out.text == PLACEHOLDER * 5
    assert engine.busy_time_s > 0


def test_sim_tokenizer_is_stable():
    tok = SimTokenizer(1000, 2)
    assert tok.encode("a b a") == tok.encode("a  b\na") and len(tok.encode("a b a")) == 3
    assert all(10 <= t < 1000 for t in tok.encode("some words here"))
