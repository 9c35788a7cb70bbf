"""The gateway's settings (gateway/app.py serves with them): defaults, bounds of what it keeps, and their checks."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from controlplane.gateway.batch_runner import BatchRunnerConfig
from controlplane.gateway.reasoning_parsers import REASONING_PARSERS
from controlplane.gateway.sampling_defaults import DEFAULT_FIELDS
from controlplane.gateway.system_fingerprint import FingerprintConfig
from controlplane.gateway.tool_parsers import TOOL_CALL_PARSERS

CHAT_FLAGS = ("add_generation_prompt", "continue_final_message")  # a request's own, not template defaults

PROBE_PATHS = ("/metrics", "/metrics/targets", "/health", "/ping", "/load")  # what probes, scrapers, balancers poll
_ROLE = re.compile(r"[A-Za-z0-9_\-]{1,64}")
_ORIGIN = re.compile(r"https?://[A-Za-z0-9.\-\[\]:]+")


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    default_completion_max_tokens: int = 16  # OpenAI's default for /v1/completions
    default_chat_max_tokens: int = 512  # OpenAI's is "up to the context"; the engine needs a number
    max_body_bytes: int = 8 * 1024 * 1024  # a larger request body is refused with 413
    owned_by: str = "silicon-zoo"
    # a request's headers, and then its body, must arrive within this (else 408 and the connection closes)
    request_read_timeout_s: float = 30.0
    keep_alive_timeout_s: float = 5.0  # an idle kept-alive connection is closed after this (uvicorn's)
    models_wait_s: float = 30.0  # GET /v1/models before any node has joined waits this long for one
    # the format tool_choice "auto" reads calls in (gateway/tool_calls.py); None: "auto" is refused
    tool_call_parser: str | None = "hermes"
    # how a reasoning model's thinking is split from its answer (gateway/reasoning_parsers.py); None: not split
    reasoning_parser: str | None = None
    # the sampling parameters a request that leaves them out gets (gateway/sampling_defaults.py: the model's
    # generation config and --override-generation-config; "max_tokens" a chat's and a response's default)
    sampling_defaults: dict[str, float | int] = field(default_factory=dict)
    # chat template variables every chat gets under its own (vLLM's --default-chat-template-kwargs: e.g. a reasoning
    # model's {"enable_thinking": false}); a request's chat_template_kwargs, and its reasoning effort, win
    default_chat_template_kwargs: dict[str, Any] = field(default_factory=dict)
    # streamed chats and completions end with a usage chunk even when stream_options does not ask for it (vLLM's
    # --enable-force-include-usage)
    force_include_usage: bool = False
    # replies carry vLLM's per-request ``metrics`` (request_timing.py; --enable-per-request-metrics)
    per_request_metrics: bool = False
    # a chat reply's role when the prompt ends with a new message's header (vLLM's --response-role; a request that
    # continues its last message instead gets that message's role, as vLLM's)
    response_role: str = "assistant"
    # streams pad their events against size side channels (stream_obfuscation.py) unless a request's
    # stream_options.include_obfuscation says otherwise (OpenAI's default is on; vLLM has none: off)
    stream_obfuscation: bool = False
    # POST /start_profile and /stop_profile are served (vLLM's, with --profiler-config: profile_routes.py)
    profiling: bool = False
    # with it, where the control plane's own profile goes (frontend_profile.py; None: ignore_frontend, or no directory)
    profile_dir: str | None = None
    # GET /tokenizer_info answers the tokenizer's configuration (vLLM's --enable-tokenizer-info-endpoint; off: 404)
    tokenizer_info_endpoint: bool = False
    # POST /sleep, /wake_up and GET /is_sleeping are served (vLLM's --enable-sleep-mode: sleep_routes.py)
    sleep_mode: bool = False
    # what a reply's system_fingerprint says (system_fingerprint.py; --fingerprint-mode, --fingerprint-value)
    fingerprint: FingerprintConfig = field(default_factory=FingerprintConfig)
    # /v1/responses with ``store``: at most this many responses, and bytes of them, kept (0: none is kept)
    responses_store_max: int = 1024
    responses_store_bytes: int = 64 * 1024 * 1024
    responses_owner_share: float = 0.25  # the largest owner above this share loses its own first when full
    # /v1/chat/completions with ``store`` (chat_completion_store.py): at most this many completions, and bytes of
    # them, kept (the least recently used dropped first; 0: none is kept)
    chat_completions_store_max: int = 1024
    chat_completions_store_bytes: int = 64 * 1024 * 1024
    chat_completions_owner_share: float = 0.25  # the largest owner above this share loses its own first when full
    # /v1/responses with ``background``: at most this many run at once, and of them one owner's (an API key's
    # tenant, or the key; an open gateway's requests are one owner's) (gateway/background_responses.py)
    responses_background_max: int = 256
    responses_background_max_per_owner: int = 64
    # /v1/conversations (conversation_store.py): at most this many conversations, and bytes of their items, kept
    # (the least recently used dropped first; 0: none is kept); one conversation may not grow past the bytes
    conversations_max: int = 4096
    conversations_bytes: int = 64 * 1024 * 1024
    conversations_owner_share: float = 0.25  # the largest owner above this share loses its own first when full
    # CORS (browsers calling the API from a web page): the origins allowed, "*" any (vLLM's default, without
    # credentials: the API key travels in a header a page must set itself); () turns CORS off
    cors_allowed_origins: tuple[str, ...] = ("*",)
    # the CORS answer's methods and headers, and whether credentials are allowed (vLLM's --allowed-methods,
    # --allowed-headers, --allow-credentials)
    cors_allowed_methods: tuple[str, ...] = ("*",)
    cors_allowed_headers: tuple[str, ...] = ("*",)
    cors_allow_credentials: bool = False
    # OpenAI's Files and Batch APIs (batch_routes.py): an upload's largest size, and the file store's bounds
    files_upload_max_bytes: int = 100 * 1024 * 1024
    files_upload_concurrency: int = 4  # uploads read at once (each held in memory while parsed); more wait
    files_max: int = 10_000
    files_store_bytes: int = 512 * 1024 * 1024
    # OpenAI's Uploads (upload_routes.py): the parts of uploads not yet completed, held in memory (on disk with
    # files_dir: upload_parts.py), at most this many bytes in all (past it a part is a 413; an upload declares at
    # most files_store_bytes)
    uploads_pending_bytes: int = 512 * 1024 * 1024
    # where files, batches, stored responses, conversations, chat completions and pending uploads' parts are kept,
    # so a restarted gateway resumes its batches and uploads and still has the rest (None: in memory only)
    files_dir: str | None = None
    batches: BatchRunnerConfig = field(default_factory=BatchRunnerConfig)  # how batches run (batch_runner.py)
    # with tracing on, every HTTP request gets a span (http_span.py) but these: the probes' and scrapers' paths
    untraced_paths: tuple[str, ...] = PROBE_PATHS
    # one access log line per request (access_log.py; vLLM logs every request through uvicorn's), but these paths
    access_log: bool = True
    access_log_exclude: tuple[str, ...] = PROBE_PATHS
    # HTTPS (vLLM's --ssl-* flags): the server's key and certificate chain (PEM files); with ssl_ca_certs and
    # ssl_cert_reqs = ssl.CERT_REQUIRED (2) a client must present a certificate that CA issued (mutual TLS)
    ssl_keyfile: str | None = None
    ssl_certfile: str | None = None
    ssl_ca_certs: str | None = None
    ssl_cert_reqs: int = 0  # ssl.CERT_NONE; 1 CERT_OPTIONAL, 2 CERT_REQUIRED
    # while the control plane drains (shutdown_gate.py) every other path answers 503: these stay open to probes
    open_while_draining: tuple[str, ...] = (*PROBE_PATHS, "/version")

    @property
    def chat_max_tokens(self) -> int:
        """A chat's (or a response's) max_tokens when it gives none: the model's generation config's
        ``max_new_tokens`` when it has one (vLLM's rule), else ``default_chat_max_tokens``."""
        return int(self.sampling_defaults.get("max_tokens", self.default_chat_max_tokens))

    def __post_init__(self) -> None:
        for name in ("default_completion_max_tokens", "default_chat_max_tokens", "max_body_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"GatewayConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("files_upload_max_bytes", "files_upload_concurrency", "uploads_pending_bytes",
                     "responses_background_max", "responses_background_max_per_owner"):  # fmt: skip
            if getattr(self, name) < 1:
                raise ValueError(f"GatewayConfig.{name} must be >= 1, got {getattr(self, name)}")
        for name in ("responses_store_max", "responses_store_bytes", "files_max", "files_store_bytes",
                     "conversations_max", "conversations_bytes", "chat_completions_store_max",
                     "chat_completions_store_bytes"):  # fmt: skip
            if getattr(self, name) < 0:
                raise ValueError(f"GatewayConfig.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("responses_owner_share", "conversations_owner_share", "chat_completions_owner_share"):
            if not 0 < getattr(self, name) <= 1:
                raise ValueError(f"GatewayConfig.{name} must be in (0, 1], got {getattr(self, name)}")
        if not 0 <= self.models_wait_s < math.inf:
            raise ValueError(f"GatewayConfig.models_wait_s must be >= 0 and finite, got {self.models_wait_s}")
        if self.tool_call_parser is not None and self.tool_call_parser not in TOOL_CALL_PARSERS:
            message = f"GatewayConfig.tool_call_parser must be one of {TOOL_CALL_PARSERS} or None"
            raise ValueError(f"{message}, got {self.tool_call_parser!r}")
        if set(self.sampling_defaults) - DEFAULT_FIELDS:
            raise ValueError(f"GatewayConfig.sampling_defaults: unknown fields in {sorted(self.sampling_defaults)}")
        for name in self.default_chat_template_kwargs:
            if not isinstance(name, str) or name in CHAT_FLAGS:
                message = f"names template variables, not {CHAT_FLAGS} (each request's own flags)"
                raise ValueError(f"GatewayConfig.default_chat_template_kwargs {message}: got {name!r}")
        if self.reasoning_parser is not None and self.reasoning_parser not in REASONING_PARSERS:
            message = f"GatewayConfig.reasoning_parser must be one of {REASONING_PARSERS} or None"
            raise ValueError(f"{message}, got {self.reasoning_parser!r}")
        for origin in self.cors_allowed_origins:
            if origin != "*" and not _ORIGIN.fullmatch(origin):
                raise ValueError(f"GatewayConfig.cors_allowed_origins: {origin!r} is not '*' or scheme://host[:port]")
        if (self.ssl_keyfile is None) != (self.ssl_certfile is None):
            raise ValueError("GatewayConfig.ssl_keyfile and ssl_certfile go together (HTTPS needs both)")
        if self.ssl_certfile is None and (self.ssl_ca_certs is not None or self.ssl_cert_reqs):
            raise ValueError("GatewayConfig.ssl_ca_certs / ssl_cert_reqs need HTTPS: ssl_certfile and ssl_keyfile")
        if self.ssl_cert_reqs not in (0, 1, 2):
            raise ValueError(f"GatewayConfig.ssl_cert_reqs must be 0, 1 or 2 (ssl.CERT_*), got {self.ssl_cert_reqs}")
        if self.ssl_cert_reqs and self.ssl_ca_certs is None:
            raise ValueError("GatewayConfig.ssl_cert_reqs asks for client certificates: ssl_ca_certs must name the CA")
        if not _ROLE.fullmatch(self.response_role):
            raise ValueError(f"GatewayConfig.response_role must be 1-64 of [A-Za-z0-9_-], got {self.response_role!r}")
        for name in ("request_read_timeout_s", "keep_alive_timeout_s"):
            if not 0 < getattr(self, name) < math.inf:
                raise ValueError(f"GatewayConfig.{name} must be > 0 and finite, got {getattr(self, name)}")
