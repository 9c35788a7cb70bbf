"""NodeSleep: a node's sleep mode on its engine thread (the SleepControl asks, engine/sleep_mode.py's rules).

The control plane asks (controlplane/node_sleeps.py) after it stopped routing to the node; the engine thread applies
each ask between two steps and answers with a SleepControl:

    sleep, mode "abort"  its requests aborted here (the control plane resumes them on other nodes), then asleep
    sleep, mode "wait"   asleep once its requests are done; answered then (``after_pass`` checks each pass)
    wake_up [tags]       what sleep freed restored; a "wait" not slept yet is called off (its answer says so)

While it sleeps, or waits to, a request that still reaches the node (sent before the control plane knew) is refused
as OVERLOADED, which the control plane resumes on another node; the LoadReports carry ``sleep_level`` (-1: waiting).
"""

from __future__ import annotations

import logging

import msgspec

from engine.sleep_mode import SLEEP_MODES, SleepModeError, check_level, put_to_sleep, sleep_level, wake
from transport.messages import ErrorCode, ErrorReply, SleepControl

log = logging.getLogger(__name__)

WAITING = -1  # the LoadReport's sleep_level while a "wait" sleep waits for the node's requests


class NodeSleep:
    """The sleep asks of one node's core (touched by its engine thread only)."""

    def __init__(self, core) -> None:
        self.core = core
        self.waiting: SleepControl | None = None  # a "wait" sleep, until the node's requests are done
        self.idle = False  # asleep by the control plane's idle sleep (told in the LoadReports: it wakes the node)

    @property
    def level(self) -> int:
        """For the LoadReport: 0 awake, 1 or 2 asleep, WAITING."""
        return WAITING if self.waiting is not None else sleep_level(self.core.engine)

    def refusal(self, request_id: str) -> ErrorReply | None:
        """The reply to a request that reached the node while it sleeps (or waits to); None when awake."""
        level = self.level
        if level == 0:
            return None
        why = "is about to sleep" if level == WAITING else f"is asleep (level {level})"
        message = f"node {self.core.node_id!r} {why}: another node takes the request"
        return ErrorReply(request_id=request_id, code=ErrorCode.OVERLOADED, message=message, retry_after_s=0.0)

    def ask(self, msg: SleepControl) -> list[SleepControl]:
        """``msg`` applied: the answers to send (none yet for a "wait" sleep whose requests are not done)."""
        if msg.action == "wake_up":
            return [*self._call_off("woken before it could sleep"), self._wake(msg)]
        if msg.action != "sleep":
            return [self._answer(msg, False, f"unknown action {msg.action[:64]!r}: sleep or wake_up")]
        try:
            check_level(msg.level)
            if msg.mode not in SLEEP_MODES:
                raise SleepModeError(f"mode must be one of {', '.join(SLEEP_MODES)}, got {msg.mode[:64]!r}")
        except SleepModeError as e:
            return [self._answer(msg, False, str(e))]
        superseded = self._call_off("another sleep was asked for")
        if msg.mode == "abort" and self.core.num_inflight:
            log.info("sleep: %d requests aborted here", self.core.num_inflight)
            self.core.abort_all()
        if self.core.num_inflight or self.core.has_work():
            self.waiting = msg
            log.info("sleep at level %d once %d requests are done", msg.level, self.core.num_inflight)
            return superseded
        return [*superseded, self._sleep(msg)]

    def after_pass(self) -> list[SleepControl]:
        """A "wait" sleep done once the node's requests are: its answer (else nothing)."""
        if self.waiting is None or self.core.num_inflight or self.core.has_work():
            return []
        msg, self.waiting = self.waiting, None
        return [self._sleep(msg)]

    def _sleep(self, msg: SleepControl) -> SleepControl:
        try:
            freed = put_to_sleep(self.core.engine, msg.level)
        except SleepModeError as e:
            return self._answer(msg, False, str(e))
        log.info("asleep at level %d%s: %.1f MB of device memory freed", msg.level, " (idle)" * msg.idle, freed / 1e6)
        self.idle = msg.idle
        return self._answer(
            msg, True, f"asleep at level {msg.level}, {freed / 2**20:.1f} MiB of device memory freed", freed
        )

    def _wake(self, msg: SleepControl) -> SleepControl:
        try:
            level = wake(self.core.engine, msg.tags)
        except SleepModeError as e:
            return self._answer(msg, False, str(e))
        detail = "awake" if level == 0 else f"woken in part ({', '.join(msg.tags)}): still at level {level}"
        self.idle = self.idle and level != 0
        log.info("wake_up: %s", detail)
        return self._answer(msg, True, detail)

    def _call_off(self, why: str) -> list[SleepControl]:
        if self.waiting is None:
            return []
        msg, self.waiting = self.waiting, None
        return [self._answer(msg, False, f"the sleep was called off: {why}")]

    def _answer(self, msg: SleepControl, ok: bool, detail: str, freed: int = 0) -> SleepControl:
        node_id = self.core.node_id
        level = self.level
        return msgspec.structs.replace(msg, node_id=node_id, ok=ok, detail=detail, sleep_level=level, freed_bytes=freed)
