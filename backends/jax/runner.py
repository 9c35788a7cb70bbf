"""JaxModelRunner: the ModelRunner protocol on JAX (CPU here; one GPU with the ``jax[cuda12]`` extra).

One step (``execute``), the same contract as the torch runner::

    block moves (swap_out, swap_in, copy)             kv_cache.py, in batch.py's order
    decodes  -> padded [B bucket] rows + block tables  decode_step   (layer program per (B, M) bucket)
             or, <= 4 plain rows on a CPU in fp32:     kernel_decode_step (cpu_kernel.py: one C call, FFI)
    chunks   -> padded [T bucket] rows + key blocks    chunk_step    (layer program per (T, KB) bucket)
             or one chunk of >= 256 padded rows:       the same, its attention solo_attention.py's causal row groups
                                                       (layer program per (T, context blocks) bucket)
    sample   -> one host read of the ids               sampler.py

Host-side work per step is numpy only (padding, block tables, slots); every device computation is a
jitted program whose input shapes come from buckets.py, so steady-state decode never recompiles. A
step is the embed program, one layer program called once per layer, and the head (model.py says why).
``num_compilations`` counts the XLA compiles this runner caused (tests assert it stays flat after
``warmup``). A step with both decodes and chunks runs both steps (the weights are read twice);
pure decode steps, the steady state, run one.

A request with ``spec_token_ids`` is run as a chunk of ``token_ids + spec_token_ids`` and its drafts
verified as backends/sample_slots.py describes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np

from backends.jax import cpu_kernel
from backends.jax.attention import DecodeMeta
from backends.jax.buckets import BucketPolicy, CompileCounter
from backends.jax.chunk_meta import build_chunk_meta
from backends.jax.huge_params import collapse_arrays
from backends.jax.kv_cache import PagedKVCache
from backends.jax.lora_slots import JaxLoraSlots
from backends.jax.model import Dims, LlamaParams, chunk_step, decode_step, load_params, random_tensors, resolve_dtype
from backends.jax.prompt_scores import score_prompt_rows
from backends.jax.sampler import NUM_CANDIDATES, Sampler, _argmax, _sample_random
from backends.jax.solo_attention import SOLO_MIN_ROWS, build_solo_meta
from backends.kv_layout import KVLayout, apply_block_moves, flat_slots, kv_bytes_per_block
from backends.lora_store import LoraRunnerVerbs
from backends.prompt_rows import PromptRows
from backends.sample_slots import SampleRows, SampleSlot, accept_sampled, chunk_token_ids, per_row
from backends.sleep_levels import SleepVerbs
from backends.torch.thread_choice import ThreadChooser  # pure Python: imports no torch
from engine.batch import RunnerOutput, ScheduledRequest, SchedulerOutput
from engine.lora import LoraConfig
from engine.model_runner import KVCacheSpec


def resolve_device(device: str | jax.Device) -> jax.Device:
    """ "cpu", "cuda" / "gpu", "cuda:N" / "gpu:N", or a jax.Device."""
    if isinstance(device, jax.Device):
        return device
    kind, _, index = str(device).partition(":")
    if kind not in ("cpu", "cuda", "gpu"):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', got {device!r}")
    devices = jax.devices("cpu" if kind == "cpu" else "gpu")
    return devices[int(index or 0)]


# engine/buckets.py's defaults with finer steps, since a bucket costs a compile of the embed, layer and
# head programs only (~1 s in all on SmolLM2, not a whole model):
# - chunk programs: a token bucket per power of two from 16, so a prompt pads to < 2x its length (a
#   128-token prompt ran as 256 rows with (16, 64, 256, 512));
# - decode programs: block tables from 4 blocks, not 16: gathering the padded K/V blocks cost as much as
#   the weight matmuls at batch 32 (~4 ms CPU a layer for 256-token tables); chunk key lists likewise.
DEFAULT_BUCKETS = BucketPolicy(token_buckets=(16, 32, 64, 128, 256, 512), min_context_blocks=4, min_key_blocks=4)


@dataclass(slots=True)
class _ProgramOutput:
    logits: jax.Array  # [R, V] fp32, R a bucket
    slots: list[SampleSlot]
    prompt: PromptRows | None = None  # rows scoring prompt tokens (prompt_logprobs), after the sampled ones
    hidden: jax.Array | None = None  # [R, E] fp32 final hidden states of the rows, when a chunk asks an embedding


class JaxModelRunner(LoraRunnerVerbs, SleepVerbs):
    """Runs scheduler steps for one Llama-family model on one JAX device.

    source: a Checkpoint (weights streamed from ``iter_tensors``) or a ModelConfig (weights from
        ``state_dict`` in HF names — numpy arrays or anything ``np.asarray`` reads — or random
        from ``seed``).
    dtype: "float32" | "bfloat16" | "float16" for weights, activations and KV.
    buckets: the static shapes of the jitted programs (buckets.py); default ``DEFAULT_BUCKETS``.
    lora_config: serve LoRA adapters (``add_lora``; requests name them by ``lora_id``) in that many device
        slots (lora_slots.py); None = base model only.
    cpu_decode_kernel: on a CPU device in fp32, run decode steps of at most ``cpu_kernel.MAX_ROWS`` rows
        without LoRA as one XLA FFI call of the C decode kernel (cpu_kernel.py); False, no compiler, or
        ``ZOO_CPU_DECODE=0`` = the pure-XLA layer programs. ``decode_path`` says which is in use.
    cpu_decode_threads: the kernel's OpenMP threads at most; None = ``cpu_kernel.default_num_threads()``.
    cpu_decode_head: where kernel steps of more than ``cpu_kernel.MAX_ROWS`` rows run the output head: "kernel"
        (its blocked GEMM over the panel-packed head) or "xla" (an XLA dot after the kernel: slower, kept for
        A/B runs, bench/engine_jax_ab.py). An attribute read each step; set it before ``warmup``.
    adaptive_threads: run each kernel step on the thread count (1, 2, 4 ... up to that) its measured wall
        time favours (backends/torch/thread_choice.py, as the torch runner; the same bits at any count).
    huge_pages: on a CPU, rebuild the weights' memory on transparent huge pages (huge_params.py; the decode
        step streams them); ``huge_pages_result`` says what was granted. False = as XLA placed them.

    ``sleep(level)`` / ``wake_up(tags)``: vLLM's sleep mode (backends/sleep_levels.py). Level 1 drops the KV cache
    and moves the weights to host RAM (on a CPU device they stay); level 2 drops both, and the wake reloads the
    weights from the source kept for it (``_load_params``). The KV cache comes back from the last spec, empty.
    """

    scores_prompts = True  # computes prompt_logprobs (engine/prompt_logprobs.py)
    embeds = True  # computes a prompt's embedding (engine/embeddings.py)

    def __init__(
        self,
        source: Any,
        dtype: str = "float32",
        device: str | jax.Device = "cpu",
        *,
        state_dict: dict[str, Any] | None = None,
        seed: int = 0,
        buckets: BucketPolicy | None = None,
        progress: bool = True,
        lora_config: LoraConfig | None = None,
        cpu_decode_kernel: bool = True,
        cpu_decode_threads: int | None = None,
        adaptive_threads: bool = True,
        cpu_decode_head: str = "kernel",
        huge_pages: bool = True,
        solo_chunks: bool = True,
    ) -> None:
        if cpu_decode_head not in ("kernel", "xla"):
            raise ValueError(f"cpu_decode_head must be 'kernel' or 'xla', got {cpu_decode_head!r}")
        self.cpu_decode_head = cpu_decode_head
        self.device = resolve_device(device)
        self.dtype = resolve_dtype(dtype)
        self.config = source.config if hasattr(source, "iter_tensors") else source
        # how the weights were loaded, kept so that a level-2 wake (sleep) loads them again the same way
        self._source, self._state_dict, self._seed, self._progress = source, state_dict, seed, progress
        self._use_kernel = bool(
            cpu_decode_kernel and cpu_kernel.supports(self.config, self.dtype, self.device) and cpu_kernel.load()
        )
        self._huge_pages = huge_pages
        self._load_params()
        self.dims = Dims.from_config(self.config)
        self.buckets = buckets or DEFAULT_BUCKETS
        self.solo_chunks = solo_chunks  # a step of one long chunk: solo_attention.py's causal groups
        self.sampler = Sampler(seed)
        self.compiles = CompileCounter()
        self.kv_cache: PagedKVCache | None = None
        self._kv_spec: KVCacheSpec | None = None  # the last initialize_kv_cache's: a KV wake re-allocates it
        self.block_size = 0
        self.lora_config = lora_config
        self.lora_slots = None
        if lora_config is not None:
            with self.compiles.track():
                self.lora_slots = JaxLoraSlots(self.config, lora_config, self.dtype, self.device)
        self.kernel_threads = cpu_decode_threads or cpu_kernel.default_num_threads()
        self.thread_choice = ThreadChooser() if adaptive_threads else None

    def _load_params(self) -> None:
        """The weights, as __init__ and a level-2 wake load them: from the checkpoint's ``iter_tensors``, the state
        dict or random from the seed; then the C kernel's copies (cpu_kernel.py) and huge pages (huge_params.py)."""
        source, state_dict = self._source, self._state_dict
        if hasattr(source, "iter_tensors"):
            tensors = source.iter_tensors(progress=self._progress)
        else:
            tensors = (random_tensors(source, self._seed) if state_dict is None else state_dict).items()
        self.params: LlamaParams | None = load_params(self.config, tensors, self.dtype, self.device)
        self.kernel_params: cpu_kernel.KernelParams | None = None
        if self._use_kernel:
            self.kernel_params = cpu_kernel.kernel_params(self.params)
        self.huge_pages_result = None
        if self._huge_pages and self.device.platform == "cpu":
            self.huge_pages_result = collapse_arrays(self.params, self.kernel_params)

    @property
    def decode_path(self) -> str:
        """How decode steps run: "xla", or "cpu-kernel<=N+xla" (the FFI kernel for <= N rows)."""
        return "xla" if self.kernel_params is None else f"cpu-kernel<={cpu_kernel.MAX_PADDED_ROWS}+xla"

    @property
    def kernels(self) -> str:
        """The decode path and the weights' pages, in one line (the node's hello, ``zoo top``'s detail view)."""
        pages = "" if self.huge_pages_result is None else " " + self.huge_pages_result.summary()
        return f"jax decode={self.decode_path}{pages}"

    @property
    def num_compilations(self) -> int:
        """XLA compiles caused by this runner so far (kv allocation, warm-up and steps)."""
        return self.compiles.num_compilations

    @property
    def compile_time_s(self) -> float:
        return self.compiles.compile_time_s

    # ---- ModelRunner protocol -------------------------------------------------------------

    @property
    def max_model_len(self) -> int:
        return self.config.max_position_embeddings

    def kv_bytes_per_block(self, block_size: int) -> int:
        return kv_bytes_per_block(self.config, block_size, self.dtype.itemsize)

    def initialize_kv_cache(self, spec: KVCacheSpec) -> None:
        self._kv_spec = spec
        self.block_size = spec.block_size
        with self.compiles.track():
            self.kv_cache = PagedKVCache(KVLayout.from_spec(self.config, spec), self.dtype, self.device)

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        t0 = time.perf_counter()
        self._check_awake()
        out = RunnerOutput()
        with self.compiles.track():
            self._apply_block_moves(batch)
            for program in self._forward(batch.requests):
                if program.hidden is not None:
                    take_embeddings(np.asarray(program.hidden), program.slots, out)
                if program.prompt is not None:
                    first = sum(s.num_rows for s in program.slots)
                    score_prompt_rows(program.logits, first, program.prompt, out)
                if program.slots:
                    self._sample(program, out)
            self.kv_cache.device_kv.block_until_ready()
        out.step_time_s = time.perf_counter() - t0
        return out

    # ---- extras ----------------------------------------------------------------------------

    def compute_logits(self, batch: SchedulerOutput) -> dict[str, np.ndarray]:
        """Like execute without sampling: fp32 logits [len(spec_token_ids) + 1, V] per sampling request."""
        with self.compiles.track():
            self._apply_block_moves(batch)
            result = {}
            for program in self._forward(batch.requests):
                logits = np.asarray(program.logits)
                for s in program.slots:
                    result[s.request.req_id] = logits[s.first_row : s.first_row + s.num_rows].copy()
        return result

    def warmup(self, max_num_seqs: int, max_context_tokens: int, *, random_sampling: bool = False) -> int:
        """Compile the decode program (and greedy sampler) for every batch bucket up to
        ``max_num_seqs`` and every context-block bucket up to ``max_context_tokens``, by running
        them on fully padded inputs (only the scratch block is written). Returns the number of compiles it caused.

        ``random_sampling`` also compiles the temperature / top-k / top-p sampler (C = 256).
        """
        if self.kv_cache is None:
            raise RuntimeError("initialize_kv_cache() must be called before warmup()")
        before = self.num_compilations
        pol, bs = self.buckets, self.block_size
        batch_sizes = sorted({pol.batch_size(n) for n in range(1, max_num_seqs + 1)})
        max_blocks = pol.context_blocks(-(-max_context_tokens // bs))
        context_sizes = sorted({pol.context_blocks(n) for n in range(1, max_blocks + 1)})
        with self.compiles.track():
            for b in batch_sizes:
                zeros = np.zeros(b, dtype=np.int32)
                slots = np.full(b, self.kv_cache.scratch_slot, dtype=np.int32)
                for m in context_sizes:
                    meta = DecodeMeta(np.zeros((b, m), dtype=np.int32), zeros)
                    # lora=None passed as the step passes it: jit keys its cache on the arguments given
                    logits, self.kv_cache.device_kv = decode_step(
                        self.params, self.kv_cache.device_kv, zeros, zeros, slots, meta, None, dims=self.dims
                    )
                    _argmax(logits).block_until_ready()
                if self.kernel_params is not None and b <= cpu_kernel.MAX_ROWS:
                    self._warm_kernel(range(1, b + 1), context_sizes)
                elif self.kernel_params is not None and b <= cpu_kernel.MAX_PADDED_ROWS:
                    self._warm_kernel([b], context_sizes)
                if random_sampling:
                    f32 = np.zeros(b, dtype=np.float32)
                    c = min(NUM_CANDIDATES, logits.shape[-1])
                    _sample_random(logits, f32, zeros, f32 + 1, f32, f32, num_candidates=c)[0].block_until_ready()
        return self.num_compilations - before

    def _warm_kernel(self, row_counts, context_sizes: list[int]) -> None:
        """Compile the kernel program for each row count and table width (rows at position 0 of the scratch
        block, which is all they write)."""
        for n in row_counts:
            zeros = np.zeros(n, dtype=np.int32)
            for m in context_sizes:
                table = np.full((n, m), self.kv_cache.scratch_block, dtype=np.int32)
                logits, self.kv_cache.device_kv = cpu_kernel.kernel_decode_step(
                    self.params,
                    self.kernel_params,
                    self.kv_cache.device_kv,
                    zeros,
                    zeros,
                    table,
                    np.int32(self.kernel_threads),
                    dims=self.dims,
                    head=cpu_kernel.head_for(n, self.cpu_decode_head == "xla"),
                )
                _argmax(logits).block_until_ready()

    # ---- sleep mode (SleepVerbs' hooks) ---------------------------------------------------------

    def _sleep_kv(self) -> int:
        freed = 0 if self.kv_cache is None else self.kv_cache.device_kv.nbytes
        self.kv_cache = None  # the last reference: its buffer is freed here
        return freed

    def _sleep_weights(self, level: int) -> int:
        if self.params is None:  # discarded already (level 2)
            return 0
        on_device = self.params.embed.devices() == {self.device}
        freed = _tree_bytes(self.params, self.kernel_params) if on_device and (level == 2 or not self._on_cpu) else 0
        if level == 2:
            self.params = self.kernel_params = self.huge_pages_result = None
        elif on_device and not self._on_cpu:
            host = jax.devices("cpu")[0]
            self.params, self.kernel_params = _moved((self.params, self.kernel_params), host)
        return freed

    def _wake_weights(self) -> None:
        if self.params is None:
            self._load_params()
        elif self.params.embed.devices() != {self.device}:
            self.params, self.kernel_params = _moved((self.params, self.kernel_params), self.device)

    def _wake_kv(self) -> None:
        if self._kv_spec is not None:  # else there was no cache to restore
            self.initialize_kv_cache(self._kv_spec)

    @property
    def _on_cpu(self) -> bool:
        return self.device.platform == "cpu"

    # ---- step internals --------------------------------------------------------------------

    def _apply_block_moves(self, batch: SchedulerOutput) -> None:
        apply_block_moves(self.kv_cache, batch)
        self.sampler.drop(batch.finished_req_ids)

    def _forward(self, requests: list[ScheduledRequest]) -> list[_ProgramOutput]:
        slot_of = self._activate_loras(requests)
        for r in requests:
            if r.start_pos + r.num_scheduled_tokens > self.max_model_len:
                raise ValueError(
                    f"position {r.start_pos + r.num_scheduled_tokens - 1} exceeds max_model_len {self.max_model_len}"
                )
        decodes = [r for r in requests if r.is_decode]
        chunks = [r for r in requests if not r.is_decode]
        outputs = []
        if decodes:
            outputs.append(self._run_decodes(decodes, slot_of))
        if chunks:
            outputs.append(self._run_chunks(chunks, slot_of))
        return outputs

    def _activate_loras(self, requests: list[ScheduledRequest]) -> dict[int, int]:
        lora_ids = {r.lora_id for r in requests if r.lora_id is not None}
        if not lora_ids:
            return {}
        if self.lora_slots is None:
            raise ValueError("a request names a LoRA adapter but this runner has no lora_config")
        return self.lora_slots.activate(lora_ids)

    def _lora_params(self, rows: list[tuple[ScheduledRequest, int]], num_rows: int, slot_of: dict[int, int]):
        """LoraParams for a program of ``num_rows`` padded rows; rows: (request, its first row); None if no
        row of it uses an adapter (the base program)."""
        if not any(r.lora_id is not None for r, _ in rows):
            return None
        row_slots = np.full(num_rows, self.lora_slots.zero_slot, dtype=np.int32)
        for r, first in rows:
            if r.lora_id is not None:
                row_slots[first : first + r.num_scheduled_tokens] = slot_of[r.lora_id]
        return self.lora_slots.params(row_slots)

    def _run_decodes(self, decodes: list[ScheduledRequest], slot_of: dict[int, int]) -> _ProgramOutput:
        n = len(decodes)
        plain = all(r.lora_id is None for r in decodes)
        if self.kernel_params is not None and n <= cpu_kernel.MAX_PADDED_ROWS and plain:
            return self._run_kernel_decodes(decodes)
        bs, scratch = self.block_size, self.kv_cache.scratch_slot
        b = self.buckets.batch_size(n)
        seq_lens = np.zeros(b, dtype=np.int32)
        seq_lens[:n] = [r.start_pos + 1 for r in decodes]
        num_blocks = -(-seq_lens[:n] // bs)  # [n]
        table = np.zeros((b, self.buckets.context_blocks(int(num_blocks.max()))), dtype=np.int32)
        for i, (r, nb) in enumerate(zip(decodes, num_blocks.tolist())):
            table[i, :nb] = r.block_ids[:nb]
        token_ids = np.zeros(b, dtype=np.int32)
        token_ids[:n] = [r.token_ids[0] for r in decodes]
        positions = np.zeros(b, dtype=np.int32)
        positions[:n] = seq_lens[:n] - 1
        slots = np.full(b, scratch, dtype=np.int32)  # padded rows write the scratch block
        slots[:n] = table[np.arange(n), positions[:n] // bs] * bs + positions[:n] % bs
        logits, self.kv_cache.device_kv = decode_step(
            self.params,
            self.kv_cache.device_kv,
            token_ids,
            positions,
            slots,
            DecodeMeta(table, seq_lens),
            self._lora_params([(r, i) for i, r in enumerate(decodes)], b, slot_of),
            dims=self.dims,
        )
        # decode logits are [B, V], one per row: a slot's first_row is its own row
        sample_slots = [SampleSlot(r, i, 1) for i, r in enumerate(decodes) if r.sample]
        return _ProgramOutput(logits, sample_slots)

    def _run_kernel_decodes(self, decodes: list[ScheduledRequest]) -> _ProgramOutput:
        """Plain decodes in one call of the C kernel (cpu_kernel.py): up to MAX_ROWS exactly one row per request;
        more rows padded to their batch bucket with rows at position 0 of the scratch block (all they write);
        block tables padded to the context bucket."""
        n, bs = len(decodes), self.block_size
        rows = n if n <= cpu_kernel.MAX_ROWS else self.buckets.batch_size(n)
        num_blocks = [r.start_pos // bs + 1 for r in decodes]
        table = np.full((rows, self.buckets.context_blocks(max(num_blocks))), self.kv_cache.scratch_block, np.int32)
        for i, (r, nb) in enumerate(zip(decodes, num_blocks)):
            table[i, :nb] = r.block_ids[:nb]
        token_ids = np.zeros(rows, dtype=np.int32)
        positions = np.zeros(rows, dtype=np.int32)
        token_ids[:n] = [r.token_ids[0] for r in decodes]
        positions[:n] = [r.start_pos for r in decodes]
        threads = self.kernel_threads
        if self.thread_choice is not None:
            threads = self.thread_choice.pick(rows, threads)
        t0 = time.perf_counter()
        logits, self.kv_cache.device_kv = cpu_kernel.kernel_decode_step(
            self.params,
            self.kernel_params,
            self.kv_cache.device_kv,
            token_ids,
            positions,
            table,
            np.int32(threads),
            dims=self.dims,
            head=cpu_kernel.head_for(rows, self.cpu_decode_head == "xla"),
        )
        if self.thread_choice is not None:
            logits.block_until_ready()  # the sampler waits for it next anyway
            self.thread_choice.record(rows, threads, time.perf_counter() - t0)
        return _ProgramOutput(logits, [SampleSlot(r, i, 1) for i, r in enumerate(decodes) if r.sample])

    def _run_chunks(self, chunks: list[ScheduledRequest], slot_of: dict[int, int]) -> _ProgramOutput:
        bs, scratch = self.block_size, self.kv_cache.scratch_slot
        num_rows = sum(r.num_scheduled_tokens for r in chunks)
        t = self.buckets.num_tokens(num_rows)
        token_ids = np.zeros(t, dtype=np.int32)
        positions = np.zeros(t, dtype=np.int32)
        row_seg = np.full(t, -1, dtype=np.int32)
        slots = np.full(t, scratch, dtype=np.int32)
        seg_blocks: list[np.ndarray] = []
        sample_rows = SampleRows()
        prompt_rows = PromptRows()
        row = 0
        first_rows: list[tuple[ScheduledRequest, int]] = []
        for seg, r in enumerate(chunks):
            toks = chunk_token_ids(r)
            n = len(toks)
            pos = np.arange(r.start_pos, r.start_pos + n, dtype=np.int32)
            nb = -(-(r.start_pos + n) // bs)
            bids = np.asarray(r.block_ids[:nb], dtype=np.int32)
            token_ids[row : row + n] = toks
            positions[row : row + n] = pos
            row_seg[row : row + n] = seg
            slots[row : row + n] = flat_slots(bids, pos, bs)
            seg_blocks.append(bids)
            sample_rows.add(r, row)
            prompt_rows.add(r, row)
            first_rows.append((r, row))
            row += n
        logits_rows = sample_rows.logits_rows + prompt_rows.logits_rows
        rows = np.zeros(self.buckets.sample_rows(max(1, len(logits_rows))), dtype=np.int32)
        rows[: len(logits_rows)] = logits_rows
        if self.solo_chunks and len(chunks) == 1 and t >= SOLO_MIN_ROWS:
            meta = build_solo_meta(seg_blocks[0], chunks[0].start_pos, bs, self.buckets.key_blocks)
        else:
            meta = build_chunk_meta(row_seg, positions, seg_blocks, bs, self.buckets.key_blocks)
        lora = self._lora_params(first_rows, t, slot_of)
        embed = any(r.embed for r in chunks)
        logits, self.kv_cache.device_kv, *hidden = chunk_step(
            self.params,
            self.kv_cache.device_kv,
            token_ids,
            positions,
            slots,
            meta,
            rows,
            lora,
            dims=self.dims,
            return_hidden=embed,
        )
        prompt = prompt_rows if prompt_rows.spans else None
        return _ProgramOutput(logits, sample_rows.slots, prompt, hidden[0] if hidden else None)

    def _sample(self, program: _ProgramOutput, out: RunnerOutput) -> None:
        rows = [s.first_row + j for s in program.slots for j in range(s.num_rows)]
        req_ids, params = per_row(program.slots)
        plan = self.sampler.adjuster.plan(program.slots, program.logits.shape[-1])
        accept_sampled(program.slots, self.sampler.sample(program.logits, rows, req_ids, params, plan), out)


def _moved(tree: Any, device: jax.Device) -> Any:
    """``jax.device_put`` leaf by leaf, each distinct array once (a tied head stays the embedding itself)."""
    done: dict[int, jax.Array] = {}

    def move(leaf: jax.Array) -> jax.Array:
        if id(leaf) not in done:
            done[id(leaf)] = jax.device_put(leaf, device)
        return done[id(leaf)]

    return jax.tree_util.tree_map(move, tree)


def _tree_bytes(*trees: Any) -> int:
    """Bytes of the arrays in these pytrees, each distinct array once."""
    return sum({id(leaf): leaf.nbytes for leaf in jax.tree_util.tree_leaves(trees)}.values())


def take_embeddings(hidden: np.ndarray, slots: list[SampleSlot], out: RunnerOutput) -> None:
    """Each embedding request's vector: its sampled row's final hidden state, L2-normalised (engine/embeddings.py)."""
    for s in slots:
        if s.request.embed:
            row = hidden[s.first_row].astype(np.float64)
            out.embeddings[s.request.req_id] = (row / max(float(np.linalg.norm(row)), 1e-12)).tolist()
