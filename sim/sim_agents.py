"""Several simulated agents in one process: one NodeAgent per node of a fleet TOML (sim/fleet.py).

    python -m sim.sim_agents --fleet small --control tcp://127.0.0.1:5555 [--node-prefix rt-]

Each node is a real NodeAgent — its own DEALER socket, session, pump task and engine thread — around an
LLMEngine built exactly as the fleet simulator builds that node (``Fleet.node_engine``: the fleet's
scheduler settings, KV blocks from the GPU memory, host blocks from ``swap_space_gib``), except that its
SimModelRunner sleeps each step's predicted time. The control plane must tokenize for the fleet's model
(``zoo controlplane --model sim:llama-3-8b``). One agent per process is ``zoo agent --backend sim``.

Pacing: backends/sim/paced_runner.py.

The agents share one ZeroMQ context; each holds two worker threads for its life (engine thread, outbox
pump), so the process's thread limiter is raised to fit them.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from functools import partial

import anyio
import anyio.to_thread
import zmq.asyncio

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.sim.cost_model import node_hardware_info
from backends.sim.paced_runner import DEFAULT_MAX_CATCH_UP_S
from sim.fleet import STEP_BUDGET_SARATHI, Fleet, NodeSpec, load_fleet
from transport.process import configure_logging, stop_on_signal
from transport.sockets import DEFAULT_AGENT_ENDPOINT

THREADS_PER_AGENT = 2  # the engine thread and the outbox pump, each parked in a worker thread


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
    if fleet.engine.step_budget == STEP_BUDGET_SARATHI:  # sized from its start-up profile, as the simulator's nodes
        config.step_budget_tpot_slo_s = fleet.engine.tpot_slo_s
    return NodeAgent(
        control_endpoint,
        fleet.node_engine(spec, realtime=True, max_catch_up_s=max_catch_up_s),
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
    configure_logging()
    fleet = load_fleet(args.fleet)

    async def serve() -> int:
        async with anyio.create_task_group() as tg:
            tg.start_soon(stop_on_signal, tg.cancel_scope)
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
    parser = argparse.ArgumentParser(prog="python -m sim.sim_agents", description=__doc__.splitlines()[0])
    add_sim_agents_args(parser)
    return run_sim_agents(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
