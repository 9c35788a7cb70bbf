"""IdleSleep: vLLM's ``--sleep-idle-ttl`` for a fleet: after that many seconds without an inference request, every
awake node sleeps (level 1, mode "wait"); the next inference request wakes them first, then is routed.

vLLM (vllm/entrypoints/serve/idle_sleep/manager.py and middleware.py, PR #47703) does it for its one engine: a
middleware counts the inference requests in flight (POST to ``/v1/``, ``/inference``, ``/pooling``, ``/score``,
``/rerank``, ``/classify``, ``/invocations``; a stream until its last byte), an idle loop polls every ttl/10
(between 10 ms and 5 s) and sleeps the engine once nothing is in flight and the idle time is past the TTL, and a
request arriving then waits for the wake. Only the sleeps it started are woken by it: an engine put to sleep through
``POST /sleep`` is left alone (its RLHF orchestration decides), and one woken by ``POST /wake_up`` is seen as awake.

Here the same rules hold for the fleet (controlplane/node_sleeps.py does the sleeping and waking):

    HTTP request (gateway/idle_sleep_middleware.py)  ─► on_request_start: waits for the wake when the fleet slept
    ZeroMQ client's request (client_requests.py)     ─► pending while the fleet wakes, then routed; one refused
                                                        NO_NODE all the same (more than max_pending waiting) makes
                                                        the next poll (at most 250 ms later) wake it, for its retry
    any request routed or refused, or in flight      ─► the idle time starts again
    (or held for a pool's first node: cold_start.py)
    poll (``step``)                                  ─► every awake node to sleep, once idle past the TTL

Its sleeps are marked (``SleepControl.idle``), and each node says so in its LoadReports (``sleep_idle``): a control
plane that restarted while the fleet slept wakes them at the next request too, and still leaves an operator's alone.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import anyio

from controlplane.node_sleeps import NodeSleeps
from transport.messages import ErrorCode

log = logging.getLogger(__name__)

IDLE_SLEEP_LEVEL = 1  # vLLM's IdleSleepManager default: the weights wait in host RAM, so the wake is quick
MAX_POLL_S = 0.25  # a ZeroMQ client's request waits at most this (plus its retry delay) before the wake starts


class IdleSleep:
    """The fleet's idle sleep. ``activity()``: (requests in flight in the fleet, requests routed or refused so far,
    of those refused because no node could take them), read at each poll."""

    def __init__(
        self,
        sleeps: NodeSleeps,
        node_ids: Callable[[], list[str]],
        activity: Callable[[], tuple[int, int, int]],
        ttl_s: float,
        level: int = IDLE_SLEEP_LEVEL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not ttl_s > 0:
            raise ValueError(f"sleep_idle_ttl must be > 0 seconds, got {ttl_s!r}")
        self.sleeps = sleeps
        self.ttl_s = ttl_s
        self.level = level
        self.poll_s = min(max(ttl_s / 10, 0.01), MAX_POLL_S)  # vLLM's ttl/10 within [10 ms, 5 s], here <= 250 ms
        self.in_flight = 0  # HTTP inference requests being answered (the gateway's middleware counts them)
        self.auto_slept: set[str] = set()  # the nodes it put to sleep (those it wakes)
        self.num_sleeps = self.num_wakes = 0
        self._node_ids = node_ids
        self._activity = activity
        self._clock = clock
        self._lock = anyio.Lock()
        self._last_s = clock()
        self._seen = activity()

    @property
    def idle_s(self) -> float:
        return self._clock() - self._last_s

    async def on_request_start(self) -> None:
        """An inference request arrives: the fleet woken first if it slept (waiting on a sleep in progress)."""
        async with self._lock:
            if self.auto_slept:
                await self._wake("an inference request arrived")
            self.in_flight += 1
            self._last_s = self._clock()

    async def wake_for_request(self) -> None:
        """A ZeroMQ client's request (controlplane/client_requests.py): the fleet woken first if it slept."""
        async with self._lock:
            if self.auto_slept:
                await self._wake("a ZeroMQ client's request arrived")
            self._last_s = self._clock()

    def on_request_end(self) -> None:
        self.in_flight -= 1
        self._last_s = self._clock()

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        while True:
            await anyio.sleep(self.poll_s)
            try:
                await self.step()
            except Exception:  # a transition failed: logged, and a whole TTL before the next try (vLLM's rule)
                log.exception("idle sleep: a transition failed")
                self._last_s = self._clock()

    async def step(self) -> None:
        """One poll: the activity seen since the last, then a wake (a ZeroMQ request refused while the fleet sleeps)
        or a sleep (idle past the TTL)."""
        in_flight, submitted, refused_no_node = activity = self._activity()
        if in_flight or submitted != self._seen[1]:
            self._last_s = self._clock()
        refused_since = refused_no_node > self._seen[2]
        self._seen = activity
        # asleep by an idle sleep, by the nodes' own word: one this control plane did not start (it restarted)
        self.auto_slept |= self.sleeps.idle & {n for n, level in self.sleeps.levels.items() if level > 0}
        if self.auto_slept:
            self.auto_slept &= {n for n, level in self.sleeps.levels.items() if level}  # woken by /wake_up: awake
            if refused_since and self.auto_slept:
                async with self._lock:
                    if self.auto_slept:
                        await self._wake("a ZeroMQ client's request found no node awake")
            return
        if self.in_flight or in_flight or self.idle_s < self.ttl_s:
            return
        async with self._lock:
            if self.auto_slept or self.in_flight or self.idle_s < self.ttl_s:
                return
            awake = [n for n in self._node_ids() if not self.sleeps.levels.get(n)]
            if not awake:  # every node was put to sleep by an operator: theirs to wake
                return
            log.info("idle sleep: no inference request for %.1f s, %d nodes to sleep", self.idle_s, len(awake))
            answers = await self.sleeps.sleep(awake, self.level, "wait", idle=True)
            self.auto_slept = {n for n, answer in answers.items() if answer is None or answer["ok"]}
            self.num_sleeps += 1

    def summary(self) -> dict:
        """For the control plane's stats: the nodes it put to sleep, its sleeps and wakes so far."""
        return {"ttl_s": self.ttl_s, "asleep": sorted(self.auto_slept), "sleeps": self.num_sleeps,
                "wakes": self.num_wakes}  # fmt: skip

    async def _wake(self, why: str) -> None:
        nodes = sorted(self.auto_slept)
        started = self._clock()
        answers = await self.sleeps.wake_up(nodes, [])
        self.auto_slept.clear()
        self.num_wakes += 1
        self._last_s = self._clock()
        failed = [n for n, answer in answers.items() if answer is None or not answer["ok"]]
        log.info("idle sleep: %s, %d nodes woken in %.2f s", why, len(nodes) - len(failed), self._clock() - started)
        if failed:
            log.warning("idle sleep: nodes %s did not say they woke", ", ".join(failed[:16]))


def idle_sleep_of(cp) -> IdleSleep:
    """The control plane's idle sleep (its ``sleeps``, its nodes, and its requests' activity)."""

    def activity() -> tuple[int, int, int]:
        counters = cp.counters
        held = sum(cp.capacity.waiting.values())  # held for a pool's first node (cold_start.py): not refused yet
        return len(cp.requests) + held, counters["routed"] + counters["refused"], cp.refused[ErrorCode.NO_NODE]

    return IdleSleep(cp.sleeps, lambda: cp.node_ids, activity, cp.config.sleep_idle_ttl_s)
