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
free port, which the agent prints and reports to the control plane, as ``--metrics-advertise``:PORT), and
/health there (200 once it has joined a control plane: a readiness probe). The control plane lists every
agent's /metrics for Prometheus at /metrics/targets (``http_sd_configs``).

The CLI wires ``add_controlplane_args``/``run_controlplane`` and ``add_agent_args``/``run_agent``. Both
run until SIGINT/SIGTERM and shut down cleanly. An agent at SIGTERM drains first (NodeDrain: no new
requests; its requests finish, at most ``--drain-timeout-s``), then sends NodeLeave (what is left resumes
on other nodes); at SIGINT or a second signal it leaves at once. The control plane at SIGTERM refuses new
requests and lets those in flight finish for at most ``--shutdown-timeout`` seconds (0 by default, as vLLM's), then
fails the rest, so HTTP streams end with an SSE error event and ZeroMQ clients get an ErrorReply
(zoo/controlplane_shutdown.py).
The control plane serves the HTTP gateway with uvicorn in its own task group.

A hidden ``--fake-runner`` agent option swaps the model for ``TrivialRunner`` and a byte-level tokenizer
(tests and ``bench/controlplane_hop.py``); the control plane's matching option is ``--fake-tokenizer``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import logging
import math
import signal
import sys
from collections.abc import Sequence

import anyio

from backends.fake import FAKE_MODEL_NAME, ByteTokenizer
from controlplane.admission import AdmissionConfig
from controlplane.control_plane_config import ControlPlaneConfig
from controlplane.model_aliases import check_model_aliases, parse_model_alias
from engine.config import SIM_PREFIX
from observe.stats_stream import DEFAULT_STATS_ENDPOINT
from transport.sockets import DEFAULT_AGENT_ENDPOINT, DEFAULT_CLIENT_ENDPOINT
from zoo.agent_cmd import add_agent_args, run_agent
from zoo.controlplane_shutdown import stop_controlplane_on_signal
from zoo.engine_args import int_at_least, parse_lora_module
from zoo.gateway_args import add_gateway_args, gateway_config_from_args, idle_ttl_from_args
from zoo.keys import (
    add_controlplane_auth_args,
    api_keys_from_args,
    controlplane_curve_from_args,
    tenants_from_args,
)
from zoo.log_args import add_log_args, configure_logging_from_args
from zoo.tracing_args import add_tracing_args, span_export_from_args
from zoo.vllm_server_args import http_address

log = logging.getLogger(__name__)

DEFAULT_HTTP = "127.0.0.1:8000"
UDS_PREFIX = "unix:"  # --uds PATH: the gateway's address as "unix:PATH" (instead of HOST:PORT)


# --------------------------------------------------------------------------- zoo controlplane


def _shutdown_timeout(text: str) -> float:
    """``--shutdown-timeout``: seconds, finite and >= 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"seconds expected, got {text!r}") from None
    if not 0 <= value < math.inf:
        raise argparse.ArgumentTypeError(f"must be >= 0 and finite, got {text!r}")
    return value


def _controlplane_default(name: str):
    return next(f.default for f in dataclasses.fields(ControlPlaneConfig) if f.name == name)


def add_controlplane_args(p: argparse.ArgumentParser) -> None:
    add_log_args(p)
    p.add_argument("--listen", default=DEFAULT_AGENT_ENDPOINT, help="ROUTER endpoint agents connect to")
    p.add_argument(
        "--client-listen", default=DEFAULT_CLIENT_ENDPOINT, help="ROUTER endpoint for ZeroMQ clients ('none': off)"
    )
    p.add_argument("--http", default=DEFAULT_HTTP, help="HOST:PORT of the OpenAI-compatible API ('none': off)")
    p.add_argument(
        "--uds",
        default=None,
        metavar="PATH",
        help="serve the OpenAI-compatible API on this Unix domain socket instead of --http's port (vLLM's flag; "
        "a sidecar's or a local proxy's way in: owner and group may connect, mode 0660)",
    )
    add_gateway_args(p)  # the HTTP gateway's own (zoo/gateway_args.py)
    p.add_argument("--policy", default="hardware_aware", help="routing policy by name")
    p.add_argument(
        "--router-knobs",
        default=None,
        metavar="JSON",
        help='RouterConfig fields as one JSON object, e.g. \'{"slo_ttft_s": 2, "slo_tpot_s": 0.05}\' (the router\'s '
        "SLO, hardware_aware's terms: controlplane/router/router_config.py documents each; --policy and --cells set "
        "their own)",
    )
    p.add_argument(
        "--router-knobs-file",
        default=None,
        metavar="PATH",
        help="the RouterConfig knobs from a file instead (a JSON object, or a TOML file's [controlplane.router] "
        "table, e.g. zoo.toml), read again at SIGHUP: a router reload, nothing in flight dropped "
        "(controlplane/router_reload.py)",
    )
    p.add_argument("--model", default=None, help="checkpoint whose tokenizer the control plane uses (default: SmolLM2)")
    p.add_argument(
        "--chat-template",
        default=None,
        metavar="FILE|TEMPLATE",
        help="the chat template chats are rendered with instead of the model's: a Jinja file, or the template itself "
        "(vLLM's flag and rule; a request's own chat_template is refused)",
    )
    p.add_argument(
        "--model-alias",
        action="append",
        type=parse_model_alias,
        default=[],
        metavar="ALIAS=MODEL",
        help="another name clients may give as `model` for a served model or LoRA adapter; replies name MODEL "
        "(repeat for more; controlplane/model_aliases.py)",
    )
    p.add_argument(
        "--heartbeat-interval-s",
        type=float,
        default=_controlplane_default("heartbeat_interval_s"),
        help="how often agents send heartbeats (told in each Welcome)",
    )
    p.add_argument(
        "--heartbeat-timeout-s",
        type=float,
        default=_controlplane_default("heartbeat_timeout_s"),
        help="a node silent this long is dead (detected within timeout x 1.25); its requests resume elsewhere",
    )
    p.add_argument(
        "--max-resumes",
        type=int,
        default=_controlplane_default("max_resumes"),
        help="how many times a request may resume on another node after its node failed",
    )
    p.add_argument("--report-interval-s", type=float, default=0.25)
    p.add_argument("--offload-tokenize-chars", type=int, default=_controlplane_default("offload_tokenize_chars"),
                   help="a prompt of this many characters or more is tokenized off the loop (0: none)")  # fmt: skip
    admission = AdmissionConfig()
    p.add_argument("--max-queue-per-node", type=int, default=admission.max_queue_per_node)
    p.add_argument("--max-queue-global", type=int, default=admission.max_queue_global)
    p.add_argument(
        "--stats-listen", default=DEFAULT_STATS_ENDPOINT, help="PUB endpoint of the fleet stats stream ('none': off)"
    )
    p.add_argument("--stats-interval-s", type=float, default=0.5, help="seconds between FleetStats")
    p.add_argument(
        "--shutdown-timeout",
        type=_shutdown_timeout,
        default=0.0,
        metavar="SECONDS",
        help="at SIGTERM, refuse new requests (HTTP 503) and let those in flight finish for at most this long, then "
        "fail the rest (vLLM's flag; 0, the default: fail them at once; SIGINT or a second signal: at once)",
    )
    p.add_argument("--no-gc-freeze", action="store_true", help="keep the start-up heap collectable (observe/gc_pauses)")
    p.add_argument("--enable-log-requests", action="store_true", help="log each request taken or refused, its prompt "
                   "and parameters (vLLM's flag; logger zoo.requests: controlplane/request_log.py)")  # fmt: skip
    p.add_argument("--enable-log-outputs", action="store_true", help="with --enable-log-requests: log each "
                   "request's output as it ends (vLLM's flag)")  # fmt: skip
    p.add_argument("--max-log-len", type=int_at_least(0), default=None, metavar="N",
                   help="those lines keep a prompt's first N characters and ids (vLLM's; default: all)")  # fmt: skip
    p.add_argument("--fake-tokenizer", action="store_true", help=argparse.SUPPRESS)
    p.add_argument(
        "--cells", default=None, metavar="FILE", help="cells and traffic classes from this TOML (zoo.toml, a sim fleet)"
    )
    p.add_argument("--capacity-plan", default=None, metavar="FILE", help="the autoscaling signal's settings, "
                   "zoo:capacity_desired_nodes: GPU costs, node bounds, target utilisation (TOML; see "
                   "controlplane/capacity_plan.py; default: equal costs, target 0.7)")  # fmt: skip
    add_controlplane_lora_args(p)
    add_controlplane_auth_args(p)  # --curve-dir, --curve-clients, --api-keys, --protect-health, --open-metrics
    from zoo.spec_args import add_spec_pair_args

    add_spec_pair_args(p)  # --no-spec-pairs, --spec-pair-min-gain ...: weak drafting nodes for strong verifiers
    add_tracing_args(p, "zoo-controlplane")  # --otlp-traces-endpoint: each request's span


def add_controlplane_lora_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--lora-modules",
        nargs="+",
        type=parse_lora_module,
        default=[],
        metavar="NAME=PATH",
        help="LoRA adapters clients may select by `model` (served by agents started with --enable-lora)",
    )
    p.add_argument(
        "--allow-runtime-lora-updating",
        action="store_true",
        help="enable POST /v1/load_lora_adapter and /v1/unload_lora_adapter (they read the paths given)",
    )
    p.add_argument("--max-lora-rank", type=int, default=16, help="largest LoRA rank accepted at load")


def lora_check_from_args(args: argparse.Namespace, model_config=None):
    """The control plane's check of an adapter directory: against the base model when its config is known."""
    from backends.checkpoint.peft_adapter import check_peft_directory, load_peft_adapter

    if model_config is None:
        return check_peft_directory
    return lambda path: load_peft_adapter(path, model_config, args.max_lora_rank)


def model_aliases_from_args(args: argparse.Namespace) -> dict[str, str]:
    """--model-alias ALIAS=MODEL ... as a dict, checked (ValueError: an alias given twice, of itself, a chain)."""
    aliases: dict[str, str] = {}
    for alias, target in getattr(args, "model_alias", None) or []:
        if aliases.setdefault(alias, target) != target:
            raise ValueError(f"--model-alias {alias}: given twice ({aliases[alias]!r} and {target!r})")
    check_model_aliases(aliases)
    return aliases


def controlplane_from_args(args: argparse.Namespace):
    from agent.node_agent import served_model_name
    from backends.checkpoint.chat_template import read_chat_template
    from controlplane.cells import CellsConfig, load_cells
    from controlplane.router.router_config import RouterConfig
    from controlplane.router.router_knobs import parse_router_knobs
    from controlplane.router_reload import read_knobs_file
    from controlplane.server import ControlPlane, ControlPlaneConfig

    knobs_file = getattr(args, "router_knobs_file", None)
    if knobs_file is not None and getattr(args, "router_knobs", None):
        raise ValueError("--router-knobs and --router-knobs-file: give the knobs one way")
    # a bad knob refused before the model loads
    knobs = read_knobs_file(knobs_file) if knobs_file else parse_router_knobs(getattr(args, "router_knobs", None))
    model_aliases = model_aliases_from_args(args)
    template = getattr(args, "chat_template", None)
    template = read_chat_template(template) if template is not None else None  # refused before the model loads
    if template is not None and (args.fake_tokenizer or (args.model or "").startswith(SIM_PREFIX)):
        raise ValueError("--chat-template: the fake and sim tokenizers have no chat template to replace")
    model_config = None
    if args.fake_tokenizer:
        tokenizer, model_name = ByteTokenizer(), FAKE_MODEL_NAME
    elif args.model is not None and args.model.startswith(SIM_PREFIX):
        from backends.sim.engine import SimTokenizer
        from backends.sim.model_shapes import sim_model

        shape = sim_model(args.model)
        tokenizer, model_name = SimTokenizer(shape.vocab_size, shape.eos_token_id), shape.name
    else:
        from backends.checkpoint import load_checkpoint

        checkpoint = load_checkpoint(args.model)
        tokenizer, model_name, model_config = checkpoint.tokenizer, served_model_name(args.model), checkpoint.config
        if template is not None:
            tokenizer = tokenizer.with_chat_template(template)
    config = ControlPlaneConfig(
        agent_endpoint=args.listen,
        client_endpoint=None if args.client_listen == "none" else args.client_listen,
        model_name=model_name,
        model_aliases=model_aliases,
        router=RouterConfig(
            policy=args.policy,
            cells=load_cells(args.cells) if args.cells else CellsConfig(),
            **knobs,
        ),
        admission=AdmissionConfig(max_queue_per_node=args.max_queue_per_node, max_queue_global=args.max_queue_global),
        heartbeat_interval_s=args.heartbeat_interval_s,
        heartbeat_timeout_s=args.heartbeat_timeout_s,
        max_resumes=args.max_resumes,
        report_interval_s=args.report_interval_s,
        offload_tokenize_chars=args.offload_tokenize_chars,
        curve=controlplane_curve_from_args(args),
        tenants=tenants_from_args(args),
        lora_modules=list(args.lora_modules),
        allow_runtime_lora_updating=args.allow_runtime_lora_updating,
        sleep_idle_ttl_s=idle_ttl_from_args(args),
        sleep_mode=getattr(args, "enable_sleep_mode", False),
    )
    from controlplane.split_handoff import attach_split, make_control_plane_policy
    from zoo.spec_args import spec_pair_config_from_args

    config.spec_pairs = spec_pair_config_from_args(args)
    config.capacity = capacity_plan_from_args(args)
    cp = ControlPlane(
        config,
        tokenizer,
        lora_check=lora_check_from_args(args, model_config),
        policy=make_control_plane_policy(config.router),
    )
    attach_split(cp)  # --policy pd_split: the split's router hears the registry and asks for migrations
    return cp


def run_controlplane(args: argparse.Namespace) -> int:
    configure_logging_from_args(args, "controlplane")
    try:
        spans = span_export_from_args(args)
    except ValueError as e:
        raise SystemExit(f"zoo controlplane: --otlp-traces-endpoint: {e}") from None
    cp = controlplane_from_args(args)
    if spans is not None:
        from controlplane.request_spans import RequestSpans

        cp.path.spans = RequestSpans(spans, spans.config.sample_ratio)
    if getattr(args, "enable_log_requests", False):
        from controlplane.request_log import RequestLog

        outputs = getattr(args, "enable_log_outputs", False)
        cp.path.request_log = RequestLog(cp.path.tokenizer, getattr(args, "max_log_len", None), outputs)
    http = http_address(args, DEFAULT_HTTP)  # --http, or vLLM's --host/--port (zoo/vllm_server_args.py)
    if getattr(args, "uds", None):
        http = UDS_PREFIX + args.uds
    stats = None if args.stats_listen == "none" else args.stats_listen
    from controlplane.gateway.api_keys import ApiKeyRing
    from zoo.keys_reload import reload_api_keys

    keys = ApiKeyRing.of(api_keys_from_args(args))  # the gateway's keys, which a SIGHUP re-reads (--api-keys FILE)
    serve = functools.partial(
        _serve_controlplane,
        reload_keys=functools.partial(reload_api_keys, args, keys, cp) if keys and args.api_keys else None,
        knobs_file=getattr(args, "router_knobs_file", None),
        gateway_config=gateway_config_from_args(args),
        shutdown_timeout_s=args.shutdown_timeout,
        gc_freeze=not getattr(args, "no_gc_freeze", False),
    )
    try:
        return anyio.run(serve, cp, http, stats, args.stats_interval_s, keys)
    finally:
        if spans is not None:
            spans.close()  # what is queued goes out


async def _serve_controlplane(
    cp,
    http: str | None,
    stats_listen: str | None = None,
    stats_interval_s=0.5,
    api_keys=None,
    knobs_file=None,
    gateway_config=None,
    shutdown_timeout_s: float = 0.0,
    gc_freeze: bool = True,
    reload_keys=None,
) -> int:
    from observe.controlplane_exporter import ControlPlaneExporter
    from observe.exporter import SnapshotCollector
    from observe.gc_pauses import GcPauses, gc_metrics, settle_heap
    from observe.stats_stream import FleetObserver, StatsPublisher

    exporter = ControlPlaneExporter(cp.stats)
    exporter.registry.register(SnapshotCollector(gc_metrics(GcPauses().install())))  # the collector's pauses
    if cp.path.spans is not None:  # --otlp-traces-endpoint: its spans' counts (observe/span_metrics.py)
        from observe.span_metrics import span_metrics

        exporter.registry.register(SnapshotCollector(span_metrics(cp.path.spans.export)))
    observer = FleetObserver(cp, exporter, ebpf_source=cp.latest_probe_snapshot)
    async with anyio.create_task_group() as tg:
        gateways: list = []  # the gateway's HttpInFlight: the shutdown's drain waits for its requests too
        tg.start_soon(stop_controlplane_on_signal, cp, tg.cancel_scope, shutdown_timeout_s, gateways)
        if knobs_file is not None or reload_keys is not None:
            tg.start_soon(_reload_on_sighup, cp, knobs_file, reload_keys)
        await tg.start(cp.run)
        print(f"control plane: agents {cp.agent_endpoint}, clients {cp.client_endpoint}", flush=True)
        if stats_listen is not None:
            endpoint = await tg.start(StatsPublisher(observer, stats_listen, stats_interval_s).run)
            print(f"fleet stats: {endpoint} (zoo top --control {endpoint})", flush=True)
        if http is not None:
            uds = http.removeprefix(UDS_PREFIX) if http.startswith(UDS_PREFIX) else None
            host, _, port = (None, "", "0") if uds is not None else http.rpartition(":")
            serve_http = functools.partial(
                _serve_http, gateway_config=gateway_config, api_keys=api_keys, exporter=exporter, gateways=gateways
            )
            await tg.start(
                functools.partial(serve_http, uds=uds), cp, host, int(port), exporter.asgi_app(observer.poll)
            )
            scheme = "https" if gateway_config is not None and gateway_config.ssl_certfile else "http"
            url = f"{scheme}://{http}" if uds is None else f"{scheme}://localhost"
            where = "" if uds is None else f" on the Unix socket {uds} (curl --unix-socket {uds} {url}/v1/models)"
            print(f"OpenAI API: {url}/v1  health: {url}/health  metrics: {url}/metrics{where}")
            print(f"Prometheus HTTP service discovery of the agents: {url}/metrics/targets", flush=True)
        if gc_freeze:  # started: what start-up made is never walked by a collection again
            settle_heap()
    return 0


async def _serve_http(
    cp,
    host: str,
    port: int,
    metrics_app=None,
    gateway_config=None,
    *,
    api_keys=None,
    exporter=None,
    gateways: list | None = None,
    uds: str | None = None,
    task_status=anyio.TASK_STATUS_IGNORED,
) -> None:
    """The OpenAI gateway on HOST:PORT (header and body read deadlines, JSON errors: gateway/http_server.py);
    reports the uvicorn server once it listens; raises RuntimeError if uvicorn stops on its own.
    api_keys: an ApiKeyConfig (gateway/api_keys.py), or None for an open gateway; exporter: the control plane's
    Prometheus exporter, which then exports the gateway's batches, files and HTTP requests too; gateways: a list the
    gateway's HttpInFlight (gateway/shutdown_gate.py) is added to, for the shutdown's drain."""
    from controlplane.gateway.app import GatewayConfig, create_app
    from controlplane.gateway.http_server import serve_gateway
    from observe.prometheus_sd import http_sd_app

    config = gateway_config or GatewayConfig()
    sd_app = http_sd_app(cp.stats) if metrics_app is not None else None
    app = create_app(cp, metrics_app=metrics_app, config=config, api_keys=api_keys, sd_app=sd_app)
    if gateways is not None:
        gateways.append(app.state.http_in_flight)
    if exporter is not None:  # the gateway's batches, files and responses on the same /metrics
        from observe.batch_metrics import batch_metrics
        from observe.exporter import SnapshotCollector
        from observe.http_metrics import instrument_gateway
        from observe.responses_metrics import responses_metrics

        exporter.registry.register(SnapshotCollector(batch_metrics(app.state.batches, app.state.uploads)))
        responses = app.state.responses  # the Responses API's store and background runner
        collect = responses_metrics(
            responses.store, responses.background, responses.conversations, app.state.chat_completions
        )
        exporter.registry.register(SnapshotCollector(collect))
        instrument_gateway(app, exporter.registry)  # its HTTP requests, as vLLM's API server exports them
        if app.state.api_keys is not None:  # its keys: refusals, reloads (observe/api_key_metrics.py)
            from observe.api_key_metrics import api_key_metrics

            exporter.registry.register(SnapshotCollector(api_key_metrics(app.state.api_keys)))
    await serve_gateway(app, host, port, config, uds=uds, task_status=task_status)


async def _reload_on_sighup(cp, knobs_file: str | None, reload_keys) -> None:
    """At every SIGHUP, read ``knobs_file`` again and reload the router with it (controlplane/router_reload.py), and
    with ``reload_keys`` the API key file (zoo/keys_reload.py); a refused file is logged and counted, what it would
    have replaced left as it was."""
    from controlplane.router_reload import reload_from_file

    with anyio.open_signal_receiver(signal.SIGHUP) as signals:
        async for _ in signals:
            if knobs_file is not None:
                reload_from_file(cp, knobs_file)
            if reload_keys is not None:
                reload_keys()


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m zoo.serve controlplane|agent ...`` (the same flags as ``zoo controlplane|agent``)."""
    parser = argparse.ArgumentParser(prog="python -m zoo.serve")
    sub = parser.add_subparsers(dest="command", required=True)
    add_controlplane_args(sub.add_parser("controlplane"))
    add_agent_args(sub.add_parser("agent"))
    args = parser.parse_args(argv)
    return run_controlplane(args) if args.command == "controlplane" else run_agent(args)


def capacity_plan_from_args(args: argparse.Namespace):
    """``--capacity-plan FILE``'s CapacityPlanConfig (None: the defaults); a file that cannot be used ends the
    start with its reason."""
    path = getattr(args, "capacity_plan", None)
    if path is None:
        return None
    from controlplane.capacity_plan import load_capacity_plan

    try:
        return load_capacity_plan(path)
    except (OSError, ValueError) as e:
        raise SystemExit(f"zoo controlplane: --capacity-plan: {e}") from None


if __name__ == "__main__":
    sys.exit(main())
