"""`zoo controlplane` and `zoo agent`: the fleet's two long-running processes.

    zoo controlplane --listen tcp://127.0.0.1:5555 --client-listen tcp://127.0.0.1:5556 \\
                     --http 127.0.0.1:8000 --policy hardware_aware --model PATH \\
                     [--stats-listen tcp://127.0.0.1:5557] [--stats-interval-s 0.5]
    zoo agent --control tcp://HOST:5555 --backend torch --model PATH --node-id ID \\
              [--gpu-profile NAME] [--cell NAME] [--metrics-port PORT] [engine flags]
    zoo agent --control tcp://HOST:5555 --backend sim --model sim:llama-3-8b --gpu-profile l4 [--tp 2] ...

A simulated agent (``--backend sim``) is a real agent — real sockets, engine thread, scheduler and KV
manager — whose runner sleeps each step's predicted time on ``--tp`` x ``--gpu-profile`` GPUs; its hello
says backend "sim" and that hardware (datasheet x tp); it serves a ``sim:*`` model, whose tokenizer the
control plane gets with ``zoo controlplane --model sim:NAME``. Several in one process: sim/sim_agents.py.

Metrics: the control plane serves /metrics on its HTTP port and publishes FleetStats on --stats-listen
(``zoo top`` subscribes); an agent serves its own /metrics on --metrics-port (off unless given; 0 picks a
free port, which the agent prints and reports to the control plane).

The CLI wires ``add_controlplane_args``/``run_controlplane`` and ``add_agent_args``/``run_agent``. Both
run until SIGINT/SIGTERM and shut down cleanly (an agent sends NodeLeave). The control plane serves the
HTTP gateway with uvicorn in its own task group.

A hidden ``--fake-runner`` agent option swaps the model for ``TrivialRunner`` and a byte-level tokenizer
(tests and ``bench/controlplane_hop.py``); the control plane's matching option is ``--fake-tokenizer``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

import anyio

from backends.fake import FAKE_MODEL_NAME, ByteTokenizer, build_trivial_engine, cpu_test_hardware
from engine.config import SIM_PREFIX
from observe.stats_stream import DEFAULT_STATS_ENDPOINT
from transport.process import configure_logging, stop_on_signal
from transport.sockets import DEFAULT_AGENT_ENDPOINT, DEFAULT_CLIENT_ENDPOINT
from zoo.engine_args import add_engine_args, engine_config_from_args

log = logging.getLogger(__name__)

DEFAULT_HTTP = "127.0.0.1:8000"


# --------------------------------------------------------------------------- zoo controlplane


def add_controlplane_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--listen", default=DEFAULT_AGENT_ENDPOINT, help="ROUTER endpoint agents connect to")
    p.add_argument(
        "--client-listen",
        default=DEFAULT_CLIENT_ENDPOINT,
        help="ROUTER endpoint ZeroMQ clients connect to ('none': off)",
    )
    p.add_argument("--http", default=DEFAULT_HTTP, help="HOST:PORT of the OpenAI-compatible API ('none': off)")
    p.add_argument("--policy", default="hardware_aware", help="routing policy by name")
    p.add_argument("--model", default=None, help="checkpoint whose tokenizer the control plane uses (default: SmolLM2)")
    p.add_argument("--heartbeat-interval-s", type=float, default=1.0)
    p.add_argument("--heartbeat-timeout-s", type=float, default=5.0)
    p.add_argument("--report-interval-s", type=float, default=0.25)
    p.add_argument("--max-queue-per-node", type=int, default=256)
    p.add_argument("--max-queue-global", type=int, default=4096)
    p.add_argument(
        "--stats-listen", default=DEFAULT_STATS_ENDPOINT, help="PUB endpoint of the fleet stats stream ('none': off)"
    )
    p.add_argument("--stats-interval-s", type=float, default=0.5, help="seconds between FleetStats")
    p.add_argument("--fake-tokenizer", action="store_true", help=argparse.SUPPRESS)


def controlplane_from_args(args: argparse.Namespace):
    from agent.node_agent import served_model_name
    from controlplane.admission import AdmissionConfig
    from controlplane.router.router_config import RouterConfig
    from controlplane.server import ControlPlane, ControlPlaneConfig

    if args.fake_tokenizer:
        tokenizer, model_name = ByteTokenizer(), FAKE_MODEL_NAME
    elif args.model is not None and args.model.startswith(SIM_PREFIX):
        from backends.sim.engine import SimTokenizer
        from backends.sim.model_shapes import sim_model

        shape = sim_model(args.model)
        tokenizer, model_name = SimTokenizer(shape.vocab_size, shape.eos_token_id), shape.name
    else:
        from backends.checkpoint import load_checkpoint

        tokenizer, model_name = load_checkpoint(args.model).tokenizer, served_model_name(args.model)
    config = ControlPlaneConfig(
        agent_endpoint=args.listen,
        client_endpoint=None if args.client_listen == "none" else args.client_listen,
        model_name=model_name,
        router=RouterConfig(policy=args.policy),
        admission=AdmissionConfig(max_queue_per_node=args.max_queue_per_node, max_queue_global=args.max_queue_global),
        heartbeat_interval_s=args.heartbeat_interval_s,
        heartbeat_timeout_s=args.heartbeat_timeout_s,
        report_interval_s=args.report_interval_s,
    )
    return ControlPlane(config, tokenizer)


def run_controlplane(args: argparse.Namespace) -> int:
    configure_logging()
    cp = controlplane_from_args(args)
    http = None if args.http == "none" else args.http
    stats = None if args.stats_listen == "none" else args.stats_listen
    return anyio.run(_serve_controlplane, cp, http, stats, args.stats_interval_s)


async def _serve_controlplane(cp, http: str | None, stats_listen: str | None = None, stats_interval_s=0.5) -> int:
    from observe.controlplane_exporter import ControlPlaneExporter
    from observe.stats_stream import FleetObserver, StatsPublisher

    exporter = ControlPlaneExporter(cp.stats)
    observer = FleetObserver(cp, exporter, ebpf_source=cp.latest_probe_snapshot)
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal, tg.cancel_scope)
        await tg.start(cp.run)
        print(f"control plane: agents {cp.agent_endpoint}, clients {cp.client_endpoint}", flush=True)
        if stats_listen is not None:
            endpoint = await tg.start(StatsPublisher(observer, stats_listen, stats_interval_s).run)
            print(f"fleet stats: {endpoint} (zoo top --control {endpoint})", flush=True)
        if http is not None:
            host, _, port = http.rpartition(":")
            await tg.start(_serve_http, cp, host, int(port), exporter.asgi_app(observer.poll))
            print(f"OpenAI API: http://{http}/v1  health: http://{http}/health  metrics: http://{http}/metrics")
    return 0


async def _serve_http(cp, host: str, port: int, metrics_app=None, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
    import uvicorn

    from controlplane.gateway.app import create_app

    class _Server(uvicorn.Server):
        def install_signal_handlers(self) -> None:  # signals are the task group's (uvicorn < 0.29)
            pass

        def capture_signals(self):  # uvicorn >= 0.29
            import contextlib

            return contextlib.nullcontext()

    app = create_app(cp, metrics_app=metrics_app)
    server = _Server(uvicorn.Config(app, host=host, port=port, log_level="warning", lifespan="off"))
    async with anyio.create_task_group() as tg:
        tg.start_soon(server.serve)
        with anyio.fail_after(30):
            while not server.started:
                await anyio.sleep(0.05)
        task_status.started()
    # serve() returned: uvicorn stopped on its own (e.g. the port was taken)
    raise RuntimeError(f"the HTTP server on {host}:{port} stopped")


# --------------------------------------------------------------------------- zoo agent


def add_agent_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--control", default=DEFAULT_AGENT_ENDPOINT, help="the control plane's agent endpoint")
    p.add_argument("--node-id", default=None, help="unique node id (default: HOSTNAME-PID)")
    p.add_argument("--gpu-profile", default=None, help="describe the device as this GPU table entry")
    p.add_argument("--cell", default="default", help="the cell (group of nodes) this node belongs to")
    p.add_argument("--model-name", default=None, help="served model name (default: from the checkpoint path)")
    p.add_argument("--max-model-len", type=int, default=None, help="context limit (default: the model's)")
    add_engine_args(p)
    p.add_argument("--tp", type=int, default=1, help="GPUs of --gpu-profile per simulated node (--backend sim)")
    p.add_argument(
        "--metrics-port", type=int, default=None, help="serve this agent's /metrics on this port (0: a free one)"
    )
    p.add_argument("--metrics-host", default="127.0.0.1", help="the address --metrics-port binds")
    p.add_argument("--fake-runner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--fake-step-ms", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--fake-gpu-type", default="cpu", help=argparse.SUPPRESS)


def agent_from_args(args: argparse.Namespace):
    from agent.node_agent import AgentConfig, NodeAgent, default_node_id

    node_id = args.node_id or default_node_id()
    hardware = None
    if args.backend == "sim" and not args.fake_runner:
        engine, hardware = sim_engine_config_from_args(args)
        model_name = args.model_name
    elif args.fake_runner:
        engine = build_trivial_engine(step_s=args.fake_step_ms / 1e3)
        model_name = args.model_name or FAKE_MODEL_NAME
        if args.gpu_profile is None:
            hardware = cpu_test_hardware(args.fake_gpu_type)
    else:
        engine = engine_config_from_args(args)
        if args.max_model_len is not None:
            engine.scheduler.max_model_len = args.max_model_len
        model_name = args.model_name
    config = AgentConfig(
        node_id=node_id, model_name=model_name, backend=args.backend, cell=args.cell, gpu_profile=args.gpu_profile
    )
    exporter = None
    if args.metrics_port is not None:
        from observe.agent_exporter import AgentExporter

        exporter = AgentExporter()
    return NodeAgent(args.control, engine, config, hardware=hardware, exporter=exporter)


def sim_engine_config_from_args(args: argparse.Namespace):
    """``--backend sim``: the EngineConfig and what the hello says about the simulated hardware (x tp)."""
    from backends.sim.cost_model import NodeHardware, node_hardware_info
    from engine.config import CacheConfig, EngineConfig, SchedulerConfig

    if args.gpu_profile is None:
        raise ValueError("--backend sim needs --gpu-profile (the simulated GPU, e.g. l4, a100-80gb, h100-sxm)")
    config = EngineConfig(
        model=args.model,
        backend="sim",
        gpu_profile=args.gpu_profile,
        tp=args.tp,
        scheduler=SchedulerConfig(max_num_batched_tokens=args.max_num_batched_tokens, max_num_seqs=args.max_num_seqs),
        cache=CacheConfig(block_size=args.block_size, num_host_blocks=args.num_host_blocks),
    )
    if args.max_model_len is not None:
        config.scheduler.max_model_len = args.max_model_len
    return config, node_hardware_info(NodeHardware(args.gpu_profile, args.tp))


def run_agent(args: argparse.Namespace) -> int:
    configure_logging()
    agent = agent_from_args(args)
    if agent.exporter is not None:
        print(f"metrics: {agent.exporter.serve(args.metrics_host, args.metrics_port)}", flush=True)
    try:
        return anyio.run(_serve_agent, agent)
    finally:
        if agent.exporter is not None:
            agent.exporter.close()


async def _serve_agent(agent) -> int:
    async with anyio.create_task_group() as tg:
        tg.start_soon(stop_on_signal, tg.cancel_scope)
        await tg.start(agent.run)
        print(
            f"agent {agent.config.node_id}: serving {agent.model_name}, control plane {agent.control_endpoint}",
            flush=True,
        )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zoo.serve controlplane|agent ...`` (the same flags as ``zoo controlplane|agent``)."""
    parser = argparse.ArgumentParser(prog="python -m zoo.serve")
    sub = parser.add_subparsers(dest="command", required=True)
    add_controlplane_args(sub.add_parser("controlplane"))
    add_agent_args(sub.add_parser("agent"))
    args = parser.parse_args(argv)
    return run_controlplane(args) if args.command == "controlplane" else run_agent(args)


if __name__ == "__main__":
    sys.exit(main())
