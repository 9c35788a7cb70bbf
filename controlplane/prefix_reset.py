"""POST /reset_prefix_cache for a fleet: every live node forgets its prefix cache, and the router what it knew of it.

vLLM serves ``/reset_prefix_cache`` for one engine (vLLM PR #12284: after a weight update, or between benchmark runs
so that one run's cache does not warm the next); benchmark tools call it between runs (aiperf ``--reset-kv-cache``,
llm-d-benchmark's ``reset_caches``). Here the control plane asks every live node (a ResetPrefixCache each, one reset
id), and each node's engine drops its cached blocks between two steps, on vLLM's rule: only while none of its
blocks is in use (no request running there: its KV is not pulled from under it), else it answers ``ok`` False and
keeps its cache. For each node that reset, the policy forgets the prefixes it thought the node held
(``PolicyHooks.on_prefix_cache_reset``), as Dynamo's router does on a worker's "all blocks cleared" KV event, so the
next requests are not sent there for a cache that is gone.

    ControlPlane.reset_prefix_cache(timeout_s) ─► {node id: {"ok": bool, "num_blocks": int} | None (no answer)}

The asks and their answers go through controlplane/node_asks.py.
"""

from __future__ import annotations

from controlplane.node_asks import NodeAsks
from transport.messages import ResetPrefixCache

DEFAULT_RESET_TIMEOUT_S = 5.0  # how long POST /reset_prefix_cache waits for the nodes' answers


async def reset_prefix_caches(asks: NodeAsks, node_ids: list[str], send, policy, timeout_s: float) -> dict:
    """Ask each of ``node_ids`` (``send(msg, node_id)``, the answers through ``asks``), wait for their answers (at most
    ``timeout_s``), tell ``policy`` of each node that reset; each node's answer, None where none came (or the send
    failed)."""
    answers = await asks.ask(node_ids, lambda ask_id: ResetPrefixCache(request_id=ask_id), send, timeout_s)
    results: dict[str, dict | None] = {}
    for node_id, msg in answers.items():
        results[node_id] = None if msg is None else {"ok": msg.ok, "num_blocks": msg.num_blocks}
        if msg is not None and msg.ok:
            policy.on_prefix_cache_reset(node_id)
    return results
