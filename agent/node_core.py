"""NodeCore: one node's serving state, sans-IO — the engine plus what the control plane hears about it.

    add / abort / abort_all ─► LLMEngine ─► start_step() ─► (the step runs) ─► finish_step() ─► outputs
                                              bookkeeping: prompts until their first token, decoding
                                              requests, finished count, step rates
    load_report()   the LoadReport the router reads (rates from the steps since the last report)
    token_chunk(o)  the TokenChunk a step's output becomes on the wire
    observation()   what the agent's exporter records per step (``observe=True`` only)

The one node step loop of Silicon Zoo. Two drivers own a NodeCore and call it from one thread:

    agent/engine_thread.py   the agent's engine thread: commands from a queue, wall-clock report ticks,
                             ``step()`` back to back, chunks and reports to the outbox
    sim/des.py               the fleet simulator: ``start_step()`` at a node's kick, ``finish_step()`` when
                             the predicted step time has passed on the virtual clock; reports on its ticks

No sockets, no threads, no sleeping; time comes only from the engine's injected clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from backends.gpu_table import power_score
from engine.decode_roofline import DecodeRoofline
from engine.decode_slack import slack_histogram
from engine.llm_engine import LLMEngine, PendingStep, RequestOutput
from engine.lora import LoraRequest
from engine.multi_step import DecodeSteps
from engine.request_output import RequestMetrics
from engine.sampling_params import SamplingParams
from engine.scheduler_stats import SchedulerEvent, SchedulerEventKind, SchedulerStats
from engine.spec.grammar_drafts import StructuredOutputStats
from engine.spec.speculator import SpecDecodeStats
from engine.step_budget import DEFAULT_FLOOR_TOKENS, StepBudget, budget_from_profile
from engine.step_rates import StepRates
from transport.messages import HardwareInfo, KVInfo, LoadReport, NodeHello, RequestTiming, TokenChunk

MAX_RECENT_STEPS = 64  # step times carried by one LoadReport


@dataclass(slots=True)
class FinishedRequest:
    """One request the engine finished (engine clock, seconds; None: the request never got that far)."""

    queue_time_s: float | None
    ttft_s: float | None
    e2e_s: float | None
    num_prompt_tokens: int
    num_output_tokens: int
    finish_reason: str | None
    request_id: str = ""
    metrics: RequestMetrics | None = None  # its time stamps (engine clock): its span (observe/node_spans.py)
    num_cached_tokens: int = 0


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
    decode_roofline_fraction: float = 0.0  # engine/decode_roofline.py; 0: not measured
    spec: SpecDecodeStats | None = None  # speculative decoding totals, when the engine speculates
    structured: StructuredOutputStats | None = None  # structured outputs' totals (engine/spec/grammar_drafts.py)
    # vLLM's iteration tokens (vllm:iteration_tokens_total): the step's sampled tokens plus the prompt tokens of the
    # requests it gave their first token; None: a report tick's observation, no step
    iteration_tokens: int | None = None


class NodeCore:
    """One node: an LLMEngine and the agent's bookkeeping of its requests. Owned by one thread."""

    def __init__(
        self, engine: LLMEngine, node_id: str, *, observe: bool = False, memory_bandwidth_gbps: float = 0.0
    ) -> None:
        """memory_bandwidth_gbps: the device's (HardwareInfo); with a runner that says its ``weight_bytes``,
        decode steps are measured against their bandwidth roofline (0: not measured)."""
        self.engine = engine
        self.node_id = node_id
        self.observe = observe  # keep per-token times for observation()
        self.num_inflight = 0  # requests added and not finished or aborted
        self.num_received_total = 0  # add() calls, accepted or not (the router's in-order ack)
        self.num_finished_total = 0
        self._prompt_lens: dict[str, int] = {}  # in-flight request → prompt tokens, until its first token
        self._decoding: set[str] = set()
        # a request with a TPOT target: its (decode steps, target) until its first token, then (time of the first
        # token, the engine's step count then, decode steps, target) while it decodes (engine/decode_slack.py)
        self._tpot_targets: dict[str, tuple[int, float]] = {}
        self._slack_decoders: dict[str, tuple[float, int, int, float]] = {}
        self._rates = StepRates(MAX_RECENT_STEPS)
        self._last_token_s: dict[str, float] = {}  # in-flight request → engine time of its latest token
        self.roofline = _roofline(engine, memory_bandwidth_gbps)
        self.profile_prompt_tokens = 0  # the prompt profile() measured (0: not profiled)

    # -- requests ---------------------------------------------------------------------------------

    def add(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        age_s: float = 0.0,
        *,
        priority: int = 0,
        lora: LoraRequest | None = None,
        slo_tpot_s: float = 0.0,
        num_resumed_tokens: int = 0,
    ) -> None:
        """Queue a request that arrived ``age_s`` ago (at the gateway: its TTFT, E2E and queue time count from
        there); ``priority``: its class's rank, then its own (engine/scheduler.py); ``lora``: its LoRA adapter, read on
        first use; ``slo_tpot_s``: its TPOT target (0: none), for the slack its decode reports;
        ``num_resumed_tokens``: its prompt's last tokens that are its own output before a resume. Raises ValueError
        (a PromptError, a duplicate id, an adapter it cannot serve) and queues nothing when this node cannot
        serve it."""
        self.num_received_total += 1
        if lora is not None:
            self._ensure_lora(lora)
        lora_name = None if lora is None else lora.name
        arrival_time_s = self.engine.clock.now() - max(age_s, 0.0)
        self.engine.add_request(
            prompt_token_ids,
            params,
            req_id=request_id,
            arrival_time_s=arrival_time_s,
            priority=priority,
            lora_name=lora_name,
            num_resumed_tokens=num_resumed_tokens,
        )
        self.num_inflight += 1
        self._prompt_lens[request_id] = len(prompt_token_ids)
        if slo_tpot_s > 0.0 and params.max_tokens > 1:  # (a NaN target is not > 0)
            self._tpot_targets[request_id] = (params.max_tokens - 1, slo_tpot_s)

    def _ensure_lora(self, lora: LoraRequest) -> None:
        """The engine serves ``lora`` under its name (a name now at another path is replaced once unused)."""
        known = self.engine.get_lora(lora.name)
        if known is not None and known.lora_id == lora.lora_id:
            store = getattr(getattr(self.engine.runner, "lora_slots", None), "store", None)
            if store is not None:  # dropped from host RAM: read now (or take the read-ahead), not in a step;
                store.ensure_host(lora.lora_id)  # its files gone: AdapterError refuses this request only
            return
        if known is not None:
            self.engine.remove_lora(lora.name)  # ValueError while requests still use the old one
        self.engine.add_lora(lora)

    def abort(self, request_ids: Iterable[str]) -> None:
        """Stop requests in flight here; unknown ids are ignored."""
        ids = [r for r in dict.fromkeys(request_ids) if r in self._prompt_lens or r in self._decoding]
        self.engine.abort(ids)
        for r in ids:
            self._forget(r)
            self._last_token_s.pop(r, None)

    def abort_all(self) -> None:
        self.abort([*self._prompt_lens, *self._decoding])

    def has_work(self) -> bool:
        """Requests to step (not when all that is left waits on remote KV moves: engine/scheduler_remote.py)."""
        return self.engine.has_unfinished_requests() and not self.engine.scheduler.is_waiting_on_remote()

    def profile(
        self, num_prompt_tokens: int = 256, num_output_tokens: int = 8, num_warmups: int = 1
    ) -> tuple[float, float]:
        """Measure this node before it serves: a synthetic request (a ``num_prompt_tokens`` prefill, then
        decode steps at batch 1) run to its end, after ``num_warmups`` unmeasured runs of the same (one-time
        costs: compiling, allocating); returns (prefill tok/s, decode step ms) and starts the load reports'
        rates from them, so a new node is priced by measurement, not by a datasheet estimate. Call it
        before the first ``add``; it leaves no request, no counter and no step record behind."""
        if self.num_inflight or self.has_work():
            raise RuntimeError("profile() runs on an idle node, before it serves")
        engine = self.engine
        vocab = engine.tokenizer.vocab_size
        cache = engine.cache_config
        limit = min(
            engine.scheduler_config.max_model_len - num_output_tokens - 1,
            cache.num_device_blocks * cache.block_size - num_output_tokens,
        )
        num_prompt_tokens = max(1, min(num_prompt_tokens, limit))
        params = SamplingParams(temperature=0.0, max_tokens=num_output_tokens, ignore_eos=True)
        for run in range(num_warmups + 1):
            # a different prompt each run: the prefix cache must not turn the measured prefill into a hit
            prompt = [10 + (i + 7919 * run) % max(vocab - 10, 1) for i in range(num_prompt_tokens)]
            engine.take_step_records()
            engine.add_request(prompt, params, req_id=f"zoo-profile-{run}")
            while engine.has_unfinished_requests():
                engine.step()
        rates = StepRates(MAX_RECENT_STEPS)
        for r in engine.take_step_records():
            rates.observe(r.step_time_s, r.num_prefill_tokens, r.num_decode_requests)
        rates.close_window()
        self._rates = rates
        self.profile_prompt_tokens = num_prompt_tokens
        engine.scheduler.reset_counters()
        return rates.prefill_tok_per_s, rates.decode_step_ms

    def size_step_budget(self, tpot_slo_s: float, **limits: int | float) -> StepBudget:
        """Set this node's step token budget (``max_num_batched_tokens``) from its start-up profile and the TPOT
        SLO, Sarathi-Serve's rule (engine/step_budget.py); ``limits``: its headroom / floor_tokens /
        ceiling_tokens (the ceiling defaults to the budget the engine was built with, never exceeded: runners
        size buffers from it). Call after ``profile()``, before the first ``add``."""
        if self.profile_prompt_tokens == 0 or self._rates.prefill_tok_per_s <= 0:
            raise RuntimeError("size_step_budget() needs a start-up profile (profile() first)")
        config = self.engine.scheduler_config
        if not config.enable_chunked_prefill:
            raise ValueError("a step budget below the context needs chunked prefill (enable_chunked_prefill)")
        limits.setdefault("ceiling_tokens", config.max_num_batched_tokens)
        limits["floor_tokens"] = min(int(limits.get("floor_tokens", DEFAULT_FLOOR_TOKENS)), limits["ceiling_tokens"])
        budget = budget_from_profile(
            self._rates.prefill_tok_per_s,
            self._rates.decode_step_ms,
            self.profile_prompt_tokens,
            tpot_slo_s,
            **limits,
        )
        config.max_num_batched_tokens = budget.tokens
        return budget

    # -- steps ------------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        pending = self.start_step()
        return [] if pending is None else self.finish_step(pending)

    def start_step(self) -> PendingStep | None:
        """Schedule and execute a step (``LLMEngine.start_step``); None when there is nothing to run."""
        return self.engine.start_step()

    def finish_step(self, pending: PendingStep) -> list[RequestOutput]:
        """Apply the step and update the bookkeeping; the outputs of the requests that progressed."""
        outputs = self.engine.finish_step(pending)
        if self.roofline is not None:
            self.roofline.observe(pending.batch, pending.step_time_s)
        self._note_outputs(outputs)
        return outputs

    def plan_decode_steps(
        self, start_s: float, stop_after_s: float, end_by_s: float = float("inf")
    ) -> DecodeSteps | None:
        """Several pure decode steps at once (``LLMEngine.plan_decode_steps``; the fleet simulator's fast path);
        None where they are not provably so, or where this node measures each step (the decode roofline)."""
        if self.roofline is not None:
            return None
        return self.engine.plan_decode_steps(start_s, stop_after_s, end_by_s)

    def finish_decode_steps(self, plan: DecodeSteps, *, finished_only: bool = False) -> list[RequestOutput]:
        """Apply a planned run (``LLMEngine.finish_decode_steps``) and update the bookkeeping."""
        outputs = self.engine.finish_decode_steps(plan, finished_only=finished_only)
        self._note_outputs(outputs)
        return outputs

    def _note_outputs(self, outputs: list[RequestOutput]) -> None:
        for o in outputs:
            if o.new_token_ids and o.req_id in self._prompt_lens:
                del self._prompt_lens[o.req_id]
                self._decoding.add(o.req_id)
                target = self._tpot_targets.pop(o.req_id, None)
                if target is not None:
                    engine = self.engine
                    self._slack_decoders[o.req_id] = (engine.clock.now(), engine.num_steps, *target)
            if o.finished:  # its last token time stays for observation(), which drops it
                self._forget(o.req_id)
                self.num_finished_total += 1

    def tpot_target(self, request_id: str) -> float:
        """The TPOT target ``add`` was given for an unfinished request (0: none, or not here)."""
        target = self._tpot_targets.get(request_id)
        if target is None:
            decoding = self._slack_decoders.get(request_id)
            return 0.0 if decoding is None else decoding[-1]
        return target[1]

    def _forget(self, request_id: str) -> None:
        """The request is no longer in flight here (finished or aborted)."""
        self._prompt_lens.pop(request_id, None)
        self._decoding.discard(request_id)
        self._tpot_targets.pop(request_id, None)
        self._slack_decoders.pop(request_id, None)
        self.num_inflight -= 1

    # -- what leaves the node -----------------------------------------------------------------------

    def hello(self, *, model: str, backend: str, hardware: HardwareInfo, cell: str, pid: int = 0) -> NodeHello:
        """What the node says when it joins: who it is, its hardware and power, its KV geometry."""
        engine = self.engine
        cache = engine.cache_config
        return NodeHello(
            node_id=self.node_id,
            model=model,
            backend=backend,
            hardware=hardware,
            kv=KVInfo(
                num_device_blocks=cache.num_device_blocks,
                num_host_blocks=cache.num_host_blocks,
                block_size=cache.block_size,
                bytes_per_block=engine.runner.kv_bytes_per_block(cache.block_size),
                prefix_hash_algo=cache.prefix_hash_algo,
            ),
            max_model_len=engine.scheduler_config.max_model_len,
            power_score=power_score(hardware),
            cell=cell,
            pid=pid,
            prefill_tok_per_s=self._rates.prefill_tok_per_s,
            decode_step_ms=self._rates.decode_step_ms,
            kernels=getattr(engine.runner, "kernels", ""),
            max_loras=engine.scheduler_config.max_loras if getattr(engine.runner, "lora_config", None) else 0,
            speculative=engine.speculator.config.method if getattr(engine, "speculator", None) is not None else "",
        )

    def token_chunk(self, o: RequestOutput) -> TokenChunk:
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
            num_cached_tokens=o.num_cached_tokens,
            prompt_logprobs=[(e.token_id, e.logprob, list(e.top), e.rank) for e in o.prompt_logprobs]
            if o.prompt_logprobs is not None
            else None,
            embedding=o.embedding,
            num_prediction_accepted_tokens=o.num_prediction_accepted_tokens,
            num_prediction_rejected_tokens=o.num_prediction_rejected_tokens,
            timing=request_timing(o.metrics) if o.finished and o.metrics is not None else None,
        )

    def load_report(self) -> LoadReport:
        """The node's load now and its speed over the steps since the last report (closes that window)."""
        for r in self.engine.take_step_records():
            self._rates.observe(r.step_time_s, r.num_prefill_tokens, r.num_decode_requests)
        stats = self.engine.make_stats()
        rates = self._rates
        return LoadReport(
            node_id=self.node_id,
            num_running=stats.num_running,
            num_waiting=stats.num_waiting,
            num_swapped=stats.num_swapped,
            kv_usage=stats.kv_usage,
            num_free_device_blocks=stats.num_free_device_blocks,
            queued_prefill_tokens=sum(self._prompt_lens.values()),
            decode_batch_size=len(self._decoding),
            recent_step_ms=rates.close_window(),  # first: the figures below are the closed window's
            prefill_tok_per_s=rates.prefill_tok_per_s,
            decode_step_ms=rates.decode_step_ms,
            decode_token_step_ms=rates.token_step_ms,
            num_preemptions_total=stats.num_preemptions_total,
            num_requests_finished_total=self.num_finished_total,
            prefix_cache_hit_rate=stats.prefix_cache_hit_rate,
            num_requests_received_total=self.num_received_total,
            decode_roofline_fraction=self.roofline.close_window() if self.roofline is not None else 0.0,
            decode_slack_hist=list(self._slack_hist()),
            **self._lora_report(),
        )

    def _slack_hist(self) -> tuple[int, ...]:
        """LoadReport.decode_slack_hist (engine/decode_slack.py), at the step its decoders got in the window just
        closed (else the decode step), a prefill chunk being the step's token budget at the measured prefill rate."""
        if not self._slack_decoders:
            return ()
        rates, engine = self._rates, self.engine
        step_s = (rates.token_step_ms or rates.decode_step_ms) / 1e3
        chunk_tokens = engine.scheduler.scheduler_config.max_num_batched_tokens
        chunk_s = chunk_tokens / rates.prefill_tok_per_s if rates.prefill_tok_per_s > 0.0 else math.inf
        now_s = engine.clock.now()
        return slack_histogram(self._slack_decoders.values(), now_s, engine.num_steps, step_s, chunk_s)

    def _lora_report(self) -> dict:
        """LoadReport's adapter fields (empty when the runner serves none)."""
        engine = self.engine
        if getattr(engine.runner, "lora_config", None) is None:
            return {}
        scheduler = engine.scheduler
        stats = engine.runner.lora_stats()
        return {
            "lora_load_s": stats.load_time_s_total / stats.num_loads_total if stats.num_loads_total else 0.0,
            "lora_resident": engine.lora_names(engine.runner.resident_lora_ids()),
            "lora_running": sorted(engine.lora_names(scheduler.running_lora_ids())),
            "lora_waiting": sorted(engine.lora_names(scheduler.waiting_lora_ids())),
        }

    def observation(self, outputs: Sequence[RequestOutput], step_time_s: float) -> EngineObservation:
        """What a step showed (after ``finish_step``): inter-token gaps, finished requests, swaps."""
        now_s = self.engine.clock.now()
        inter_token_s: list[float] = []
        finished: list[FinishedRequest] = []
        iteration_tokens = 0
        for o in outputs:
            if o.new_token_ids:
                iteration_tokens += len(o.new_token_ids)
                if o.num_output_tokens == len(o.new_token_ids):
                    iteration_tokens += o.num_prompt_tokens  # its first tokens: its prefill ended in this step
                previous_s = self._last_token_s.get(o.req_id)
                if previous_s is not None:
                    inter_token_s += [(now_s - previous_s) / len(o.new_token_ids)] * len(o.new_token_ids)
                elif len(o.new_token_ids) > 1:
                    inter_token_s += [0.0] * (len(o.new_token_ids) - 1)
                if not o.finished:
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
                        request_id=o.req_id,
                        metrics=m,
                        num_cached_tokens=o.num_cached_tokens,
                    )
                )
        events: list[SchedulerEvent] = self.engine.scheduler.take_events()
        swaps = [
            ("out" if e.kind is SchedulerEventKind.SWAPPED_OUT else "in", int(e.details["num_blocks"]), step_time_s)
            for e in events
            if e.kind in (SchedulerEventKind.SWAPPED_OUT, SchedulerEventKind.SWAPPED_IN)
        ]
        return EngineObservation(
            self.engine.make_stats(),
            inter_token_s,
            finished,
            swaps,
            self._roofline_fraction(),
            self.engine.make_spec_stats(),
            self.engine.structured_stats.copy(),
            iteration_tokens,
        )

    def stats_observation(self) -> EngineObservation:
        """A report tick's observation: the scheduler's snapshot, nothing else."""
        return EngineObservation(
            self.engine.make_stats(), [], [], [], self._roofline_fraction(), self.engine.make_spec_stats(),
            self.engine.structured_stats.copy(),
        )  # fmt: skip

    def _roofline_fraction(self) -> float:
        return self.roofline.fraction if self.roofline is not None else 0.0


def _roofline(engine: LLMEngine, memory_bandwidth_gbps: float) -> DecodeRoofline | None:
    """The node's decode roofline, when both the device's bandwidth and the runner's weight bytes are known."""
    weight_bytes = getattr(engine.runner, "weight_bytes", 0)
    if memory_bandwidth_gbps <= 0 or weight_bytes <= 0:
        return None
    block_size = engine.cache_config.block_size
    kv_bytes_per_token = engine.runner.kv_bytes_per_block(block_size) / block_size
    return DecodeRoofline(weight_bytes, kv_bytes_per_token, memory_bandwidth_gbps)


def request_timing(m: RequestMetrics) -> RequestTiming:
    """A finished request's phases on this node, for its last TokenChunk (vLLM's per-request metrics)."""
    return RequestTiming(
        queue_s=m.queue_time_s,
        prefill_s=m.prefill_time_s,
        decode_s=m.decode_time_s,
        num_output_tokens=m.num_output_tokens,
    )
