"""NodeSleeps: vLLM's sleep mode for a fleet (POST /sleep, /wake_up, GET /is_sleeping): a node's device memory given
back (its KV cache; at level 2 its weights too) while the rest of the fleet serves, and given back to it at wake.

vLLM (docs/features/sleep_mode.md; vllm/entrypoints/serve/dev/sleep/api_router.py) puts its one engine to sleep, and
its requests with it: mode "abort" (its default) aborts them, "wait" waits until they are done. A fleet has other
nodes, so here a node is first taken out of routing (the registry drains it, as `zoo drain` does) and then:

    mode "abort"  its requests resume on other nodes at once (as when a node fails: the tokens streamed so far are
                  kept), and the node aborts its own copies and sleeps
    mode "wait"   its requests move off where live migration lets them (controlplane/migrations.py), the others
                  finish there; the node sleeps then, and answers then

A wake (every tag, or the last one missing) routes to the node again, unless an operator had drained it before it
slept: that drain stays. A node's LoadReports say its level, so a control plane that restarted while it slept takes it
out of routing too. Each node's answer comes through controlplane/node_asks.py; agent/node_sleep.py is the node's half.

    NodeSleeps.sleep(node_ids, level, mode, timeout_s) ─► {node id: {"ok", "detail", "sleep_level", ...} | None}
    NodeSleeps.wake_up(node_ids, tags, timeout_s)      ─► the same
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable

from controlplane.node_asks import NodeAsks
from controlplane.registry import NodeState
from engine.sleep_mode import SLEEP_MODES, check_level, check_tags
from transport.messages import Envelope, LoadReport, SleepControl

log = logging.getLogger(__name__)

# how long a sleep or a wake waits for the nodes' answers: a level-2 wake reloads the weights from disk, and a "wait"
# sleep answers once the node's requests are done (a node that has not answered by then is null in the reply; it
# sleeps when they are, and GET /is_sleeping shows it)
SLEEP_TIMEOUT_S = 120.0
WAITING = -1  # a node's level while a "wait" sleep waits for its requests (agent/node_sleep.py)


class NodeSleeps:
    """The fleet's sleeping nodes: ``levels`` (node id → 1, 2 or WAITING; an awake node is not there)."""

    def __init__(
        self,
        registry,
        asks: NodeAsks,
        send: Callable[[Envelope, str], None],
        resume: Callable[[str, str], bool],
        migrate_off: Callable[[str, str], object],
    ) -> None:
        self.registry = registry
        self._asks = asks
        self._send = send
        self._resume = resume  # RequestPath.resume: a request moved to another node, from the tokens it has
        self._migrate_off = migrate_off  # Migrations.migrate_off: a node's requests moved with their KV
        self.levels: dict[str, int] = {}
        self._drained: set[str] = set()  # nodes taken out of routing to sleep (a wake routes to them again)
        self.idle: set[str] = set()  # of ``levels``, those asleep by the idle sleep (their LoadReports say so)
        self._asking: Counter[str] = Counter()  # nodes a sleep ask is out for (their reports may still say awake)
        self.counts: Counter[str] = Counter()  # "sleep:ok", "sleep:refused", "sleep:no_answer", "wake_up:..."

    @property
    def is_sleeping(self) -> bool:
        """vLLM's GET /is_sleeping for the fleet: every node asleep (and one at least)."""
        node_ids = [view.node_id for view in self.registry.views()]
        return bool(node_ids) and all(self.levels.get(n, 0) > 0 for n in node_ids)

    async def sleep(
        self, node_ids: list[str], level: int, mode: str, timeout_s: float = SLEEP_TIMEOUT_S, idle: bool = False
    ) -> dict:
        """Take ``node_ids`` out of routing and put them to sleep at ``level`` (ValueError: a level or mode not
        taken); each node's answer (None: none came in time; a "wait" node sleeps when its requests are done).
        ``idle``: the idle sleep's (controlplane/idle_sleep.py), which the nodes say in their reports."""
        check_level(level)
        if mode not in SLEEP_MODES:
            raise ValueError(f"mode must be one of {', '.join(SLEEP_MODES)}, got {mode[:64]!r}")
        for node_id in node_ids:
            self._take_out(node_id)
            moved = self.registry.inflight_request_ids(node_id)
            if mode == "abort":
                for request_id in moved:
                    self._resume(request_id, f"node {node_id!r} was put to sleep")
            else:
                self._migrate_off(node_id, "sleep")
            log.info("node %s sleeps at level %d (%s: %d requests there)", node_id, level, mode, len(moved))
        make = lambda ask_id: SleepControl(request_id=ask_id, action="sleep", level=level, mode=mode, idle=idle)  # noqa: E731
        self._asking.update(node_ids)
        try:
            answers = await self._asks.ask(node_ids, make, self._send, timeout_s)
        finally:  # cancelled too (the caller went away): a node that did not sleep is put back at its next report
            self._asking.subtract(node_ids)
        for node_id, msg in answers.items():
            self._count("sleep", msg)
            if msg is None:
                self.levels[node_id] = self.levels.get(node_id) or WAITING
            elif msg.ok:
                self.levels[node_id] = msg.sleep_level
            elif self.levels.get(node_id, 0) == 0:  # it could not (no sleep mode in its backend): routed to again
                self._put_back(node_id)
        return {node_id: _answer(msg) for node_id, msg in answers.items()}

    async def wake_up(self, node_ids: list[str], tags: list[str], timeout_s: float = SLEEP_TIMEOUT_S) -> dict:
        """Wake ``node_ids`` (``tags``: what to restore, every one when empty; ValueError: an unknown tag); each
        node's answer. A node awake after it is routed to again (unless an operator's drain holds it)."""
        check_tags(tags)
        make = lambda ask_id: SleepControl(request_id=ask_id, action="wake_up", tags=list(tags))  # noqa: E731
        answers = await self._asks.ask(node_ids, make, self._send, timeout_s)
        for node_id, msg in answers.items():
            self._count("wake_up", msg)
            if msg is not None and msg.ok:
                self._note_level(node_id, msg.sleep_level)
        return {node_id: _answer(msg) for node_id, msg in answers.items()}

    def on_report(self, report: LoadReport) -> None:
        """A node's level from its LoadReport: one asleep this control plane did not put to sleep (it restarted
        meanwhile) is taken out of routing; one awake that was asleep (woken by an ask that timed out), or that was
        taken out for a sleep it never took (its ask cancelled before an answer), is put back."""
        level, node_id = report.sleep_level, report.node_id
        if level or node_id in self.levels:
            self._note_level(node_id, level)
        elif node_id in self._drained and self._asking[node_id] <= 0:  # out of routing for a sleep it never took
            self._put_back(node_id)
        if report.sleep_idle and level > 0:
            self.idle.add(report.node_id)
        else:
            self.idle.discard(report.node_id)

    def on_node_lost(self, node_id: str) -> None:
        self.levels.pop(node_id, None)
        self.idle.discard(node_id)
        self._drained.discard(node_id)

    def _note_level(self, node_id: str, level: int) -> None:
        if level:
            self.levels[node_id] = level
            self._take_out(node_id)
        elif self.levels.pop(node_id, None) is not None:
            log.info("node %s is awake", node_id)
            self._put_back(node_id)

    def _take_out(self, node_id: str) -> None:
        if self.registry.state(node_id) in (NodeState.UP, NodeState.SUSPECT) and self.registry.drain(node_id):
            self._drained.add(node_id)

    def _put_back(self, node_id: str) -> None:
        if node_id in self._drained:
            self._drained.discard(node_id)
            self.registry.resume(node_id)

    def _count(self, action: str, msg: SleepControl | None) -> None:
        self.counts[f"{action}:{'no_answer' if msg is None else 'ok' if msg.ok else 'refused'}"] += 1


def _answer(msg: SleepControl | None) -> dict | None:
    if msg is None:
        return None
    return {"ok": msg.ok, "detail": msg.detail, "sleep_level": msg.sleep_level, "freed_bytes": msg.freed_bytes}
