"""ControlPlaneConfig: the control plane's sockets, session timing and request limits (see ControlPlane)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controlplane.router.router_config import RouterConfig
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
    heartbeat_timeout_s: a node silent this long is dead; its requests fail with NODE_FAILED.
    chunk_timeout_s: an in-process ``generate`` waiting this long for its next chunk gives up.
    max_latency_samples: TTFT/TPOT samples kept per node for the latency table.
    max_pending_events: latency samples kept for ``take_events`` (the oldest are dropped when nobody takes them).
    """

    agent_endpoint: str = DEFAULT_AGENT_ENDPOINT
    client_endpoint: str | None = DEFAULT_CLIENT_ENDPOINT
    model_name: str | None = None
    router: RouterConfig = field(default_factory=RouterConfig)
    admission: Any = None
    heartbeat_interval_s: float = 1.0
    report_interval_s: float = 0.25
    heartbeat_timeout_s: float = 5.0
    chunk_timeout_s: float = 300.0
    max_latency_samples: int = 10_000
    max_pending_events: int = 100_000

    def __post_init__(self) -> None:
        for name in ("heartbeat_interval_s", "report_interval_s", "heartbeat_timeout_s", "chunk_timeout_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.heartbeat_timeout_s <= self.heartbeat_interval_s:
            raise ValueError("heartbeat_timeout_s must exceed heartbeat_interval_s")
