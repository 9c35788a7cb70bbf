"""`zoo agent`: a GPU host's node agent from its flags (``add_agent_args``, ``agent_from_args``, ``run_agent``).

    zoo agent --control tcp://HOST:5555 --backend torch --model PATH --node-id ID \\
              [--gpu-profile NAME] [--cell NAME] [--metrics-port PORT] [--otlp-traces-endpoint URL] [engine flags]
    zoo agent --control tcp://HOST:5555 --backend sim --model sim:llama-3-8b --gpu-profile l4 [--tp 2] ...

It runs until SIGINT/SIGTERM; at SIGTERM it drains first (zoo/serve.py's module docstring tells the whole story
of both processes).
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

import anyio

from backends.fake import FAKE_MODEL_NAME, build_trivial_engine, cpu_test_hardware
from transport.sockets import DEFAULT_AGENT_ENDPOINT
from zoo.engine_args import AUTO, add_engine_args, batched_tokens, engine_config_from_args
from zoo.keys import (
    add_agent_auth_args,
    agent_node_id_and_curve,
)
from zoo.log_args import add_log_args, configure_logging_from_args
from zoo.profiler_args import add_profiler_args, profiler_config_from_args
from zoo.tracing_args import add_tracing_args, span_export_from_args

log = logging.getLogger(__name__)


def add_agent_args(p: argparse.ArgumentParser) -> None:
    add_log_args(p)
    p.add_argument("--control", default=DEFAULT_AGENT_ENDPOINT, help="the control plane's agent endpoint")
    p.add_argument("--node-id", default=None, help="unique node id (default: HOSTNAME-PID)")
    p.add_argument("--gpu-profile", default=None, help="describe the device as this GPU table entry")
    p.add_argument("--cell", default="default", help="the cell (group of nodes) this node belongs to")
    p.add_argument("--model-name", "--served-model-name", default=None,
                   help="served model name (default: from the checkpoint path; vLLM's name too)")  # fmt: skip
    p.add_argument("--max-model-len", type=int, default=None, help="context limit (default: the model's)")
    add_engine_args(p)
    from zoo.spec_args import add_spec_args

    add_spec_args(p)  # --speculative ngram|model, --draft-model, --num-spec-tokens ...
    p.add_argument("--tp", "--tensor-parallel-size", "-tp", type=int, default=1,
                   help="GPUs per node: simulated (--backend sim), or TP ranks (torch); vLLM's names too")  # fmt: skip
    p.add_argument(
        "--metrics-port", type=int, default=None, help="serve this agent's /metrics on this port (0: a free one)"
    )
    p.add_argument("--metrics-host", default="127.0.0.1", help="the address --metrics-port binds")
    p.add_argument(
        "--metrics-advertise",
        default=None,
        help="the host in the /metrics URL reported to the control plane (its Prometheus service discovery); "
        "default: --metrics-host, or this machine's name when that is a wildcard (0.0.0.0)",
    )
    p.add_argument(
        "--kv-events-config",
        type=_kv_events_config,
        default=None,
        metavar="JSON",
        help="publish the prefix cache's changes for KV-aware routers, in vLLM's format and with its keys, e.g. "
        '\'{"enable_kv_cache_events": true, "endpoint": "tcp://*:5557", "topic": "kv"}\' (agent/kv_events.py)',
    )
    p.add_argument(
        "--drain-timeout-s",
        type=float,
        default=30.0,
        help="at SIGTERM, how long the node's requests may finish before it leaves (the rest resume elsewhere)",
    )
    p.add_argument("--no-gc-freeze", action="store_true", help="keep the start-up heap collectable (observe/gc_pauses)")
    p.add_argument("--fake-runner", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--fake-step-ms", type=float, default=0.0, help=argparse.SUPPRESS)
    p.add_argument("--fake-gpu-type", default="cpu", help=argparse.SUPPRESS)
    p.add_argument("--fake-max-num-seqs", type=int, default=256, help=argparse.SUPPRESS)  # the rest wait
    add_agent_auth_args(p)  # --curve-dir
    p.add_argument(
        "--data-endpoint",
        default=None,
        help="bind the KV data socket (KV to/from peer agents) here, e.g. tcp://127.0.0.1:0; default: none",
    )
    p.add_argument("--no-profile", action="store_true", help="skip the start-up measurement run (faster start)")
    p.add_argument("--kv-transfer-timeout-s", type=float, default=10.0, help="a KV transfer without acks fails after")
    p.add_argument(
        "--remote-swap",
        default="off",
        choices=["off", "fallback", "prefer"],
        help="preempted requests' KV to a peer's host RAM (needs --data-endpoint): when host RAM is full, or first",
    )
    p.add_argument("--kv-store-mib", type=int, default=1024, help="host RAM (MiB) lent to peers' KV (the remote tier)")
    p.add_argument(
        "--role",
        default="both",
        choices=("prefill", "decode", "both"),
        help="this node's part in the prefill/decode split (zoo controlplane --policy pd_split; needs --data-endpoint)",
    )
    p.add_argument(
        "--host-id",
        default=None,
        help="the host this node is on (nodes on one host share NVLink; KV moves are priced by it); "
        "default: this machine's hostname",
    )
    p.add_argument("--rack", default="", help="the rack this node is in (one rack: InfiniBand); default: none")
    from zoo.spec_args import add_can_draft_args

    add_can_draft_args(p)  # --can-draft NAME[,NAME], --draft-bind: this node drafts for others (fleet pairs)
    add_tracing_args(
        p, "zoo-agent", starts_traces=False
    )  # --otlp-traces-endpoint: the span of each request this node serves
    p.add_argument(
        "--seed",
        dest="engine_seed",
        type=int,
        default=0,
        help="the sampler's seed for requests without their own (vLLM's flag; a request's seed draws from its own "
        "generator whatever this is)",
    )
    add_profiler_args(p, "the profiler POST /start_profile and /stop_profile run on this node, writing on its disk")
    p.add_argument(
        "--tpot-slo", type=float, default=0.1, help="TPOT SLO, s, that --max-num-batched-tokens auto sizes the step to"
    )


def _kv_events_config(text: str):
    from agent.kv_events import parse_kv_events_config

    try:
        return parse_kv_events_config(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _profiler_for(args: argparse.Namespace):
    """``--profiler-config`` (or $VLLM_TORCH_PROFILER_DIR) for this node's backend; SystemExit when it cannot see it."""
    from backends.profiler_sessions import check_profiler_backend

    config = profiler_config_from_args(args)
    if config is not None:
        try:
            check_profiler_backend(config, args.backend)
        except ValueError as e:
            raise SystemExit(f"zoo agent: {e}") from None
    return config


def agent_from_args(args: argparse.Namespace):
    from agent.agent_config import AgentConfig
    from agent.node_agent import NodeAgent, default_node_id
    from zoo.placement_args import default_host_id

    node_id, curve = agent_node_id_and_curve(args, default_node_id())
    hardware = None
    if args.backend == "sim" and not args.fake_runner:
        engine, hardware = sim_engine_config_from_args(args)
        model_name = args.model_name
    elif args.fake_runner:
        engine = build_trivial_engine(step_s=args.fake_step_ms / 1e3, max_num_seqs=args.fake_max_num_seqs)
        model_name = args.model_name or FAKE_MODEL_NAME
        if args.gpu_profile is None:
            hardware = cpu_test_hardware(args.fake_gpu_type)
    else:
        engine = engine_config_from_args(args)
        if args.max_model_len is not None:
            engine.scheduler.max_model_len = args.max_model_len
        engine.cache.remote_swap = args.remote_swap
        model_name = args.model_name
    config = AgentConfig(
        node_id=node_id,
        model_name=model_name,
        backend=args.backend,
        cell=args.cell,
        gpu_profile=args.gpu_profile,
        curve=curve,
        drain_timeout_s=args.drain_timeout_s,
        profile_at_start=not (args.fake_runner or args.no_profile),  # a fake runner has nothing to measure
        data_endpoint=args.data_endpoint,
        kv_transfer_timeout_s=args.kv_transfer_timeout_s,
        kv_store_bytes=args.kv_store_mib << 20,
        role=args.role,
        host_id=args.host_id if args.host_id is not None else default_host_id(),
        rack=args.rack,
        step_budget_tpot_slo_s=auto_step_budget_slo(args),
        kv_events=getattr(args, "kv_events_config", None),
        profiler=_profiler_for(args),
    )
    exporter = None
    if args.metrics_port is not None:
        from observe.agent_exporter import AgentExporter

        exporter = AgentExporter()
    from zoo.spec_args import drafter_from_args

    drafter = drafter_from_args(args)  # --can-draft: a DraftServer the control plane pairs verifiers with
    spans, tracer = span_export_from_args(args), None
    if spans is not None:
        from observe.node_spans import NodeSpans

        tracer = NodeSpans(spans, node_id)
    return NodeAgent(args.control, engine, config, hardware=hardware, exporter=exporter, drafter=drafter, tracer=tracer)


def auto_step_budget_slo(args: argparse.Namespace) -> float | None:
    """``--max-num-batched-tokens auto``: the TPOT SLO the agent sizes its step budget to (None: a fixed budget)."""
    if args.max_num_batched_tokens != AUTO:
        return None
    if args.fake_runner or args.no_profile:
        raise ValueError("--max-num-batched-tokens auto needs the start-up profile (not --no-profile / a fake runner)")
    if not args.tpot_slo > 0:
        raise ValueError(f"--tpot-slo must be > 0, got {args.tpot_slo}")
    return args.tpot_slo


def sim_engine_config_from_args(args: argparse.Namespace):
    """``--backend sim``: the EngineConfig and what the hello says about the simulated hardware (x tp)."""
    from backends.sim.cost_model import NodeHardware, node_hardware_info
    from engine.config import CacheConfig, EngineConfig, SchedulerConfig

    if args.gpu_profile is None:
        raise ValueError("--backend sim needs --gpu-profile (the simulated GPU, e.g. l4, a100-80gb, h100-sxm)")
    if args.swap_space is not None:
        raise ValueError("--swap-space: a simulated node's host RAM is --num-host-blocks")
    config = EngineConfig(
        model=args.model,
        backend="sim",
        gpu_profile=args.gpu_profile,
        tp=args.tp,
        scheduler=SchedulerConfig(
            max_num_batched_tokens=batched_tokens(args),
            max_num_seqs=args.max_num_seqs,
            preemption_mode=args.preemption_mode,
        ),
        cache=CacheConfig(
            block_size=args.block_size,
            num_host_blocks=args.num_host_blocks,
            enable_prefix_caching=args.enable_prefix_caching,
            prefix_hash_algo=args.prefix_hash_algo,
        ),
        gpu_memory_utilization=args.gpu_memory_utilization,  # its GPU's share for KV (vLLM's default 0.9)
        kv_cache_memory_bytes=args.kv_cache_memory_bytes,  # refused: a simulated node's KV follows its GPU
    )
    from zoo.engine_args import lora_config_from_args

    config.lora = lora_config_from_args(args)  # --enable-lora / --lora-modules: simulated adapter slots
    config.lora_modules = list(getattr(args, "lora_modules", None) or [])
    if args.max_model_len is not None:
        config.scheduler.max_model_len = args.max_model_len
    return config, node_hardware_info(NodeHardware(args.gpu_profile, args.tp))


def run_agent(args: argparse.Namespace) -> int:
    configure_logging_from_args(args, "agent")
    try:
        agent = agent_from_args(args)
    except ValueError as e:
        print(f"zoo agent: {e}", file=sys.stderr)
        return 2
    http = None
    if agent.exporter is not None:  # /metrics and the readiness /health on --metrics-port
        from observe.agent_http import AgentHttpServer
        from observe.exporter import SnapshotCollector
        from observe.gc_pauses import GcPauses, gc_metrics

        agent.exporter.registry.register(SnapshotCollector(gc_metrics(GcPauses().install())))  # collector pauses

        if agent.tracer is not None:  # --otlp-traces-endpoint: its spans' counts (observe/span_metrics.py)
            from observe.span_metrics import span_metrics

            agent.exporter.registry.register(SnapshotCollector(span_metrics(agent.tracer.export)))
        http = AgentHttpServer(agent.exporter, agent.health)
        print(f"metrics: {http.serve(args.metrics_host, args.metrics_port, args.metrics_advertise)}", flush=True)
    try:
        return anyio.run(_serve_agent, agent, not getattr(args, "no_gc_freeze", False))
    except BaseExceptionGroup as group:  # a setting refused while the agent starts (a KV events endpoint)
        refused, rest = group.split(ValueError)
        if refused is None or rest is not None:
            raise
        print(f"zoo agent: {_first_leaf(refused)}", file=sys.stderr)
        return 2
    finally:
        if http is not None:
            http.close()
        if agent.tracer is not None:
            agent.tracer.export.close()  # what is queued goes out


def _first_leaf(group: BaseExceptionGroup) -> BaseException:
    first = group.exceptions[0]
    return _first_leaf(first) if isinstance(first, BaseExceptionGroup) else first


async def _serve_agent(agent, gc_freeze: bool = True) -> int:
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stop_agent_on_signal, agent, tg.cancel_scope)
        await tg.start(agent.run)
        print(
            f"agent {agent.config.node_id}: serving {agent.model_name}, control plane {agent.control_endpoint}",
            flush=True,
        )
        if gc_freeze:  # started: the model's and tokenizer's objects are never walked by a collection again
            from observe.gc_pauses import settle_heap

            settle_heap()
    return 0


async def _stop_agent_on_signal(agent, scope: anyio.CancelScope) -> None:
    """SIGTERM: drain first (no new requests; those here finish, at most --drain-timeout-s), then stop
    (NodeLeave: what is left resumes on other nodes). SIGINT, or a second signal: stop at once."""
    async with anyio.create_task_group() as tg:
        with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async for signum in signals:
                if signum == signal.SIGTERM and not agent.draining:
                    log.info("SIGTERM: draining (at most %.0f s), then leaving", agent.config.drain_timeout_s)
                    tg.start_soon(_drain_then_stop, agent, scope)
                    continue
                log.info("%s: leaving now", signal.Signals(signum).name)
                scope.cancel()
                return


async def _drain_then_stop(agent, scope: anyio.CancelScope) -> None:
    drained = await agent.drain("SIGTERM")
    log.info("agent %s: %s; leaving", agent.config.node_id, "drained" if drained else "drain ended early")
    scope.cancel()
