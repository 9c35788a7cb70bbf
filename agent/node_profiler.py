"""NodeProfiler: one node's profiler between POST /start_profile and /stop_profile (backends/profiler_config.py),
driven by the engine thread (agent/engine_thread.py) step by step. No torch here: the session it runs
(backends/profiler_sessions.py) does the recording.

    start() ─► "waiting" for delay_iterations engine steps ─► "recording" ─► stop(), or by itself after
    max_iterations steps ─► "off"; the trace written off the engine thread (what a trace that ended by itself
    wrote kept for the next stop to report)

vLLM's rules: the delay and the limit count engine iterations (a step that ran; an idle node counts none), a
second start while one runs is refused, and so is a stop with nothing started. A stop after the limit ended the
trace answers with the files that trace wrote. A session that fails to start or stop is reported to the caller,
and the node goes on serving: profiling never ends its loop.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Callable
from concurrent.futures import Future

from backends.profiler_config import ProfilerConfig
from backends.profiler_sessions import make_profiler_session

log = logging.getLogger(__name__)


class ProfilerError(Exception):
    """Why a start or stop was not done (the caller's answer says it)."""


class NodeProfiler:
    """``run_later(fn)``: run ``fn`` off the engine thread, a Future of its result (the engine thread's writer
    thread); default: at once, here (tests)."""

    def __init__(
        self, config: ProfilerConfig, make_session: Callable[[], object], run_later: Callable[..., Future] | None = None
    ) -> None:
        self.config = config
        self._make_session = make_session
        self._run_later = run_later or _run_now
        self._session = None
        self.state = "off"  # off | waiting | recording
        self._to_wait = 0  # steps left before recording
        self._recorded = 0  # steps recorded so far
        self._steps = 0  # this node's engine steps since its start (the annotations' numbers)
        self._ended: Future | None = None  # the files of a trace that ended by max_iterations, not yet reported

    def start(self) -> str:
        """Begin (after ``delay_iterations`` steps); what was done, or ProfilerError."""
        if self.state != "off":
            raise ProfilerError("the profiler is already running on this node: POST /stop_profile first")
        self._ended = None
        self._recorded = 0
        self._to_wait = self.config.delay_iterations
        if self._to_wait:
            self.state = "waiting"
            return f"{self.config.profiler} profiler starts after {self._to_wait} engine steps"
        self._begin()
        if not self.config.max_iterations:  # a forgotten profiler fills the node's memory: say it, and show it
            log.warning("profiler recording with no max_iterations: its trace grows until POST /stop_profile")
        return f"{self.config.profiler} profiler started"

    def _begin(self) -> None:
        session = self._make_session()
        try:
            session.start()
        except Exception as e:
            self.state = "off"
            raise ProfilerError(f"the {self.config.profiler} profiler did not start: {e}") from None
        self._session, self.state = session, "recording"

    def stop(self) -> Callable[[], list[str]]:
        """End the trace now; its writing, to run off the engine thread, which returns the files (those of a trace
        that ended by itself since, if none runs) or raises ProfilerError. ProfilerError at once if none ran."""
        if self.state == "off":
            if self._ended is not None:
                ended, self._ended = self._ended, None
                return ended.result  # (on the same writer thread: its earlier job, done by then)
            raise ProfilerError("the profiler is not running on this node: POST /start_profile first")
        if self.state == "waiting":
            self.state = "off"
            return list
        return self._end()

    def _end(self) -> Callable[[], list[str]]:
        session, self._session, self.state = self._session, None, "off"
        name = self.config.profiler
        try:
            write = session.stop()
        except Exception as e:
            raise ProfilerError(f"the {name} profiler did not stop: {e}") from e

        def written() -> list[str]:
            try:
                return write()
            except Exception as e:
                raise ProfilerError(f"the {name} profiler did not write its trace: {e}") from e

        return written

    def step_range(self):
        """The context one engine step runs in: its annotation while recording, else nothing."""
        self._steps += 1
        if self.state != "recording":
            return contextlib.nullcontext()
        return self._session.annotate(f"zoo_step_{self._steps}")

    def after_step(self) -> None:
        """An engine step ran: count it toward the delay or the limit (and start or end the trace there)."""
        if self.state == "waiting":
            self._to_wait -= 1
            if self._to_wait <= 0:
                try:
                    self._begin()
                except ProfilerError as e:
                    log.warning("%s", e)
            return
        if self.state != "recording":
            return
        self._session.step()
        self._recorded += 1
        if self.config.max_iterations and self._recorded >= self.config.max_iterations:
            try:
                written = self._end()
            except ProfilerError as e:
                log.warning("%s", e)
                self._ended = _run_now(list)
                return
            self._ended = self._run_later(functools.partial(_logged, written, self._recorded))


def _logged(written: Callable[[], list[str]], num_steps: int) -> list[str]:
    """A trace that ended by its limit, written; what it wrote (logged), or nothing (the failure logged)."""
    try:
        files = written()
    except ProfilerError as e:
        log.warning("%s", e)
        return []
    log.info("profiler stopped after %d engine steps: %s", num_steps, ", ".join(files))
    return files


def _run_now(fn: Callable[[], list[str]]) -> Future:
    done: Future = Future()
    try:
        done.set_result(fn())
    except Exception as e:  # a ProfilerError: raised where the result is asked for
        done.set_exception(e)
    return done


def node_profiler(config: ProfilerConfig | None, node_id: str, run_later=None) -> NodeProfiler | None:
    """The node's profiler for its ``--profiler-config`` (traces named after ``node_id``; ``run_later``:
    NodeProfiler's); None when it has none."""
    if config is None or not config.enabled:
        return None
    return NodeProfiler(config, lambda: make_profiler_session(config, node_id), run_later)
