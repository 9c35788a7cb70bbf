"""LLMEngine: one node's scheduler + model runner + detokenizer, advanced one step at a time.

Synchronous and sans-IO: it never sleeps nor touches a socket, and it reads time only through the
injected clock. Whoever owns it calls ``step()`` (the CLI), or its two halves ``start_step()`` /
``finish_step()`` (the node core, agent/node_core.py, which the agent's engine thread and the fleet
simulator both drive: the simulator lets virtual time pass between the halves). The runner behind the
``ModelRunner`` protocol is the only part that computes.

One request's life::

    add_request ─► Scheduler.waiting ─► schedule() ─► runner.execute() ─► update_from_output()
                         ▲   (preempted: swapped to host RAM, resumed first)       │
                         └──────────────────────────────────── detokenize, stop strings ─► RequestOutput
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from engine import bad_words, embeddings, prompt_logprobs, thinking_budget
from engine.batch import RunnerOutput, SchedulerOutput
from engine.clock import Clock, MonotonicClock
from engine.config import CacheConfig, SchedulerConfig
from engine.detokenizer import IncrementalDetokenizer
from engine.kv.block_pool import Tier
from engine.kv.kv_events import KVEvent, KVEventLog
from engine.lora import LoraRequest
from engine.model_runner import KVCacheSpec, ModelRunner
from engine.multi_step import DecodeRun, DecodeSteps
from engine.prefix_key import cache_key
from engine.prompt import check_sampling_token_ids, check_token_ids
from engine.remote_kv import RemoteKV
from engine.request import FinishReason, Request, RequestStatus
from engine.request_output import RequestMetrics, RequestOutput
from engine.sampling_params import SamplingParams
from engine.scheduler import Scheduler
from engine.scheduler_stats import SchedulerStats
from engine.spec import prediction_drafts as predictions
from engine.spec.grammar_drafts import MAX_FORCED_DRAFTS, StructuredOutputStats, count_accepted, propose_forced_drafts
from engine.spec.speculator import SpecDecodeStats, Speculator
from engine.step_rates import classify_batch
from engine.structured_output import GrammarCompiler, compile_grammar

STEP_RECORDS_KEPT = 4096


class EngineTokenizer(Protocol):
    eos_token_id: int | None
    vocab_size: int

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]: ...

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str: ...

    def apply_chat_template(
        self,
        messages: list[dict],
        add_generation_prompt: bool = True,
        tools: list[dict] | None = None,
        template_kwargs: dict | None = None,
        tool_format: str = "hermes",
    ) -> str: ...


@dataclass(frozen=True, slots=True)
class StepRecord:
    """One executed step, for rate estimates (prefill tok/s, decode step time) and load reports."""

    end_time_s: float
    step_time_s: float  # as measured (or predicted) by the runner
    num_prefill_tokens: int  # tokens of requests still computing their prompt (or recomputing after preemption)
    num_decode_requests: int  # requests that computed one token after having generated at least one
    num_batched_tokens: int


@dataclass(frozen=True, slots=True)
class PendingStep:
    """A step scheduled and executed, not yet applied: ``finish_step`` applies it (``step_time_s`` later, virtually)."""

    batch: SchedulerOutput
    output: RunnerOutput
    decode: DecodeRun | None = None  # the step's leading decode rows, taken in bulk (engine/mixed_step.py)

    @property
    def step_time_s(self) -> float:
        return self.output.step_time_s


@dataclass(frozen=True, slots=True)
class MigratedRequest:
    """A request leaving this node for another (``LLMEngine.export_request``).

    token_ids: prompt + output so far; the receiver resumes with them as its prompt (the last token's KV is
        never computed yet, so it is always recomputed there).
    block_ids: this node's device blocks holding the KV of token_ids' first ``len(block_ids)`` full blocks.
    lora_id: the LoRA adapter that KV was computed under (None: the base model); the receiver keys it under the same
        adapter (``import_prefix``), so only requests on that adapter hit it.
    priority: its engine priority here (its class's rank, then its own), for a receiver that has no other record.
    """

    req_id: str
    token_ids: list[int]
    num_output_tokens: int
    block_ids: list[int]
    lora_id: int | None = None
    priority: int = 0


@dataclass(slots=True)
class _Tracked:
    request: Request
    detokenizer: IncrementalDetokenizer
    metrics: RequestMetrics


class LLMEngine:
    """Serves many concurrent requests on one model runner with continuous batching."""

    def __init__(
        self,
        runner: ModelRunner,
        tokenizer: EngineTokenizer,
        scheduler_config: SchedulerConfig,
        cache_config: CacheConfig,
        clock: Clock | None = None,
        *,
        detokenize: bool = True,
        speculator: Speculator | None = None,
        grammars: GrammarCompiler | None = None,
    ) -> None:
        """detokenize: False leaves ``RequestOutput.text`` empty and ignores stop strings (the fleet
        simulator, whose tokens are placeholders).
        speculator: drafts proposed before each step and verified by the runner (engine/spec/); None
        decodes plainly.
        grammars: compiles a request's structured-output constraint for this tokenizer (backends/grammar.py);
        None refuses constrained requests (engine/structured_output.py)."""
        if (max_len := scheduler_config.max_model_len) > runner.max_model_len:
            raise ValueError(f"max_model_len {max_len} exceeds the model's {runner.max_model_len}")
        self.runner = runner
        self.tokenizer = tokenizer
        self.scheduler_config = scheduler_config
        self.cache_config = cache_config
        self.clock = clock or MonotonicClock()
        self.detokenize = detokenize
        self.speculator = speculator
        self.grammars = grammars
        self.forced_drafts = MAX_FORCED_DRAFTS  # a grammar's forced tokens as drafts (engine/spec/grammar_drafts.py)
        self.structured_stats = StructuredOutputStats()
        lora_config = getattr(runner, "lora_config", None)  # a LoraRunner (engine/lora.py) built with LoRA on
        if lora_config is not None and not scheduler_config.max_loras:
            scheduler_config.max_loras = lora_config.max_loras
        self.scheduler = Scheduler(scheduler_config, cache_config, self.clock)
        self._loras: dict[str, LoraRequest] = {}
        runner.initialize_kv_cache(
            KVCacheSpec(
                num_device_blocks=cache_config.num_device_blocks,
                num_host_blocks=cache_config.num_host_blocks,
                block_size=cache_config.block_size,
            )
        )
        self._tracked: dict[str, _Tracked] = {}
        self._ids = itertools.count()
        self.num_steps = 0
        self.busy_time_s = 0.0  # summed runner step time
        self._step_records: deque[StepRecord] = deque(maxlen=STEP_RECORDS_KEPT)
        self.remote_kv: RemoteKV | None = None  # the REMOTE tier's mover (set_remote_kv)
        # the fleet simulator's mixed steps (engine/mixed_step.py, ``_start_mixed_step``): off unless its owner
        # sets it, since ``finish_step`` then gives no output for a decode row that did not finish
        self.bulk_decode_rows = False

    # -- requests -------------------------------------------------------------------------------

    def encode_chat(self, messages: list[dict[str, str]]) -> list[int]:
        """Render the checkpoint's chat template and tokenize it (special tokens included)."""
        return self.tokenizer.encode(self.tokenizer.apply_chat_template(messages, add_generation_prompt=True))

    def add_request(
        self,
        prompt: str | Sequence[int],
        params: SamplingParams,
        req_id: str | None = None,
        arrival_time_s: float | None = None,
        priority: int = 0,
        lora_name: str | None = None,
        num_resumed_tokens: int = 0,
    ) -> str:
        """Queue a prompt (text or token ids), on the base model or the LoRA adapter ``lora_name`` (added with
        ``add_lora``); ``priority``: higher runs first and may swap lower ones out (engine/scheduler.py);
        ``num_resumed_tokens``: the prompt's last tokens that are the request's own output from before it resumed
        here (its penalties count them as output). PromptError / ValueError, and nothing queued, on bad input."""
        lora_id = None
        if lora_name is not None:
            lora = self._loras.get(lora_name)
            if lora is None:
                raise ValueError(f"unknown LoRA adapter {lora_name!r}")
            lora_id = lora.lora_id
        token_ids = self.tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        # a tuple as given: check_token_ids passes one it passed just before (the intake's, in the same process)
        checked = prompt if type(prompt) is tuple else token_ids
        check_token_ids(checked, self.tokenizer.vocab_size)  # the context length: Scheduler.add_request
        # bad words, a predicted output and the thinking's delimiters given here, not through an intake, tokenized here
        params = predictions.tokenized(self.tokenizer, bad_words.tokenized(self.tokenizer, params))
        params = thinking_budget.tokenized(self.tokenizer, params)
        check_sampling_token_ids(params, self.tokenizer.vocab_size)
        req_id = req_id if req_id is not None else f"req-{next(self._ids)}"
        if req_id in self._tracked:
            raise ValueError(f"request id {req_id!r} is already in use")
        now = self.clock.now() if arrival_time_s is None else arrival_time_s
        if not 0 <= num_resumed_tokens < len(token_ids):
            raise ValueError(
                f"num_resumed_tokens must be in [0, {len(token_ids)}) (the prompt's), got {num_resumed_tokens}"
            )
        grammar = compile_grammar(self.grammars, params.structured_outputs, token_ids, num_resumed_tokens)
        prompt_logprobs.check_runner(self.runner, params)
        embeddings.check_runner(self.runner, params)
        eos_token_id = self.tokenizer.eos_token_id
        request = Request(req_id, token_ids, params, now, eos_token_id, lora_id, priority, num_resumed_tokens, grammar)
        self.structured_stats.num_requests_total += int(grammar is not None)
        self.scheduler.add_request(request)
        stop = params.stop if self.detokenize else ()
        detokenizer = IncrementalDetokenizer(
            self.tokenizer, stop, params.min_tokens, params.include_stop_str_in_output, params.skip_special_tokens
        )
        request.metrics = metrics = RequestMetrics(now)  # read by the bulk paths below without a _tracked lookup
        self._tracked[req_id] = _Tracked(request, detokenizer, metrics)
        return req_id

    # -- LoRA adapters (engine/lora.py) -----------------------------------------------------------

    def add_lora(self, lora: LoraRequest) -> None:
        """Serve adapter ``lora`` under its name. ValueError (nothing changed) when the runner serves no
        adapters, the name is taken, or the runner refuses the files (backends/checkpoint/peft_adapter.py)."""
        if getattr(self.runner, "lora_config", None) is None:
            raise ValueError("this engine's runner serves no LoRA adapters (start it with LoRA enabled)")
        if lora.name in self._loras:
            raise ValueError(f"LoRA adapter {lora.name!r} is already loaded")
        if any(other.lora_id == lora.lora_id for other in self._loras.values()):
            raise ValueError(f"LoRA adapter id {lora.lora_id} is already in use")
        self.runner.add_lora(lora)
        self._loras[lora.name] = lora

    def remove_lora(self, name: str) -> None:
        """Stop serving adapter ``name``. KeyError if unknown; ValueError while requests still use it."""
        lora = self._loras.get(name)
        if lora is None:
            raise KeyError(f"unknown LoRA adapter {name!r}")
        in_use = sum(1 for t in self._tracked.values() if t.request.lora_id == lora.lora_id)
        if in_use:
            raise ValueError(f"LoRA adapter {name!r} is in use by {in_use} unfinished requests")
        self.runner.remove_lora(lora.lora_id)
        del self._loras[name]

    def list_loras(self) -> list[LoraRequest]:
        return list(self._loras.values())

    def get_lora(self, name: str) -> LoraRequest | None:
        return self._loras.get(name)

    def lora_names(self, lora_ids: Iterable[int]) -> list[str]:
        """The names of these adapter ids (unknown ids are skipped), in the given order."""
        by_id = {lora.lora_id: name for name, lora in self._loras.items()}
        return [by_id[i] for i in lora_ids if i in by_id]

    def abort(self, req_ids: Iterable[str]) -> None:
        ids = [r for r in dict.fromkeys(req_ids) if r in self._tracked]  # each id once
        self.scheduler.finish_requests(ids, FinishReason.ABORT)
        if self.speculator is not None:
            self.speculator.drop(ids)
        for r in ids:
            del self._tracked[r]

    def has_unfinished_requests(self) -> bool:
        return self.scheduler.has_unfinished_requests()

    def export_request(self, req_id: str) -> MigratedRequest | None:
        """What another node needs to continue a request here (None for an unknown one): its tokens, what is
        left of its budget, and the device blocks of its computed full blocks (empty unless it is RUNNING on
        the device). The caller reads those blocks' KV (the runner) before the next step, then aborts it here.
        A request on a LoRA adapter or with a salt moves with its KV too: ``import_prefix`` keys it there under the
        same adapter (its id is the same on every node: engine/lora.py) and salt."""
        tracked = self._tracked.get(req_id)
        if tracked is None:
            return None
        self.scheduler.sync_request(req_id)
        request = tracked.request
        on_device = request.status is RequestStatus.RUNNING
        kv = self.scheduler.kv_cache_manager
        block_ids = kv.computed_full_block_ids(request) if on_device else []
        tokens = list(request.all_token_ids)
        return MigratedRequest(req_id, tokens, request.num_output_tokens, block_ids, request.lora_id, request.priority)

    def import_prefix(
        self, token_ids: list[int], num_blocks: int, cache_salt: str | None = None, lora_id: int | None = None
    ) -> list[int]:
        """KVCacheManager.import_prefix_blocks on this engine's cache: the device block each transferred block
        must be written to (-1: skip). Write them (the runner) before the next step. ``cache_salt`` (vLLM's) and
        ``lora_id`` (the adapter the KV was computed under): the request's; the blocks are keyed under them
        (engine/prefix_key.py), so only requests of that salt on that adapter hit them."""
        key = cache_key(lora_id, cache_salt)
        return self.scheduler.kv_cache_manager.import_prefix_blocks(token_ids, num_blocks, key)

    def reset_prefix_cache(self) -> int | None:
        """Forget the prefix cache's blocks (vLLM's rule: only while no block is in use): how many, or None."""
        return self.scheduler.kv_cache_manager.pool(Tier.DEVICE).reset_prefix_cache()

    def enable_kv_events(self) -> None:
        """Log the device prefix cache's changes from now on (engine/kv/kv_events.py); take them after each step."""
        pool = self.scheduler.kv_cache_manager.pool(Tier.DEVICE)
        pool.kv_events = pool.kv_events or KVEventLog()

    def disable_kv_events(self) -> None:
        """Log no more (what is logged is dropped)."""
        self.scheduler.kv_cache_manager.pool(Tier.DEVICE).kv_events = None

    def take_kv_events(self) -> list[KVEvent]:
        """The KV cache events since the last call, oldest first ([] unless ``enable_kv_events`` was called)."""
        events = self.scheduler.kv_cache_manager.pool(Tier.DEVICE).kv_events
        return [] if events is None else events.take()

    def num_output_tokens(self, req_id: str) -> int:
        """The tokens an unfinished request has generated so far (0 for one this engine does not hold)."""
        tracked = self._tracked.get(req_id)
        if tracked is None:
            return 0
        self.scheduler.sync_request(req_id)
        return tracked.request.num_output_tokens

    @property
    def num_unfinished_requests(self) -> int:
        return len(self._tracked)

    # -- the loop -------------------------------------------------------------------------------

    def step(self) -> list[RequestOutput]:
        """One scheduler iteration: schedule, execute, update; returns the requests that progressed."""
        pending = self.start_step()
        return [] if pending is None else self.finish_step(pending)

    def start_step(self) -> PendingStep | None:
        """Schedule and execute a step; None when there was nothing to run nor to tell the runner.

        An empty batch that only names finished requests still goes to the runner (it drops their state).
        """
        if self.bulk_decode_rows and (pending := self._start_mixed_step()) is not None:
            return pending
        if self.speculator is not None:
            self.speculator.propose(self.scheduler.running_requests())
        if self.grammars is not None and self.forced_drafts:
            proposed = propose_forced_drafts(self.scheduler.running_requests(), self.forced_drafts)
            self.structured_stats.num_forced_draft_tokens_total += proposed
        batch = self.scheduler.schedule()
        if self.remote_kv is not None:
            self._move_remote(batch)
        if batch.is_empty and not batch.finished_req_ids:
            return None
        return PendingStep(batch, self.runner.execute(batch))

    def set_remote_kv(self, mover: RemoteKV | None) -> None:
        """Install the mover of the REMOTE tier (engine/remote_kv.py); None: victims recompute instead."""
        self.remote_kv = mover
        self.scheduler.remote_available = mover is not None

    def _move_remote(self, batch: SchedulerOutput) -> None:
        """Hand the step's remote moves to the mover, before the runner reads or writes any block."""
        mover = self.remote_kv
        if batch.remote_swap_out:
            mover.swap_out(batch.remote_swap_out)
        if batch.remote_swap_in:
            mover.swap_in(batch.remote_swap_in)
        if batch.remote_fetch:
            mover.fetch(batch.remote_fetch)
        self.flush_remote_drops()

    def flush_remote_drops(self) -> None:
        """Tell the mover now (not at the next step) about remote KV no longer needed: aborts, finishes, failures."""
        drops = self.scheduler.kv_cache_manager.remote.take_drops()
        if drops and self.remote_kv is not None:
            self.remote_kv.drop(drops)

    def finish_step(self, pending: PendingStep) -> list[RequestOutput]:
        """Apply an executed step at the clock's now: sampled tokens, finishes, text; the requests that progressed."""
        if pending.decode is not None:
            return self._finish_mixed_step(pending)
        batch, runner_output = pending.batch, pending.output
        self.num_steps += 1
        self.busy_time_s += runner_output.step_time_s
        updates = self.scheduler.update_from_output(batch, runner_output)
        if runner_output.prompt_logprobs:  # before the updates: a first output carries them
            prompt_logprobs.record(runner_output.prompt_logprobs, self.scheduler.get_request)
        if self.grammars is not None:
            self.structured_stats.num_forced_accepted_tokens_total += count_accepted(batch, runner_output)
        if self.speculator is not None:
            self.speculator.observe(batch, runner_output)
            # finished this step, or since the last (aborts, stop strings): the proposer forgets them
            self.speculator.drop([u.req_id for u in updates if u.finished] + batch.finished_req_ids)
        now = self.clock.now()
        if not batch.is_empty:
            self._record_step(batch, runner_output.step_time_s, now)
        for scheduled in batch.requests:
            tracked = self._tracked.get(scheduled.req_id)
            if tracked is not None and tracked.metrics.first_scheduled_time_s is None:
                tracked.metrics.first_scheduled_time_s = tracked.request.first_scheduled_time_s or now
        outputs = []
        for update in updates:
            tracked = self._tracked.get(update.req_id)
            if tracked is None:
                continue
            outputs.append(self._process_update(tracked, update, now))
        if runner_output.embeddings:  # the step that computed a prompt's embedding also sampled its first token
            for out in outputs:
                out.embedding = runner_output.embeddings.get(out.req_id)
        return outputs

    # -- a step's decode rows in bulk (engine/mixed_step.py) -------------------------------------

    def _start_mixed_step(self) -> PendingStep | None:
        """``start_step`` with the leading pure decode rows scheduled in bulk, where the runner prices such rows
        (a simulated runner: ``execute_with_decode_rows``) and nothing reads them one by one (no speculator, no
        text); None: schedule the plain way."""
        runner = self.runner
        execute = getattr(runner, "execute_with_decode_rows", None)
        if execute is None or self.speculator is not None or self.detokenize:
            return None
        decode = self.scheduler.plan_decode_rows(runner.decode_token_id)
        if decode is None:
            return None
        batch = self.scheduler.schedule(decode)
        if self.remote_kv is not None:
            self._move_remote(batch)
        return PendingStep(batch, execute(batch, len(decode.requests), decode.kv_read), decode)

    def _finish_mixed_step(self, pending: PendingStep) -> list[RequestOutput]:
        """``finish_step`` of a mixed step: the outputs of its scheduled rows and of the decode rows that
        finished; each other decode row got one token (its metrics say so; the fleet simulator's way)."""
        batch, runner_output, decode = pending.batch, pending.output, pending.decode
        step_time_s = runner_output.step_time_s
        self.num_steps += 1
        self.busy_time_s += step_time_s
        finished = self.scheduler.commit_decode_rows(decode)  # first: their rows come first in the step
        updates = self.scheduler.update_from_output(batch, runner_output)
        now = self.clock.now()
        num_rows = len(decode.requests)
        num_prefill, num_decode = classify_batch(batch)
        self._step_records.append(
            StepRecord(now, step_time_s, num_prefill, num_decode + num_rows, batch.num_batched_tokens + num_rows)
        )
        tracked_of = self._tracked.get
        for scheduled in batch.requests:
            tracked = tracked_of(scheduled.req_id)
            if tracked is not None and tracked.metrics.first_scheduled_time_s is None:
                tracked.metrics.first_scheduled_time_s = tracked.request.first_scheduled_time_s or now
        outputs = []
        for update in finished:
            tracked = tracked_of(update.req_id)
            if tracked is not None:
                outputs.append(self._process_update(tracked, update, now))
        # each other decode row got a token: its fields and metrics say so when next read (engine/decode_cohort.py)
        for update in updates:
            tracked = tracked_of(update.req_id)
            if tracked is not None:
                outputs.append(self._process_update(tracked, update, now))
        return outputs

    # -- several pure decode steps at once (engine/multi_step.py) --------------------------------

    def plan_decode_steps(
        self, start_s: float, stop_after_s: float, end_by_s: float = float("inf"), max_steps: int = 1024
    ) -> DecodeSteps | None:
        """Take the next steps as one run of pure decode steps when they provably are (engine/multi_step.py)
        and the runner predicts them (a simulated runner: ``decode_token_id``, ``decode_step_times``); None
        otherwise (then ``start_step`` as usual). The run starts at ``start_s`` on the engine clock, never
        ends after ``end_by_s`` (None when even its first step would) and stops after the first step ending
        at or after ``stop_after_s``. Once planned, it stands for the steps that begin now: apply (a prefix
        of) it with ``finish_decode_steps`` before anything else steps this engine."""
        runner = self.runner
        step_times = getattr(runner, "decode_step_times", None)
        if step_times is None or self.speculator is not None:
            return None
        run = self.scheduler.plan_decode_run(runner.decode_token_id, max_steps)
        if run is None:
            return None
        if self.detokenize and any(r.sampling_params.stop for r in run.requests):
            return None  # stop strings are checked token by token
        times = step_times(len(run.requests), run.kv_read, start_s, stop_after_s, end_by_s, run.max_steps)
        num_steps = self.scheduler.kv_step_limit(run, len(times)) if times else 0
        if num_steps == 0:
            return None
        del times[num_steps:]
        ends = []
        now = start_s
        for t in times:
            now += t
            ends.append(now)
        self.scheduler.begin_decode_run()
        return DecodeSteps(run, times, ends)

    def finish_decode_steps(self, plan: DecodeSteps, *, finished_only: bool = False) -> list[RequestOutput]:
        """Apply a planned run (``plan.truncate`` it first to stop earlier) at the clock's now, its end; the
        outputs of its requests, each with all the run's tokens, as ``finish_step`` gives after one step.
        finished_only: only the outputs of the requests that finished; every other request of
        ``plan.run.requests`` got ``plan.num_steps`` tokens (its metrics say so; the fleet simulator's way)."""
        updates = self.scheduler.commit_decode_run(plan.run, plan.num_steps, finished_only)
        num_seqs = len(plan.run.requests)
        for step_time_s, end_s in zip(plan.step_times_s, plan.end_times_s):
            self.num_steps += 1
            self.busy_time_s += step_time_s
            self._step_records.append(StepRecord(end_s, step_time_s, 0, num_seqs, num_seqs))
        self.runner.account_decode_steps(plan.step_times_s)
        now = self.clock.now()
        outputs = []
        for update in updates:
            tracked = self._tracked.get(update.req_id)
            if tracked is not None:
                outputs.append(self._process_update(tracked, update, now))
        # finished_only: the others' tokens and metrics are added when next read (engine/decode_cohort.py)
        return outputs

    def _record_step(self, batch, step_time_s: float, now: float) -> None:
        num_prefill, num_decode = classify_batch(batch)
        self._step_records.append(StepRecord(now, step_time_s, num_prefill, num_decode, batch.num_batched_tokens))
        if self.scheduler.stall_free is not None:  # the plain path's steps calibrate stall-free batching
            self.scheduler.stall_free.fit.observe(num_prefill, num_decode, step_time_s)

    def take_step_records(self) -> list[StepRecord]:
        """Steps executed since the last call (at most STEP_RECORDS_KEPT, oldest dropped)."""
        records = list(self._step_records)
        self._step_records.clear()
        return records

    def _process_update(self, tracked: _Tracked, update, now: float) -> RequestOutput:
        metrics = tracked.metrics
        new_ids = update.new_token_ids  # a fresh list per update (scheduler.py, multi_step.py): the output owns it
        if new_ids:
            metrics.first_token_time_s = metrics.first_token_time_s or now
            metrics.last_token_time_s = now
            metrics.num_output_tokens += len(new_ids)
        finished, reason, stop_reason = update.finished, update.finish_reason, update.stop_reason
        if self.detokenize:
            detok = tracked.detokenizer
            # a stop token ends the request but is not part of the text
            text_ids = new_ids[:-1] if reason is FinishReason.STOP and isinstance(stop_reason, int) else new_ids
            detok.add_tokens(text_ids)
            if detok.stop_string is not None and not finished:
                self.scheduler.finish_requests([update.req_id], FinishReason.STOP, detok.stop_string)
                finished, reason, stop_reason = True, FinishReason.STOP, detok.stop_string
            new_text, text = detok.take_delta(finished), detok.text
        else:
            new_text = text = ""  # no text, no stop strings (the fleet simulator's placeholder tokens)
        request = tracked.request
        num_cached = request.num_cached_prompt_tokens
        num_predicted = len(request.sampling_params.prediction_token_ids)  # OpenAI's prediction, as tokens
        if finished:
            metrics.finished_time_s = now
            metrics.num_cached_prompt_tokens = num_cached
            metrics.num_preemptions, metrics.max_tokens = request.num_preemptions, request.sampling_params.max_tokens
            del self._tracked[update.req_id]
        return RequestOutput(
            update.req_id,
            new_text,
            text,
            new_ids,
            len(request.prompt_token_ids),
            len(request.output_token_ids),
            finished,
            reason,
            stop_reason,
            update.new_logprobs,  # a fresh list per update too
            metrics,
            num_cached,
            request.prompt_logprobs.take() if request.prompt_logprobs is not None else None,
            num_prediction_accepted_tokens=request.num_prediction_accepted,
            num_prediction_rejected_tokens=max(0, num_predicted - request.num_prediction_accepted),
        )

    def run_until_done(self) -> dict[str, RequestOutput]:
        """Step until every queued request finished; returns each request's final output."""
        final: dict[str, RequestOutput] = {}
        while self.has_unfinished_requests():
            for out in self.step():
                if out.finished:
                    final[out.req_id] = out
        return final

    def generate(self, prompts: Sequence[str | Sequence[int]], params: SamplingParams) -> list[RequestOutput]:
        """Batch convenience: queue all prompts, run to completion, return outputs in prompt order."""
        ids = [self.add_request(p, params) for p in prompts]
        final = self.run_until_done()
        return [final[i] for i in ids]

    def make_stats(self) -> SchedulerStats:
        return self.scheduler.make_stats()

    def make_spec_stats(self) -> SpecDecodeStats | None:
        """Speculative decoding totals, or None when this engine does not speculate."""
        return None if self.speculator is None else self.speculator.make_stats()
