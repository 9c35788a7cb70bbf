"""Simulated agents in real time: the paced runner, the sim backend's config, and `zoo agent --backend sim`."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tempfile

import anyio
import pytest

from backends.sim.cost_model import NodeHardware
from backends.sim.engine import build_sim_engine
from backends.sim.model_shapes import sim_model
from backends.sim.paced_runner import PacedRunner
from backends.sim.runner import SimModelRunner
from engine.batch import ScheduledRequest, SchedulerOutput
from engine.config import CacheConfig, EngineConfig, SchedulerConfig
from engine.sampling_params import SamplingParams
from sim.realtime import REPO_ROOT
from zoo.up_config import load_up_config


class FakeTime:
    def __init__(self) -> None:
        self.now_s = 100.0
        self.slept: list[float] = []

    def monotonic(self) -> float:
        return self.now_s

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now_s += seconds


def _decode_batch() -> SchedulerOutput:
    req = ScheduledRequest("a", [5], 100, list(range(7)), True, SamplingParams(max_tokens=8), num_output_tokens=1)
    return SchedulerOutput(step_id=0, requests=[req])


def _paced(max_catch_up_s: float = 0.01) -> tuple[PacedRunner, FakeTime, float]:
    t = FakeTime()
    runner = SimModelRunner(sim_model("sim:llama-3-8b"), NodeHardware("l4"))
    paced = PacedRunner(runner, max_catch_up_s, sleep=t.sleep, monotonic=t.monotonic)
    return paced, t, runner.predict_step_s(_decode_batch())


def test_paced_runner_absorbs_host_time_between_back_to_back_steps():
    paced, t, step_s = _paced()
    paced.execute(_decode_batch())
    assert t.now_s == pytest.approx(100.0 + step_s)
    t.now_s += 0.004  # the engine's own time between steps (schedule, update, chunks)
    out = paced.execute(_decode_batch())
    assert out.step_time_s == pytest.approx(step_s)
    assert t.now_s == pytest.approx(100.0 + 2 * step_s)  # the second step ended on the GPU's pace
    assert paced.num_paced_steps == 1


def test_paced_runner_starts_afresh_after_an_idle_gap():
    paced, t, step_s = _paced(max_catch_up_s=0.01)
    paced.execute(_decode_batch())
    t.now_s += 0.5  # idle: a new request arrived later
    start_s = t.now_s
    paced.execute(_decode_batch())
    assert t.now_s == pytest.approx(start_s + step_s)
    assert paced.num_paced_steps == 0


def test_paced_runner_without_catch_up_sleeps_what_is_left_of_each_prediction():
    paced, t, step_s = _paced(max_catch_up_s=0.0)
    paced.execute(_decode_batch())
    t.now_s += 0.004  # host time between steps is not absorbed
    start_s = t.now_s
    paced.execute(_decode_batch())
    assert t.now_s == pytest.approx(start_s + step_s) and t.slept == [pytest.approx(step_s)] * 2


def test_sim_backend_config_is_validated():
    config = EngineConfig(model="sim:llama-3-8b", backend="sim", gpu_profile="l4", tp=2)
    assert config.tp == 2
    with pytest.raises(ValueError, match="gpu_profile"):
        EngineConfig(model="sim:llama-3-8b", backend="sim")
    with pytest.raises(ValueError, match="sim:"):
        EngineConfig(model="/models/llama.gguf", backend="sim", gpu_profile="l4")
    with pytest.raises(ValueError, match="power of two"):
        EngineConfig(model="sim:llama-3-8b", backend="sim", gpu_profile="l4", tp=3)
    with pytest.raises(ValueError, match="runs on backend 'torch'"):
        EngineConfig(backend="jax", tp=2)
    assert EngineConfig(backend="torch", tp=3).tp == 3  # tensor parallel over 3 processes


def test_build_engine_sim_loads_no_checkpoint_and_sizes_kv_from_the_gpus():
    from backends.builder import build_engine

    config = EngineConfig(model="sim:llama-3-8b", backend="sim", gpu_profile="l4", tp=2)
    engine = build_engine(config)
    one_gpu = build_sim_engine(
        "sim:llama-3-8b", "l4", 1, scheduler_config=SchedulerConfig(), cache_config=CacheConfig()
    )
    assert isinstance(engine.runner, PacedRunner)
    assert engine.cache_config.num_device_blocks > 2 * one_gpu.cache_config.num_device_blocks  # weights split


def test_example_zoo_toml_starts_sim_agents():
    config = load_up_config(REPO_ROOT / "examples" / "zoo_sim.toml")
    assert {a.backend for a in config.agents} == {"sim"}
    argv = config.agents[2].argv(config.control)
    assert argv[argv.index("--backend") + 1] == "sim" and argv[argv.index("--tp") + 1] == "2"
    assert "sim:llama-3-8b" in config.controlplane_argv()


@pytest.mark.anyio
async def test_zoo_agent_backend_sim_joins_and_serves_placeholder_text():
    """`zoo agent --backend sim`: a real agent process; its hello says backend "sim" and 2 x L4."""
    from backends.sim.engine import SimTokenizer
    from client import AsyncZooClient
    from controlplane.router.router_config import RouterConfig
    from controlplane.server import ControlPlane, ControlPlaneConfig

    shape = sim_model("sim:llama-3-8b")
    cp = ControlPlane(
        ControlPlaneConfig(
            agent_endpoint="tcp://127.0.0.1:0",
            client_endpoint="tcp://127.0.0.1:0",
            model_name=shape.name,
            router=RouterConfig(policy="round_robin"),
            heartbeat_timeout_s=30.0,
        ),
        SimTokenizer(shape.vocab_size, shape.eos_token_id),
    )
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in the finally)
    proc = None
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(cp.run)
            argv = ["agent", "--control", cp.agent_endpoint, "--node-id", "sim-l4x2", "--backend", "sim",
                    "--model", "sim:llama-3-8b", "--gpu-profile", "l4", "--tp", "2"]  # fmt: skip
            proc = subprocess.Popen(
                [sys.executable, "-m", "zoo.serve", *argv], cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
            await cp.wait_until(lambda: "sim-l4x2" in cp.registry, 60.0)
            hello = cp.registry.hello("sim-l4x2")
            assert hello.backend == "sim" and hello.model == "sim:llama-3-8b"
            assert hello.hardware.gpu_type == "L4" and hello.hardware.memory_gib == 48.0
            async with AsyncZooClient(cp.client_endpoint, timeout_s=30.0) as client:
                done = await client.generate("hello simulated zoo", max_tokens=4, temperature=0.0)
            assert done.text == " sim" * 4 and done.node_id == "sim-l4x2" and done.finish_reason == "length"
            tg.cancel_scope.cancel()
    finally:
        if proc is not None:
            if proc.poll() is None:
                proc.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=10)
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)
        log.close()
