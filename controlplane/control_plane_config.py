"""ControlPlaneConfig: the control plane's sockets, session timing and request limits (see ControlPlane)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.model_aliases import check_model_aliases
from controlplane.router.router_config import RouterConfig
from controlplane.tenants import TenantSpec
from transport.curve import ControlPlaneCurve
from transport.sockets import DEFAULT_AGENT_ENDPOINT, DEFAULT_CLIENT_ENDPOINT


@dataclass(slots=True)
class ControlPlaneConfig:
    """The control plane.

    agent_endpoint / client_endpoint: ROUTER bind addresses (``tcp://127.0.0.1:0``: a free port);
        client_endpoint None: no ZeroMQ client socket (HTTP only).
    model_name: the model the tokenizer belongs to (None: whatever the first node serves).
    router: the routing policy by name and its knobs.
    admission: queue limits (None: AdmissionConfig's defaults).
    heartbeat_interval_s / report_interval_s: what each Welcome tells the agents.
    heartbeat_timeout_s: a node silent this long is dead; its requests resume on other nodes (or fail with
        NODE_FAILED when none can take them). The expiry pass runs every ``expiry_interval_s``
        (timeout / 4), so a dead node is detected within ``dead_node_detection_s`` (timeout + that period)
        of its last message: 0.8 + 0.2 = 1.0 s by default, i.e. 5 heartbeat periods.
    max_resumes: how many times one request may resume on another node (lost node, failed send, node
        refused it) before it fails.
    chunk_timeout_s: an in-process ``generate`` with no chunk for this long fails (checked every
        ``expiry_interval_s``: RequestTable.time_out_silent) and is stopped on its node.
    offload_tokenize_chars: an in-process (HTTP) request whose prompt text has at least this many characters is
        tokenized in a worker thread, the GIL released, so the event loop routes and relays meanwhile
        (controlplane/offload_tokenize.py); a ZeroMQ client's too (controlplane/client_requests.py); 0: every one
        is tokenized on the loop.
    offload_tokenize_max_pending: at most this many ZeroMQ clients' requests wait for their tokens at once; beyond it
        a long prompt is tokenized on the loop (its stall is the senders' backpressure).
    max_latency_samples: TTFT/TPOT samples kept per node for the latency table.
    max_pending_events: latency samples kept for ``take_events`` (the oldest are dropped when nobody takes them).
    tenants: the tenants' classes and rate limits (controlplane/tenants.py; their keys: the gateway's key file).
    model_aliases: other names clients may give as ``model`` → the served model (or LoRA adapter) each stands for;
        replies name the target (controlplane/model_aliases.py; ``--model-alias ALIAS=MODEL``).
    curve: CURVE on both ROUTERs, agents (and clients, unless it admits any) allow-listed by public key
        (transport/curve.py; ``load_controlplane_curve(dir)``); None: no CURVE, as on loopback.
    sleep_idle_ttl_s: after this many seconds without an inference request every node sleeps, woken by the next one
        (vLLM's ``--sleep-idle-ttl``: controlplane/idle_sleep.py); 0: never.
    """

    agent_endpoint: str = DEFAULT_AGENT_ENDPOINT
    client_endpoint: str | None = DEFAULT_CLIENT_ENDPOINT
    model_name: str | None = None
    model_aliases: dict[str, str] = field(default_factory=dict)
    router: RouterConfig = field(default_factory=RouterConfig)
    admission: Any = None
    heartbeat_interval_s: float = 0.2
    report_interval_s: float = 0.25
    heartbeat_timeout_s: float = 0.8
    max_resumes: int = 3
    chunk_timeout_s: float = 300.0
    offload_tokenize_chars: int = 16_384
    offload_tokenize_max_pending: int = 64
    sleep_idle_ttl_s: float = 0.0
    sleep_mode: bool = False  # --enable-sleep-mode: a ZeroMQ client may put nodes to sleep (client_sleeps.py)
    max_latency_samples: int = 10_000
    max_pending_events: int = 100_000
    curve: ControlPlaneCurve | None = None
    tenants: list[TenantSpec] = field(default_factory=list)
    # LoRA adapters clients may name as ``model`` (engine/lora.py LoraRequests, loaded at start), and whether
    # POST /v1/load_lora_adapter and /v1/unload_lora_adapter may change them at run time (they read files)
    lora_modules: list[Any] = field(default_factory=list)
    allow_runtime_lora_updating: bool = False
    spec_pairs: Any = None  # controlplane/spec_pairs.py SpecPairConfig (None: its defaults)
    capacity: Any = None  # controlplane/capacity_plan.py CapacityPlanConfig (None: its defaults; --capacity-plan)

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval_s", "report_interval_s", "heartbeat_timeout_s", "chunk_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ValueError("heartbeat_timeout_s must exceed heartbeat_interval_s")
        if self.offload_tokenize_chars < 0:
            raise ValueError(f"offload_tokenize_chars must be >= 0, got {self.offload_tokenize_chars}")
        if self.offload_tokenize_max_pending < 0:
            raise ValueError(f"offload_tokenize_max_pending must be >= 0, got {self.offload_tokenize_max_pending}")
        if not 0 <= self.sleep_idle_ttl_s < float("inf"):
            raise ValueError(f"sleep_idle_ttl_s must be >= 0 seconds, got {self.sleep_idle_ttl_s}")
        if self.max_resumes < 0:
            raise ValueError(f"max_resumes must be >= 0, got {self.max_resumes}")
        check_model_aliases(self.model_aliases)

    @property
    def expiry_interval_s(self) -> float:
        """How often the control plane reaps silent nodes."""
        return self.heartbeat_timeout_s / 4

    @property
    def dead_node_detection_s(self) -> float:
        """The longest a dead node stays routable after its last message (registry clock)."""
        return self.heartbeat_timeout_s + self.expiry_interval_s
