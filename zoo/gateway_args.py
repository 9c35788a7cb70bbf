"""`zoo controlplane`'s flags for its HTTP gateway (vLLM's names where it has them) and the GatewayConfig they make:
CORS, TLS, the access log, OpenAI batches and files, the stores' bounds, the tool-call and reasoning parsers,
the default sampling parameters, whether POST /start_profile and /stop_profile are served.
SystemExit naming the flag of a bad value, at start."""

from __future__ import annotations

import argparse
import json
import logging
import ssl
from pathlib import Path

from zoo.profiler_args import add_profiler_args, own_profile_dir, profiler_config_from_args
from zoo.vllm_server_args import add_vllm_server_args, cors_origins

log = logging.getLogger(__name__)


def add_gateway_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--generation-config",
        default="auto",
        metavar="auto|vllm|DIR",
        help="the default sampling parameters of a request that leaves them out, as vLLM's flag: 'auto' from the "
        "--model folder's generation_config.json (temperature, top_p, top_k, min_p, repetition_penalty; "
        "max_new_tokens as a chat's default max_tokens), 'vllm' none, or a folder's generation_config.json",
    )
    p.add_argument(
        "--override-generation-config",
        default=None,
        metavar="JSON",
        help='those defaults set or changed, e.g. \'{"temperature": 0.6, "top_p": 0.95}\' (vLLM\'s flag)',
    )
    p.add_argument(
        "--cors-origins",
        default="*",
        help="origins a browser page may call the API from: '*' (any), a comma list of scheme://host[:port], or "
        "'none' (no CORS headers)",
    )
    add_vllm_server_args(p)  # --host/--port, --allowed-origins/-methods/-headers, --allow-credentials
    p.add_argument("--ssl-keyfile", default=None, metavar="PEM", help="HTTPS: the gateway's private key (vLLM's flag)")
    p.add_argument(
        "--ssl-certfile", default=None, metavar="PEM", help="HTTPS: the gateway's certificate chain (vLLM's flag)"
    )
    p.add_argument(
        "--ssl-ca-certs", default=None, metavar="PEM", help="HTTPS: the CA that issues the clients' certificates"
    )
    p.add_argument(
        "--ssl-cert-reqs",
        type=int,
        choices=(0, 1, 2),
        default=0,
        help="HTTPS: 2 requires a client certificate from --ssl-ca-certs (mutual TLS), 1 checks one if sent, 0 none",
    )
    p.add_argument(
        "--disable-access-log",
        "--disable-uvicorn-access-log",  # vLLM's name for it
        action="store_true",
        help="no access log line per HTTP request (logger zoo.access: controlplane/gateway/access_log.py)",
    )
    p.add_argument(
        "--disable-access-log-for-endpoints",
        default=None,
        metavar="PATHS",
        help="a comma list of paths the access log leaves out (vLLM's flag; default: /metrics,/metrics/targets,"
        "/health,/ping)",
    )
    p.add_argument(
        "--batch-class",
        default=None,
        metavar="CLASS",
        help="the traffic class OpenAI batches (/v1/batches) run in, e.g. a low-priority 'batch' class of --cells "
        "(default: each request's own)",
    )
    p.add_argument(
        "--files-dir",
        default=None,
        metavar="DIR",
        help="keep /v1/files uploads, /v1/batches, stored /v1/responses and /v1/conversations on disk here, so a "
        "restarted control plane resumes its batches and still has its responses and conversations (default: in "
        "memory)",
    )
    p.add_argument(
        "--batch-concurrency",
        type=int,
        default=32,
        metavar="N",
        help="requests of OpenAI batches in flight at once, over every batch (default 32)",
    )
    p.add_argument(
        "--responses-store",
        default=None,
        metavar="N,MIB",
        help="stored /v1/responses: at most N of them and MIB MiB in all (default 1024,64; 0,0 stores none)",
    )
    p.add_argument(
        "--conversations-store",
        default=None,
        metavar="N,MIB",
        help="/v1/conversations: at most N of them and MIB MiB of items in all (default 4096,64; 0,0 keeps none)",
    )
    p.add_argument(
        "--tool-call-parser",
        default="hermes",
        choices=["hermes", "llama3_json", "mistral", "pythonic", "none"],
        help="how tool_choice auto reads the model's calls, as vLLM's flag (gateway/tool_parsers.py; none: refused)",
    )
    p.add_argument("--enable-auto-tool-choice", action="store_true", help="taken for vLLM's command lines: "
                   "tool_choice auto is on whenever --tool-call-parser is not none")  # fmt: skip
    for flag, always in (
        ("--enable-server-load-tracking", "GET /load always counts the requests being answered"),
        ("--enable-prompt-tokens-details", "usage always has prompt_tokens_details.cached_tokens"),
    ):
        p.add_argument(flag, action="store_true", help=f"taken for vLLM's command lines: {always}")
    p.add_argument(
        "--stream-obfuscation",
        action="store_true",
        help="streamed events carry OpenAI's 'obfuscation' padding (to a multiple of 64 bytes) against token-size "
        "side channels, unless a request's stream_options.include_obfuscation is false (default: only when asked)",
    )
    p.add_argument(
        "--exclude-tools-when-tool-choice-none",
        action="store_true",
        help="taken for vLLM's command lines: tool_choice none always leaves a request's tools out of its prompt",
    )
    p.add_argument(
        "--response-role",
        default="assistant",
        metavar="ROLE",
        help="a chat reply's role when the prompt ends with a new message's header (vLLM's flag; default assistant)",
    )
    p.add_argument("--reasoning-parser", choices=["deepseek_r1", "qwen3"], help="a reasoning model's thinking "
                   "as the reply's reasoning, apart from its content (gateway/reasoning_parsers.py)")  # fmt: skip
    p.add_argument(
        "--default-chat-template-kwargs",
        default=None,
        metavar="JSON",
        help="chat template variables every chat gets, e.g. '{\"enable_thinking\": false}' (vLLM's flag); a "
        "request's own chat_template_kwargs win",
    )
    p.add_argument(
        "--enable-force-include-usage",
        action="store_true",
        help="streamed chats and completions end with a usage chunk even when stream_options does not ask (vLLM's)",
    )
    p.add_argument(
        "--enable-per-request-metrics",
        action="store_true",
        help="replies carry vLLM's per-request 'metrics' (queue, first token, generation, mean ITL, tokens/s: "
        "controlplane/gateway/request_timing.py); a stream's on its final usage chunk",
    )
    p.add_argument(
        "--fingerprint-mode",
        default="full",
        metavar="full|hash|custom|none",
        help="replies' system_fingerprint: 'full' zoo-<backend>-<gpu>-<digest> of the node that served it (default), "
        "'hash' zoo-<digest>, 'custom' --fingerprint-value, 'none' null (vLLM's flag)",
    )
    p.add_argument(
        "--fingerprint-value", default=None, metavar="TEXT", help="the system_fingerprint of --fingerprint-mode custom"
    )
    p.add_argument(
        "--enable-tokenizer-info-endpoint",
        action="store_true",
        help="serve GET /tokenizer_info: the tokenizer's special tokens, added tokens and chat template (vLLM's)",
    )
    p.add_argument(
        "--enable-sleep-mode",
        action="store_true",
        help="serve POST /sleep, /wake_up and GET /is_sleeping: nodes give their KV cache (level 1) or their weights "
        "too (level 2) back to the device until woken, the others serving meanwhile (vLLM's flag)",
    )
    p.add_argument(
        "--sleep-idle-ttl",
        type=float,
        default=0.0,
        metavar="S",
        help="with --enable-sleep-mode: after S seconds without an inference request every node sleeps (level 1), "
        "and the next request wakes them first (vLLM's flag; 0: never)",
    )
    add_profiler_args(p, "serve POST /start_profile and /stop_profile, which run each node's own --profiler-config")
    p.add_argument(
        "--chat-completions-store",
        default=None,
        metavar="N,MIB",
        help="/v1/chat/completions with store: at most N of them and MIB MiB in all (default 1024,64; 0,0 keeps none)",
    )
    p.add_argument(
        "--store-owner-share",
        type=float,
        default=None,
        metavar="F",
        help="in the three stores, while full, the largest owner (an API key's tenant) above this share of a bound "
        "loses its own least recently used first, so one tenant cannot evict the others' (default 0.25; 1: plain LRU)",
    )


def gateway_config_from_args(args: argparse.Namespace):
    """The gateway's config from ``zoo controlplane``'s flags (``--cors-origins``, ``--batch-class``,
    ``--batch-concurrency``, ``--files-dir``, ``--tool-call-parser``, ``--reasoning-parser``, the access log's two, the
    ``--ssl-*`` four, the stores' three); SystemExit on a bad value (a --ssl-* file that cannot serve)."""
    from controlplane.gateway.app import GatewayConfig
    from controlplane.gateway.batch_runner import BatchRunnerConfig

    origins = cors_origins(args)  # --cors-origins, or vLLM's --allowed-origins (zoo/vllm_server_args.py)
    try:
        batches = BatchRunnerConfig(
            concurrency=getattr(args, "batch_concurrency", 32), traffic_class=getattr(args, "batch_class", None)
        )
    except ValueError as e:
        raise SystemExit(f"zoo controlplane: --batch-concurrency: {e}") from None
    access_log = {"access_log": not getattr(args, "disable_access_log", False)}
    excluded = getattr(args, "disable_access_log_for_endpoints", None)
    if excluded is not None:
        access_log["access_log_exclude"] = tuple(path.strip() for path in excluded.split(",") if path.strip())
    tls = {name: getattr(args, name, None) for name in ("ssl_keyfile", "ssl_certfile", "ssl_ca_certs")}
    tls["ssl_cert_reqs"] = getattr(args, "ssl_cert_reqs", 0)
    stores = _store_bounds(args)
    raw = getattr(args, "default_chat_template_kwargs", None)
    template_defaults = _json_object(raw, "--default-chat-template-kwargs") if raw is not None else {}
    from controlplane.gateway.system_fingerprint import FingerprintConfig

    try:
        fingerprint = FingerprintConfig(
            getattr(args, "fingerprint_mode", "full"), getattr(args, "fingerprint_value", None)
        )
    except ValueError as e:
        raise SystemExit(f"zoo controlplane: {e}") from None
    profiler = profiler_config_from_args(args)  # --profiler-config: the profile routes, and this process's own
    try:
        config = GatewayConfig(
            cors_allowed_origins=origins,
            cors_allowed_methods=tuple(getattr(args, "allowed_methods", ("*",))),
            cors_allowed_headers=tuple(getattr(args, "allowed_headers", ("*",))),
            cors_allow_credentials=getattr(args, "allow_credentials", False),
            batches=batches,
            files_dir=getattr(args, "files_dir", None),
            tool_call_parser=None if (parser := getattr(args, "tool_call_parser", "hermes")) == "none" else parser,
            reasoning_parser=getattr(args, "reasoning_parser", None),
            sampling_defaults=sampling_defaults_from_args(args),
            default_chat_template_kwargs=template_defaults,
            force_include_usage=getattr(args, "enable_force_include_usage", False),
            per_request_metrics=getattr(args, "enable_per_request_metrics", False),
            response_role=getattr(args, "response_role", "assistant"),
            stream_obfuscation=getattr(args, "stream_obfuscation", False),
            fingerprint=fingerprint,
            profiling=profiler is not None,
            profile_dir=own_profile_dir(profiler),
            tokenizer_info_endpoint=getattr(args, "enable_tokenizer_info_endpoint", False),
            sleep_mode=getattr(args, "enable_sleep_mode", False),
            **access_log,
            **tls,
            **stores,
        )
    except ValueError as e:
        flag = "--ssl-*" if "ssl" in str(e) else "--cors-origins"
        flag = "--default-chat-template-kwargs" if "default_chat_template_kwargs" in str(e) else flag
        flag = "--response-role" if "response_role" in str(e) else flag
        raise SystemExit(f"zoo controlplane: {flag}: {e}") from None
    check_tls_files(config)
    return config


def sampling_defaults_from_args(args: argparse.Namespace) -> dict[str, float | int]:
    """The gateway's sampling defaults (controlplane/gateway/sampling_defaults.py) from ``--generation-config`` and
    ``--override-generation-config``; logged when there are any (as vLLM warns); SystemExit naming a bad one."""
    from controlplane.gateway.sampling_defaults import sampling_defaults

    source, folder = getattr(args, "generation_config", "auto"), None
    if source == "auto":
        model = getattr(args, "model", None)
        folder = Path(model) if model and Path(model).is_dir() else None  # a GGUF file or sim: model has none
    elif source != "vllm":
        folder = Path(source)
        if not folder.is_dir():
            raise SystemExit(f"zoo controlplane: --generation-config: {source}: not a folder (nor auto, vllm)")
    config, path = {}, folder / "generation_config.json" if folder is not None else None
    if path is not None and path.is_file():
        try:
            text = path.read_text(errors="replace")
        except OSError as e:
            raise SystemExit(f"zoo controlplane: --generation-config: {path}: cannot read it ({e})") from None
        config = _json_object(text, f"--generation-config: {path}")
    raw = getattr(args, "override_generation_config", None)
    override = _json_object(raw, "--override-generation-config") if raw is not None else {}
    try:
        defaults = sampling_defaults(config, override)
    except ValueError as e:
        raise SystemExit(f"zoo controlplane: --override-generation-config (or {path}): {e}") from None
    if defaults:
        log.warning("requests that leave out sampling parameters get these (%s): %s", path or "override", defaults)
    return defaults


def _json_object(text: str, where: str) -> dict:
    try:
        value = json.loads(text)
    except (ValueError, RecursionError) as e:
        raise SystemExit(f"zoo controlplane: {where}: not JSON ({e})") from None
    if not isinstance(value, dict):
        raise SystemExit(f"zoo controlplane: {where}: expected a JSON object, got {type(value).__name__}")
    return value


def _store_bounds(args: argparse.Namespace) -> dict:
    """GatewayConfig's response, conversation and chat completion store bounds from ``--responses-store N,MIB``,
    ``--conversations-store N,MIB``, ``--chat-completions-store N,MIB`` and ``--store-owner-share F`` (those given);
    SystemExit naming a malformed one."""
    out: dict = {}
    for flag, prefix, bytes_name in (("responses_store", "responses_store", "responses_store_bytes"),
                                     ("conversations_store", "conversations", "conversations_bytes"),
                                     ("chat_completions_store", "chat_completions_store",
                                      "chat_completions_store_bytes")):  # fmt: skip
        raw = getattr(args, flag, None)
        if raw is None:
            continue
        count, _, mib = raw.partition(",")
        try:
            n, num_bytes = int(count), int(float(mib) * 1024 * 1024)
        except (ValueError, OverflowError):
            n = num_bytes = -1
        if n < 0 or num_bytes < 0:
            raise SystemExit(f"zoo controlplane: --{flag.replace('_', '-')}: expected N,MIB (both >= 0), got {raw!r}")
        out[f"{prefix}_max"], out[bytes_name] = n, num_bytes
    share = getattr(args, "store_owner_share", None)
    if share is not None:
        if not 0 < share <= 1:
            raise SystemExit(f"zoo controlplane: --store-owner-share: must be in (0, 1], got {share}")
        for name in ("responses_owner_share", "conversations_owner_share", "chat_completions_owner_share"):
            out[name] = share
    return out


def check_tls_files(config) -> None:
    """SystemExit naming the flag when a --ssl-* file cannot be read as what it must be (at start, not at the first
    connection): the certificate chain, the key that goes with it, the clients' CA."""
    if config.ssl_certfile is None:
        return
    for flag, path in (("--ssl-certfile", config.ssl_certfile), ("--ssl-ca-certs", config.ssl_ca_certs)):
        if path is None:
            continue
        try:
            ssl.create_default_context().load_verify_locations(cafile=path)  # PEM certificates, or it raises
        except (OSError, ssl.SSLError) as e:
            raise SystemExit(f"zoo controlplane: {flag}: {path}: not a readable PEM certificate ({e})") from None
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER).load_cert_chain(config.ssl_certfile, config.ssl_keyfile)
    except (OSError, ssl.SSLError) as e:
        why = f"not a readable key for --ssl-certfile's certificate ({e})"
        raise SystemExit(f"zoo controlplane: --ssl-keyfile: {config.ssl_keyfile}: {why}") from None


def idle_ttl_from_args(args: argparse.Namespace) -> float:
    """``--sleep-idle-ttl``'s seconds (0: off); as vLLM's, only with ``--enable-sleep-mode``."""
    ttl_s = getattr(args, "sleep_idle_ttl", 0.0)
    if not 0 <= ttl_s < float("inf"):
        raise SystemExit(f"zoo controlplane: --sleep-idle-ttl must be >= 0 seconds, got {ttl_s}")
    if ttl_s and not getattr(args, "enable_sleep_mode", False):
        raise SystemExit("zoo controlplane: --sleep-idle-ttl needs --enable-sleep-mode (vLLM's rule)")
    return ttl_s
