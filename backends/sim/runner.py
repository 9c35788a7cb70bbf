"""SimModelRunner: a ModelRunner that does no math. It predicts each step's time on a simulated GPU.

It reads only what a real runner's step costs depend on — tokens per request, where each chunk starts
(context read by attention), how many rows sample, KV blocks moved — and returns one dummy token per
sampling request (never the model's EOS, so requests end on max_tokens / the context limit) with
``step_time_s`` = the prediction. In virtual time (the fleet simulator) the caller advances its clock by
that time; in real time (an agent serving a simulated model) a ``PacedRunner`` (paced_runner.py) wrapped
around it sleeps to keep that pace. An empty batch (only finished requests to forget) takes no time.
"""

from __future__ import annotations

from backends.checkpoint.model_config import ModelConfig
from backends.lora_store import LoraRunnerVerbs
from backends.sim.cost_model import BYTES_PER_VALUE, NodeHardware, StepCostModel, num_kv_blocks
from backends.sim.lora_cost import SimLoraSlots
from backends.sim.model_shapes import SIM_PREFIX, kv_bytes_per_token, weight_bytes
from backends.sim.spec_model import SimSpecModel
from backends.sleep_levels import SleepVerbs
from engine.batch import RunnerOutput, SchedulerOutput
from engine.lora import LoraConfig
from engine.model_runner import KVCacheSpec


class SimModelRunner(LoraRunnerVerbs, SleepVerbs):
    """Implements ``engine.model_runner.ModelRunner`` for a simulated model on simulated GPUs.

    ``sleep`` / ``wake_up`` (backends/sleep_levels.py) track vLLM's levels as the real runners do; a sleep returns
    the bytes a real node's GPUs would free: the KV cache of the last spec, and the bf16 weights (moved to host RAM
    at level 1, dropped at level 2). Waking takes no simulated time here."""

    def __init__(
        self,
        model: ModelConfig,
        hardware: NodeHardware,
        *,
        block_size: int = 16,
        cost_model: StepCostModel | None = None,
        spec: SimSpecModel | None = None,
        lora_config: LoraConfig | None = None,
    ) -> None:
        """spec: how drafts fare (acceptance rate, draft cost) when the engine speculates; None = every
        draft is rejected and drafting costs nothing. lora_config: serve LoRA adapters in that many
        simulated slots (lora_cost.py prices their loads and matmuls); None = base model only."""
        if not model.name.startswith(SIM_PREFIX):
            raise ValueError(f"a simulated model's name must start with {SIM_PREFIX!r}, got {model.name!r}")
        self.model = model
        self.hardware = hardware
        self.cost = cost_model or StepCostModel(model, hardware, block_size=block_size)
        eos = model.eos_token_id
        # the dummy token: a fixed id that is neither EOS nor BOS
        self.dummy_token_id = next(t for t in range(3, model.vocab_size) if t not in (eos, model.bos_token_id))
        self.kv_spec: KVCacheSpec | None = None
        self.spec = spec
        self.num_steps = 0
        self.busy_time_s = 0.0  # summed predicted step time
        self.lora_config = lora_config
        self.lora_slots = None if lora_config is None else SimLoraSlots(model, hardware, lora_config)

    @property
    def config(self):
        """The simulated model's ModelConfig, named as the real runners name theirs: an agent reads its KV geometry
        from it to open a KV data plane (agent/kv_data_plane.accept_spec_for); having no KV tensors to read,
        a simulated node's migrations ship no bytes and the target re-prefills."""
        return self.model

    def _lora_s(self, batch: SchedulerOutput) -> float:
        """Loading the step's cold adapters, then their low-rank matmuls (lora_cost.py)."""
        lora_ids = {r.lora_id for r in batch.requests if r.lora_id is not None}
        if self.lora_slots is None:
            if lora_ids:
                raise ValueError("a request names a LoRA adapter but this runner has no lora_config")
            return 0.0
        load_s = self.lora_slots.activate(lora_ids)
        if not lora_ids:
            return load_s
        num_lora_tokens = sum(len(r.token_ids) + len(r.spec_token_ids) for r in batch.requests if r.lora_id is not None)
        return load_s + self.lora_slots.compute_s(num_lora_tokens, len(lora_ids))

    @property
    def max_model_len(self) -> int:
        return self.model.max_position_embeddings

    def kv_bytes_per_block(self, block_size: int) -> int:
        return kv_bytes_per_token(self.model, BYTES_PER_VALUE) * block_size

    def num_device_blocks(self, block_size: int, gpu_memory_utilization: float = 0.9) -> int:
        """Device KV blocks this node's GPUs hold after the weights (see cost_model.num_kv_blocks)."""
        return num_kv_blocks(self.model, self.hardware, block_size, gpu_memory_utilization)

    def initialize_kv_cache(self, spec: KVCacheSpec) -> None:
        if spec.block_size != self.cost.block_size:
            self.cost = StepCostModel(self.model, self.hardware, self.cost.efficiency, spec.block_size)
        self.kv_spec = spec

    # -- sleep mode (SleepVerbs' hooks): what sleeps is tracked in SleepVerbs' tags; no tensors to free ----------

    def _sleep_kv(self) -> int:
        spec = self.kv_spec
        if spec is None or "kv_cache" in self._asleep:
            return 0
        return self.kv_bytes_per_block(spec.block_size) * spec.num_device_blocks

    def _sleep_weights(self, level: int) -> int:
        """Level 1 moves the weights off the GPUs and level 2 drops them: either frees them there, once."""
        return 0 if "weights" in self._asleep else int(weight_bytes(self.model, BYTES_PER_VALUE))

    def _wake_weights(self) -> None:
        pass

    def _wake_kv(self) -> None:
        pass

    def predict_step_s(self, batch: SchedulerOutput, num_decode_rows: int = 0, decode_kv_read: int = 0) -> float:
        """num_decode_rows, decode_kv_read: rows of one known token each, sampled, with contexts summing to that,
        counted in besides ``batch.requests`` (a mixed step's decode rows: ``execute_with_decode_rows``)."""
        num_tokens = num_sampled = num_decode_rows
        kv_read = decode_kv_read
        # each such row adds start + 1 attention units: integers, summed exactly in any order
        attn_units = float(decode_kv_read + num_decode_rows)
        num_drafting = max_drafts = 0
        for r in batch.requests:
            q = len(r.token_ids) + len(r.spec_token_ids)
            start = r.start_pos
            num_tokens += q
            kv_read += start
            attn_units += q * (start + (q + 1) * 0.5)
            if r.sample:
                num_sampled += 1 + len(r.spec_token_ids)  # a verification projects every draft's row too
            if r.spec_token_ids:
                num_drafting += 1
                max_drafts = max(max_drafts, len(r.spec_token_ids))
        draft_s = 0.0
        num_seqs = len(batch.requests) + num_decode_rows
        if num_drafting and self.spec is not None:
            mean_context = kv_read // max(num_seqs, 1)
            draft_s = self.spec.draft_time_s(num_drafting, max_drafts, mean_context)
        return draft_s + self.cost.step_time_s(
            num_tokens,
            num_seqs,
            num_sampled,
            attn_units,
            kv_read,
            swap_blocks=len(batch.blocks_to_swap_out) + len(batch.blocks_to_swap_in),
            copy_blocks=len(batch.blocks_to_copy),
        )

    # -- several pure decode steps at once (engine/multi_step.py, LLMEngine.plan_decode_steps) -----

    @property
    def decode_token_id(self) -> int:
        """What every sampling row returns (without speculative decoding)."""
        return self.dummy_token_id

    def decode_step_times(
        self, num_seqs: int, kv_read: int, start_s: float, stop_after_s: float, end_by_s: float, max_steps: int
    ) -> list[float] | None:
        """The times ``execute`` would predict for consecutive pure decode steps of ``num_seqs`` requests whose
        contexts sum to ``kv_read`` tokens (each step reads one more per request), bit for bit: steps from
        ``start_s`` while they end by ``end_by_s``, stopping after the first one ending at or after
        ``stop_after_s``, at most ``max_steps``. None when this runner cannot tell (drafts, adapters)."""
        if self.spec is not None or self.lora_slots is not None:
            return None
        step_time_s = self.cost.step_time_s
        times: list[float] = []
        now = start_s
        while len(times) < max_steps:
            # predict_step_s's sums for q = 1: attention units start + 1 per row, summed as floats (exact integers)
            t = 0.0 + step_time_s(num_seqs, num_seqs, num_seqs, float(kv_read + num_seqs), kv_read)
            if now + t > end_by_s:
                break
            times.append(t)
            now += t
            if now >= stop_after_s:
                break
            kv_read += num_seqs
        return times

    def account_decode_steps(self, step_times_s: list[float]) -> None:
        """Count steps applied through ``decode_step_times`` as ``execute`` counts its own."""
        for t in step_times_s:
            self.num_steps += 1
            self.busy_time_s += t

    def execute_with_decode_rows(self, batch: SchedulerOutput, num_rows: int, kv_read: int) -> RunnerOutput:
        """``execute`` of a step that also carries ``num_rows`` decode rows not listed in ``batch`` (no adapter, no
        drafts; contexts summing to ``kv_read``): each samples ``decode_token_id`` (not in the output: the engine
        applies them, engine/mixed_step.py), and the step's time counts them as ``execute`` would."""
        return self.execute(batch, num_rows, kv_read)

    def execute(self, batch: SchedulerOutput, num_decode_rows: int = 0, decode_kv_read: int = 0) -> RunnerOutput:
        self._check_awake()
        if batch.is_empty and not num_decode_rows:  # only finished requests to forget: no kernel runs, no time
            return RunnerOutput(sampled_token_ids={}, step_time_s=0.0)
        step_s = self.predict_step_s(batch, num_decode_rows, decode_kv_read) + self._lora_s(batch)
        token = self.dummy_token_id
        spec = self.spec
        if spec is None:
            sampled = {r.req_id: [token] for r in batch.requests if r.sample}
        else:
            sampled = {
                r.req_id: [token] * (1 + (spec.num_accepted(len(r.spec_token_ids)) if r.spec_token_ids else 0))
                for r in batch.requests
                if r.sample
            }
        self.num_steps += 1
        self.busy_time_s += step_s
        return RunnerOutput(sampled_token_ids=sampled, step_time_s=step_s)
