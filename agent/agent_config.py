"""AgentConfig: one node agent's settings (agent/node_agent.py runs it; `zoo agent`'s flags fill it)."""

from __future__ import annotations

from dataclasses import dataclass

from agent.kv_events import KVEventsConfig
from backends.kv_link_model import check_place_name
from backends.profiler_config import ProfilerConfig
from transport.curve import CurveClient

AGENT_ROLES = ("prefill", "decode", "both")  # the prefill/decode split's roles (controlplane/router/pd_split.py)


@dataclass(slots=True)
class AgentConfig:
    """One agent.

    node_id: unique in the fleet; also the DEALER's routing id (≤ 255 bytes).
    model_name: served model name (None: derived from the engine's checkpoint path).
    gpu_profile: describe the hardware from this profile of backends/gpu_table.py instead of probing.
    hello_timeout_s: a NodeHello without a Welcome within this is sent again.
    control_timeout_s: no message from the control plane for this long → re-hello (it restarted or is gone).
    heartbeat_interval_s / report_interval_s: used until the Welcome says otherwise.
    max_inflight_requests: requests accepted but not finished; past it a GenerateRequest is refused (OVERLOADED).
    leave_timeout_s: how long a clean shutdown waits for the NodeLeave to be sent.
    drain_timeout_s: how long ``drain()`` (SIGTERM) lets the node's requests finish before it leaves (what
        is left resumes on other nodes); 0: leave at once.
    profile_at_start: run one synthetic request before joining (``NodeCore.profile``) so the hello carries
        the node's measured prefill rate and decode step, and the router prices it by measurement.
    curve: CURVE to a control plane that allow-lists agents (``load_curve_client(dir, "agents", node_id)``:
        the key named after this node id); None: no CURVE.
    """

    node_id: str
    model_name: str | None = None
    backend: str = "torch"
    cell: str = "default"
    gpu_profile: str | None = None
    hello_timeout_s: float = 2.0
    control_timeout_s: float = 6.0
    heartbeat_interval_s: float = 1.0
    report_interval_s: float = 0.25
    max_inflight_requests: int = 4096
    leave_timeout_s: float = 1.0
    drain_timeout_s: float = 30.0
    profile_at_start: bool = True
    curve: CurveClient | None = None
    # the KV data socket (agent/kv_data_plane.py): where its ROUTER binds ("tcp://127.0.0.1:0": a free port);
    # None: this agent has no data plane (it neither sends nor takes KV)
    data_endpoint: str | None = None
    kv_transfer_timeout_s: float = 10.0  # a KV transfer whose acks stop this long fails (re-prefill instead)
    # the remote KV tier (agent/kv_remote_swap.py): host RAM lent to peers' preempted requests, and how long KV
    # of an owner the control plane no longer lists is kept (the owner's side: CacheConfig.remote_swap)
    kv_store_bytes: int = 1 << 30
    kv_store_owner_timeout_s: float = 30.0
    role: str = "both"  # prefill | decode | both: told in the hello (the prefill/decode split, zoo agent --role)
    pair_draft_timeout_s: float = 0.25  # paired with a fleet drafter (SpecPair): no drafts past this wait
    # placement, told in the hello (zoo agent --host-id/--rack; backends/kv_link_model.py): "": not said
    host_id: str = ""
    rack: str = ""
    # the KV cache events (`zoo agent --kv-events-config`, vLLM's): the prefix cache's changes on a ZeroMQ PUB
    # socket in vLLM's format, for routers that index them (agent/kv_events.py); None: not published
    kv_events: KVEventsConfig | None = None
    # `zoo agent --max-num-batched-tokens auto`: after the start-up profile, size the step token budget to this TPOT
    # SLO (NodeCore.size_step_budget: Sarathi-Serve's rule, at most the budget the engine was built with); None: keep it
    step_budget_tpot_slo_s: float | None = None
    # `zoo agent --profiler-config` (vLLM's): the profiler POST /start_profile and /stop_profile run on this node, its
    # traces on this node's disk (agent/node_profiler.py); None: profiling is off here, and a start is refused
    profiler: ProfilerConfig | None = None

    def __post_init__(self) -> None:
        if not self.node_id or len(self.node_id.encode()) > 255:
            raise ValueError(f"node_id must be 1..255 bytes, got {self.node_id!r}")
        for name in ("hello_timeout_s", "control_timeout_s", "heartbeat_interval_s", "report_interval_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.max_inflight_requests < 1:
            raise ValueError(f"max_inflight_requests must be >= 1, got {self.max_inflight_requests}")
        if self.drain_timeout_s < 0:
            raise ValueError(f"drain_timeout_s must be >= 0, got {self.drain_timeout_s}")
        if self.role not in AGENT_ROLES:
            raise ValueError(f"role must be one of {', '.join(AGENT_ROLES)}, got {self.role!r}")
        for what, name in (("host_id", self.host_id), ("rack", self.rack)):
            if name:
                check_place_name(what, name)
