"""EngineLoop: the engine's busy loop, run in the agent's worker thread. No sockets, no event loop.

    agent (event loop) ──► inbox: add / abort / abort_all / set_report_interval / stop
                                     │
                           engine thread: apply commands ─► engine.step() ─► TokenChunks
                                     │   every report_interval_s: LoadReport (+ EngineObservation)
    agent pump ◄── outbox: [TokenChunk | ErrorReply | LoadReport | EngineObservation, ...] per pass
                           (an exception instance when the engine failed: the loop has ended)

Both queues are thread-safe ``queue.SimpleQueue``s; the loop owns the LLMEngine (nothing else touches it).
``num_inflight`` is written only here and read by the event loop for admission (an int: atomic).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass

from controlplane.engine.llm_engine import LLMEngine, RequestOutput
from controlplane.engine.sampling_params import SamplingParams
from controlplane.engine.scheduler_stats import SchedulerEvent, SchedulerEventKind, SchedulerStats
from controlplane.engine.step_rates import StepRates
from transport.messages import ErrorCode, ErrorReply, LoadReport, TokenChunk

log = logging.getLogger(__name__)

MAX_RECENT_STEPS = 64  # step times carried by one LoadReport


@dataclass(slots=True)
class _Add:
    request_id: str
    prompt_token_ids: list[int]
    params: SamplingParams


@dataclass(slots=True)
class _Abort:
    request_ids: list[str]


class _AbortAll:
    pass


@dataclass(slots=True)
class _SetReportInterval:
    interval_s: float


class _Stop:
    pass


@dataclass(slots=True)
class FinishedRequest:
    """One request the engine finished (engine clock, seconds; None: the request never got that far)."""

    queue_time_s: float | None
    ttft_s: float | None
    e2e_s: float | None
    num_prompt_tokens: int
    num_output_tokens: int
    finish_reason: str | None


@dataclass(slots=True)
class EngineObservation:
    """What one engine step (or report tick) showed, for the agent's exporter (``observe=True`` only).

    Rides in the engine outbox ahead of the step's TokenChunks, so a client that saw a request finish
    can scrape metrics that already include it.

    stats: the scheduler's snapshot after the step.
    inter_token_s: one entry per output token after a request's first (gap since its previous token).
    finished: requests that ended in this step.
    swaps: ("out" | "in", num_blocks, step_time_s) per swap the step carried; the runner does not time its
        swaps separately, so step_time_s (the whole step) bounds the swap's latency from above.
    """

    stats: SchedulerStats
    inter_token_s: list[float]
    finished: list[FinishedRequest]
    swaps: list[tuple[str, int, float]]


class EngineLoop:
    """The engine's busy loop, run in a worker thread. Touches only the engine and the two queues.

    inbox: _Add / _Abort / _AbortAll / _SetReportInterval / _Stop (put there by the command methods).
    outbox: lists of wire messages (TokenChunk / ErrorReply / LoadReport) to send, in order; an
        exception instance when the engine failed (the loop has ended).
    """

    def __init__(self, engine: LLMEngine, node_id: str, report_interval_s: float, observe: bool = False) -> None:
        self.engine = engine
        self.observe = observe  # also put EngineObservations in the outbox
        self.node_id = node_id
        self.report_interval_s = report_interval_s
        self.inbox: queue.SimpleQueue = queue.SimpleQueue()
        self.outbox: queue.SimpleQueue = queue.SimpleQueue()
        self.done = threading.Event()
        self.num_inflight = 0  # read by the event loop for admission; written only here (int: atomic)
        self._prompt_lens: dict[str, int] = {}  # in-flight request → prompt tokens, until its first token
        self._decoding: set[str] = set()
        self._num_finished_total = 0
        self._rates = StepRates(MAX_RECENT_STEPS)
        self._last_token_s: dict[str, float] = {}  # in-flight request → engine time of its latest token

    # -- commands (any thread; applied by the loop in order, before its next step) ------------------

    def add(self, request_id: str, prompt_token_ids: list[int], params: SamplingParams) -> None:
        self.inbox.put(_Add(request_id, prompt_token_ids, params))

    def abort(self, request_ids: list[str]) -> None:
        self.inbox.put(_Abort(request_ids))

    def abort_all(self) -> None:
        self.inbox.put(_AbortAll())

    def set_report_interval(self, interval_s: float) -> None:
        self.inbox.put(_SetReportInterval(interval_s))

    def stop(self) -> None:
        """The loop returns at its next pass (``done`` is set then)."""
        self.inbox.put(_Stop())

    # -- the engine thread -------------------------------------------------------------------------

    def run(self) -> None:
        from observe.ebpf.sched_probe import set_thread_name

        set_thread_name()  # `zoo probe` finds the engine thread by its name ("zoo-engine")
        try:
            self._run()
        except BaseException as e:
            log.exception("engine loop failed")
            self.outbox.put(e)
        finally:
            self.done.set()

    def _run(self) -> None:
        next_report_s = time.monotonic()
        while True:
            idle = not self.engine.has_unfinished_requests()
            timeout_s = max(0.0, next_report_s - time.monotonic()) if idle else 0.0
            commands = []
            try:
                commands.append(self.inbox.get(timeout=timeout_s) if idle else self.inbox.get_nowait())
                while True:
                    commands.append(self.inbox.get_nowait())
            except queue.Empty:
                pass
            out: list = []
            for cmd in commands:
                if isinstance(cmd, _Stop):
                    return
                self._apply(cmd, out)
            if self.engine.has_unfinished_requests():
                busy_s = self.engine.busy_time_s
                outputs = self.engine.step()
                if self.observe:
                    out.append(self._observation(outputs, self.engine.busy_time_s - busy_s))
                for o in outputs:
                    out.append(self._chunk(o))
            if time.monotonic() >= next_report_s:
                if self.observe:
                    out.append(EngineObservation(self.engine.make_stats(), [], [], []))
                out.append(self._load_report())
                next_report_s = time.monotonic() + self.report_interval_s
            if out:
                self.outbox.put(out)

    def _apply(self, cmd, out: list) -> None:
        if isinstance(cmd, _Add):
            try:
                self.engine.add_request(cmd.prompt_token_ids, cmd.params, req_id=cmd.request_id)
            except ValueError as e:  # PromptError, SamplingParamsError, duplicate id
                out.append(ErrorReply(request_id=cmd.request_id, code=ErrorCode.INVALID_REQUEST, message=str(e)))
                return
            self.num_inflight += 1
            self._prompt_lens[cmd.request_id] = len(cmd.prompt_token_ids)
        elif isinstance(cmd, _Abort):
            ids = [r for r in cmd.request_ids if r in self._prompt_lens or r in self._decoding]
            self.engine.abort(ids)
            for r in ids:
                self._forget(r)
        elif isinstance(cmd, _AbortAll):
            self._apply(_Abort([*self._prompt_lens, *self._decoding]), out)
        elif isinstance(cmd, _SetReportInterval):
            self.report_interval_s = cmd.interval_s

    def _forget(self, request_id: str) -> None:
        self._last_token_s.pop(request_id, None)
        self._prompt_lens.pop(request_id, None)
        self._decoding.discard(request_id)
        self.num_inflight -= 1

    def _chunk(self, o: RequestOutput) -> TokenChunk:
        if o.new_token_ids and o.req_id in self._prompt_lens:
            del self._prompt_lens[o.req_id]
            self._decoding.add(o.req_id)
        if o.finished:
            self._forget(o.req_id)
            self._num_finished_total += 1
        return TokenChunk(
            request_id=o.req_id,
            token_ids=o.new_token_ids,
            text=o.new_text,
            finished=o.finished,
            finish_reason=o.finish_reason.value if o.finish_reason is not None else None,
            stop_reason=o.stop_reason,
            num_prompt_tokens=o.num_prompt_tokens,
            num_output_tokens=o.num_output_tokens,
            node_id=self.node_id,
            logprobs=[(lp.token_id, lp.logprob, list(lp.top)) for lp in o.new_logprobs] if o.new_logprobs else None,
        )

    def _observation(self, outputs: list[RequestOutput], step_time_s: float) -> EngineObservation:
        now_s = self.engine.clock.now()
        inter_token_s: list[float] = []
        finished: list[FinishedRequest] = []
        for o in outputs:
            if o.new_token_ids:
                previous_s = self._last_token_s.get(o.req_id)
                if previous_s is not None:
                    inter_token_s += [(now_s - previous_s) / len(o.new_token_ids)] * len(o.new_token_ids)
                elif len(o.new_token_ids) > 1:
                    inter_token_s += [0.0] * (len(o.new_token_ids) - 1)
                self._last_token_s[o.req_id] = now_s
            if o.finished:
                self._last_token_s.pop(o.req_id, None)
                m = o.metrics
                finished.append(
                    FinishedRequest(
                        queue_time_s=m.queue_time_s if m else None,
                        ttft_s=m.ttft_s if m else None,
                        e2e_s=m.e2e_s if m else None,
                        num_prompt_tokens=o.num_prompt_tokens,
                        num_output_tokens=o.num_output_tokens,
                        finish_reason=o.finish_reason.value if o.finish_reason is not None else None,
                    )
                )
        events: list[SchedulerEvent] = self.engine.scheduler.take_events()
        swaps = [
            ("out" if e.kind is SchedulerEventKind.SWAPPED_OUT else "in", int(e.details["num_blocks"]), step_time_s)
            for e in events
            if e.kind in (SchedulerEventKind.SWAPPED_OUT, SchedulerEventKind.SWAPPED_IN)
        ]
        return EngineObservation(self.engine.make_stats(), inter_token_s, finished, swaps)

    def _load_report(self) -> LoadReport:
        for r in self.engine.take_step_records():
            self._rates.observe(r.step_time_s, r.num_prefill_tokens, r.num_decode_requests)
        return build_load_report(
            self.node_id,
            self.engine.make_stats(),
            self._rates,
            queued_prefill_tokens=sum(self._prompt_lens.values()),
            decode_batch_size=len(self._decoding),
            num_requests_finished_total=self._num_finished_total,
        )


def build_load_report(
    node_id: str,
    stats: SchedulerStats,
    rates: StepRates,
    *,
    queued_prefill_tokens: int,
    decode_batch_size: int,
    num_requests_finished_total: int,
) -> LoadReport:
    """A LoadReport closing ``rates``' window (the agent's, and the fleet simulator's for its nodes)."""
    recent = rates.close_window()
    return LoadReport(
        node_id=node_id,
        num_running=stats.num_running,
        num_waiting=stats.num_waiting,
        num_swapped=stats.num_swapped,
        kv_usage=stats.kv_usage,
        num_free_device_blocks=stats.num_free_device_blocks,
        queued_prefill_tokens=queued_prefill_tokens,
        decode_batch_size=decode_batch_size,
        recent_step_ms=recent,
        prefill_tok_per_s=rates.prefill_tok_per_s,
        decode_step_ms=rates.decode_step_ms,
        num_preemptions_total=stats.num_preemptions_total,
        num_requests_finished_total=num_requests_finished_total,
        prefix_cache_hit_rate=stats.prefix_cache_hit_rate,
    )
