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
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import anyio

from transport.messages import ResetPrefixCache

DEFAULT_RESET_TIMEOUT_S = 5.0  # how long POST /reset_prefix_cache waits for the nodes' answers


@dataclass
class _Pending:
    node_ids: frozenset[str]
    answers: dict[str, ResetPrefixCache] = field(default_factory=dict)
    done: anyio.Event = field(default_factory=anyio.Event)


class PrefixResets:
    """The resets in flight, by id; ``answer`` takes a node's ResetPrefixCache reply (an unknown id: dropped)."""

    def __init__(self) -> None:
        self._pending: dict[str, _Pending] = {}
        self._ids = itertools.count(1)

    def answer(self, msg: ResetPrefixCache) -> None:
        pending = self._pending.get(msg.request_id)
        if pending is None or msg.node_id not in pending.node_ids:
            return
        pending.answers[msg.node_id] = msg
        if len(pending.answers) == len(pending.node_ids):
            pending.done.set()

    async def reset(self, node_ids: list[str], send, policy, timeout_s: float) -> dict[str, dict | None]:
        """Ask each of ``node_ids`` (``send(msg, node_id)``), wait for their answers (at most ``timeout_s``), tell
        ``policy`` of each node that reset; each node's answer, None where none came (or the send failed)."""
        reset_id = f"prefix-reset-{next(self._ids)}"
        pending = self._pending[reset_id] = _Pending(frozenset(node_ids))
        try:
            for node_id in node_ids:
                try:
                    send(ResetPrefixCache(request_id=reset_id), node_id)
                except Exception:  # a node whose outbox is full, or gone: no answer from it
                    pending.node_ids = pending.node_ids - {node_id}
            if len(pending.answers) < len(pending.node_ids):
                with anyio.move_on_after(timeout_s):
                    await pending.done.wait()
        finally:
            del self._pending[reset_id]
        results: dict[str, dict | None] = {}
        for node_id in node_ids:
            msg = pending.answers.get(node_id)
            results[node_id] = None if msg is None else {"ok": msg.ok, "num_blocks": msg.num_blocks}
            if msg is not None and msg.ok:
                policy.on_prefix_cache_reset(node_id)
        return results
