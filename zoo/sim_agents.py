"""Several simulated agents in one process: one NodeAgent per node of a fleet TOML (sim/fleet.py).

    python -m zoo.sim_agents --fleet small --control tcp://127.0.0.1:5555 [--node-prefix rt-]

Each node is a real NodeAgent — its own DEALER socket, session, pump task and engine thread — around an
LLMEngine built exactly as the fleet simulator builds that node (sim/des.py SimNode: the fleet's
scheduler settings, KV blocks from the GPU memory, host blocks from ``swap_space_gib``), except that its
SimModelRunner sleeps each step's predicted time. The control plane must tokenize for the fleet's model
(``zoo controlplane --model sim:llama-3-8b``). One agent per process is ``zoo agent --backend sim``.

Pacing (``PacedRunner``). A runner that sleeps its predicted time from the start of each ``execute``
adds every host cost outside it to every step: ``schedule()``, ``update_from_output()``, detokenizing,
building TokenChunks, the GIL shared with the other agents of the process, and ``sleep`` overshooting on
a loaded host. Measured on the twin fleet (2 shared cores), that made real-time TPOT 2-10% longer than
the DES's, whose steps take exactly the prediction. ``PacedRunner`` sleeps until a deadline instead:
back-to-back steps end at ``previous deadline + predicted step``, so host time up to ``max_catch_up_s``
between them is absorbed (as a GPU hides the host's scheduling behind the kernels of the step before);
a step after a longer gap (the node was idle) starts its clock at the call.

The agents share one ZeroMQ context; each holds two worker threads for its life (engine loop, outbox
pump), so the process's thread limiter is raised to fit them.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial

import anyio
import anyio.to_thread
import zmq.asyncio

from backends.sim.cost_model import NodeHardware
from backends.sim.engine import SimTokenizer
from backends.sim.model_shapes import sim_model
from backends.sim.runner import SimModelRunner
from controlplane.agent import AgentConfig, NodeAgent
from controlplane.engine.batch import RunnerOutput, SchedulerOutput
from controlplane.engine.clock import Clock
from controlplane.engine.config import CacheConfig, SchedulerConfig
from controlplane.engine.llm_engine import LLMEngine
from sim.des import node_hardware_info
from sim.fleet import Fleet, NodeSpec, load_fleet
from transport.sockets import DEFAULT_AGENT_ENDPOINT

THREADS_PER_AGENT = 2  # the engine loop and the outbox pump, each parked in a worker thread
DEFAULT_MAX_CATCH_UP_S = 0.01  # host time between back-to-back steps that pacing absorbs


class PacedRunner:
    """Wraps a SimModelRunner that only predicts (``realtime=False``) and sleeps to keep its pace in real
    time (see the module docstring). Everything but ``execute`` is the wrapped runner's."""

    def __init__(
        self,
        runner: SimModelRunner,
        max_catch_up_s: float = DEFAULT_MAX_CATCH_UP_S,
        *,
        sleep: Callable[[float], None] = time.sleep,
        monotonic: Callable[[], float] = time.perf_counter,
    ) -> None:
        if runner.realtime:
            raise ValueError("PacedRunner does the sleeping: wrap a runner built with realtime=False")
        self.runner = runner
        self.max_catch_up_s = max_catch_up_s
        self._sleep = sleep
        self._monotonic = monotonic
        self._deadline_s: float | None = None  # when the previous step ends on the simulated GPU
        self.num_paced_steps = 0  # steps that started at the previous deadline (host time absorbed)

    def __getattr__(self, name: str):
        return getattr(self.runner, name)

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        now_s = self._monotonic()
        out = self.runner.execute(batch)
        start_s = now_s
        if self._deadline_s is not None and now_s - self._deadline_s <= self.max_catch_up_s:
            start_s = min(now_s, self._deadline_s)
            self.num_paced_steps += 1
        self._deadline_s = start_s + out.step_time_s
        left_s = self._deadline_s - self._monotonic()
        if left_s > 0:
            self._sleep(left_s)
        return out


def build_realtime_sim_engine(
    model: str,
    gpu_profile: str,
    tp: int = 1,
    *,
    scheduler_config: SchedulerConfig,
    cache_config: CacheConfig,
    keep_cache_blocks: bool = False,
    max_catch_up_s: float = DEFAULT_MAX_CATCH_UP_S,
    clock: Clock | None = None,
) -> LLMEngine:
    """backends/sim/engine.py ``build_sim_engine(realtime=True)``, with a PacedRunner: KV blocks from the GPU
    memory unless ``keep_cache_blocks``; SimTokenizer."""
    shape = sim_model(model)
    runner = SimModelRunner(shape, NodeHardware(gpu_profile, tp), block_size=cache_config.block_size)
    scheduler_config.max_model_len = min(scheduler_config.max_model_len, runner.max_model_len)
    if not keep_cache_blocks:
        num_blocks = runner.num_device_blocks(cache_config.block_size)
        if num_blocks < 1:
            raise ValueError(f"{shape.name} does not fit on {tp} x {gpu_profile}")
        cache_config = replace(cache_config, num_device_blocks=num_blocks)
    tokenizer = SimTokenizer(shape.vocab_size, shape.eos_token_id)
    return LLMEngine(PacedRunner(runner, max_catch_up_s), tokenizer, scheduler_config, cache_config, clock=clock)


def sim_node_engine(fleet: Fleet, spec: NodeSpec, *, max_catch_up_s: float = DEFAULT_MAX_CATCH_UP_S) -> LLMEngine:
    """The engine of fleet node ``spec``, with the settings the fleet simulator gives that node, in real time."""
    model, settings = fleet.model, fleet.engine
    return build_realtime_sim_engine(
        model.name,
        spec.hardware.profile,
        spec.hardware.tp,
        scheduler_config=settings.scheduler_config(model),
        cache_config=settings.cache_config(model, spec.hardware),
        keep_cache_blocks=True,
        max_catch_up_s=max_catch_up_s,
    )


def sim_agent(
    fleet: Fleet,
    spec: NodeSpec,
    control_endpoint: str,
    *,
    node_prefix: str = "",
    context: zmq.asyncio.Context | None = None,
    max_catch_up_s: float = DEFAULT_MAX_CATCH_UP_S,
) -> NodeAgent:
    """A real agent serving fleet node ``spec``; its hello says backend "sim" and the node's hardware (x tp)."""
    config = AgentConfig(node_id=node_prefix + spec.node_id, model_name=fleet.model.name, backend="sim", cell=spec.cell)
    return NodeAgent(
        control_endpoint,
        sim_node_engine(fleet, spec, max_catch_up_s=max_catch_up_s),
        config,
        hardware=node_hardware_info(spec.hardware),
        context=context,
    )


async def serve_sim_agents(
    fleet: Fleet,
    control_endpoint: str,
    *,
    node_prefix: str = "",
    max_catch_up_s: float = DEFAULT_MAX_CATCH_UP_S,
    task_status: anyio.abc.TaskStatus = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run one agent per fleet node until cancelled; ``task_status.started(agents)`` once all are connecting."""
    limiter = anyio.to_thread.current_default_thread_limiter()
    limiter.total_tokens = max(limiter.total_tokens, THREADS_PER_AGENT * len(fleet.nodes) + 16)
    context = zmq.asyncio.Context()
    try:
        agents = [
            sim_agent(
                fleet, s, control_endpoint, node_prefix=node_prefix, context=context, max_catch_up_s=max_catch_up_s
            )
            for s in fleet.nodes
        ]
        async with anyio.create_task_group() as tg:
            for agent in agents:
                await tg.start(agent.run)
            task_status.started(agents)
    finally:
        context.term()


def add_sim_agents_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--fleet", required=True, help="fleet TOML file or a bundled fleet name (sim/fleets)")
    p.add_argument("--control", default=DEFAULT_AGENT_ENDPOINT, help="the control plane's agent endpoint")
    p.add_argument("--node-prefix", default="", help="prefixed to every node id (several fleets, one plane)")
    p.add_argument(
        "--max-catch-up-ms",
        type=float,
        default=1e3 * DEFAULT_MAX_CATCH_UP_S,
        help="host time between back-to-back steps the runner absorbs (0: sleep each step's time from its start)",
    )


def run_sim_agents(args: argparse.Namespace) -> int:
    from zoo.serve import _configure_logging, _stop_on_signal

    _configure_logging()
    fleet = load_fleet(args.fleet)

    async def serve() -> int:
        async with anyio.create_task_group() as tg:
            tg.start_soon(_stop_on_signal, tg.cancel_scope)
            agents = await tg.start(
                partial(
                    serve_sim_agents,
                    fleet,
                    args.control,
                    node_prefix=args.node_prefix,
                    max_catch_up_s=args.max_catch_up_ms / 1e3,
                )
            )
            print(
                f"{len(agents)} simulated agents ({fleet.describe()}) in real time, control plane {args.control}",
                flush=True,
            )
        return 0

    return anyio.run(serve)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m zoo.sim_agents", description=__doc__.splitlines()[0])
    add_sim_agents_args(parser)
    return run_sim_agents(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
