"""POST /start_profile and /stop_profile for a fleet: each node's profiler started or stopped, its answer gathered.

vLLM's two routes (``vllm/entrypoints/serve/profile/api_router.py``, served when its server has a
``--profiler-config``) start and stop the profiler of one engine's workers. Here the control plane asks each live
node, or those a request names, with a ProfileControl (its answers through controlplane/node_asks.py); each agent
runs its own ``--profiler-config`` (agent/node_profiler.py) and writes its traces on its own disk, whose paths come
back with a stop. A node started without one answers why not; the others go on.

    ControlPlane.profile(action, node_ids, timeout_s) ─► {node id: {"ok", "detail", "trace_files"} | None}
"""

from __future__ import annotations

from controlplane.node_asks import NodeAsks
from transport.messages import ProfileControl

PROFILE_ACTIONS = ("start", "stop")
# how long a start or stop waits for the nodes: a stop writes each node's trace first, which for a long trace takes
# a while (vLLM's docs ask for a long VLLM_RPC_TIMEOUT for the same reason); a node still writing answers null
PROFILE_TIMEOUT_S = 120.0


async def profile_nodes(asks: NodeAsks, action: str, node_ids: list[str], send, timeout_s: float) -> dict:
    """Ask each of ``node_ids`` to ``action`` ("start" or "stop") its profiler; each node's answer (None: none came)."""
    if action not in PROFILE_ACTIONS:
        raise ValueError(f"action must be one of {', '.join(PROFILE_ACTIONS)}, got {action!r}")
    answers = await asks.ask(node_ids, lambda ask_id: ProfileControl(request_id=ask_id, action=action), send, timeout_s)
    return {
        node_id: None if msg is None else {"ok": msg.ok, "detail": msg.detail, "trace_files": list(msg.trace_files)}
        for node_id, msg in answers.items()
    }
