"""TorchModelRunner: the ModelRunner protocol on PyTorch (CPU, or one CUDA device).

One step (``execute``)::

    block moves (swap_out, swap_in, copy)           kv_cache.py, in batch.py's order
    flatten requests -> rows  [decodes | chunks]     input_ids, positions, slot_mapping   (step_buffers.py)
    model forward over all rows                      K/V written into the paged cache per layer
    output head on the sampled rows only             logits [S, V]
    sample -> one .tolist()                          sampler.py

A request with ``spec_token_ids`` is run as a chunk of ``token_ids + spec_token_ids`` and its drafts
verified as backends/sample_slots.py describes; sampled drafts that carry their proposal distribution
(``spec_draft_probs``) are verified by rejection sampling instead (rejection_sampler.py).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np
import torch

from backends.kv_layout import KVLayout, apply_block_moves, flat_slots, kv_bytes_per_block
from backends.lora_store import LoraRunnerVerbs
from backends.prompt_rows import PromptRows
from backends.sample_slots import SampleRows, SampleSlot, accept_sampled, chunk_token_ids, per_row
from backends.torch import huge_weights
from backends.torch.attention import AttentionBackend, GatherSDPABackend, arange_view
from backends.torch.attention_dispatch import attention_backend_class, kernel_plan
from backends.torch.cpu_attention import CpuPagedBackend
from backends.torch.cpu_attention import serves as serves_attention
from backends.torch.cpu_decode import HEAD_FULL, HEAD_NONE, HEAD_PANELS, CpuDecoder, load_library, supports
from backends.torch.cpu_decode import HEAD_ROWS as CPU_DECODE_HEAD_ROWS
from backends.torch.cpu_decode import MAX_ROWS as CPU_DECODE_MAX_ROWS
from backends.torch.cpu_packed import pack_weights
from backends.torch.cuda_graphs import DecodeGraphs
from backends.torch.kv_cache import PagedKVCache
from backends.torch.lora_batch import MAX_LORA_SEGMENTS, LoraBatch, choose_lora_kernel
from backends.torch.lora_slots import LoraSlots
from backends.torch.model import LlamaModel, resolve_dtype
from backends.torch.prompt_scores import score_prompt_rows
from backends.torch.rejection_sampler import rejection_sample
from backends.torch.runner_sleep import TorchSleepVerbs
from backends.torch.sampler import Sampler
from backends.torch.step_buffers import StepBuffers
from backends.torch.thread_choice import ThreadChooser
from backends.torch.weights import build_model
from engine.batch import RunnerOutput, ScheduledRequest, SchedulerOutput, TokenLogprob
from engine.buckets import BucketPolicy
from engine.lora import LoraConfig
from engine.model_runner import KVCacheSpec

logger = logging.getLogger(__name__)

# decode batch sizes captured as CUDA graphs (engine/buckets.py); batch 1 included: it gains most
GRAPH_BUCKETS = BucketPolicy(batch_buckets=(1, 2, 4, 8, 16, 32, 64))


# logits, sampled slots, prompt rows, the logits rows' final hidden states (when a chunk asks for an embedding)
_Forward = tuple[torch.Tensor, list[SampleSlot], PromptRows | None, torch.Tensor | None]


class TorchModelRunner(LoraRunnerVerbs, TorchSleepVerbs):
    """Runs scheduler steps for one Llama-family model (and scores prompt rows: backends/prompt_rows.py).

    source: a Checkpoint (weights streamed from ``iter_tensors``), a ModelConfig (weights from
        ``state_dict`` in HF names, or random from ``seed``), or an already built LlamaModel
        (shared, e.g. between runners in tests).
    dtype: "float32" | "bfloat16" | "float16" for weights, activations and KV.
    device: "cpu", "cuda" or "cuda:N"; None = a built LlamaModel's own device, else the CPU. A device other
        than a built model's is a ValueError (its weights would stay where they are).
    attention_backend: force a kernel by name (backends/kernel_dispatch.py); None = the dispatch table's.
    kv_dtype: "auto" (the model's dtype) or "fp8_e4m3" (SM89 / SM90+).
    cuda_graphs: capture decode steps per batch bucket on CUDA (when the kernel allows); False = eager.
    max_graph_batch: the largest decode batch captured (larger decode batches run eagerly).
    pack_cpu_weights: on a CPU in fp32, run the matmuls on oneDNN-packed weights (cpu_packed.py; the
        model is packed in place, so runners sharing it share the packing).
    num_threads: CPU intra-op threads for the thread that calls execute(); None = torch's default.
    cpu_decode_kernel: on a CPU in fp32, run steps of at most 64 decode rows (LoRA rows too) with the C decode kernel
        (cpu_decode.py: one call a step), and the decode rows of other steps with its attention
        (cpu_attention.py); False, or no C compiler = torch ops and the gather attention.
    adaptive_threads: the kernel's steps run on 1, 2, 4 ... up to the intra-op thread count, whichever their
        measured wall time favours (thread_choice.py; the same bits at any count); False = all of them.
    cpu_decode_head: where the C kernel's steps of more than 4 rows run the output head: "kernel" (its blocked
        GEMM over a panel-packed copy of the head, cpu_decode.py) or "onednn" (torch.mm on oneDNN's packed weight,
        the path before the panels; kept for A/B runs). An attribute read each step.
    huge_pages: on a CPU, move the weights onto transparent huge pages (huge_weights.py: the decode step
        streams them; fewer TLB misses); False, or none to be had (the reason is in ``kernels``) = as loaded.
    tp: a TPGroup (tp_group.py): this runner is one rank of a tensor-parallel model (its heads, MLP
        columns and KV heads; tp_runner.py keeps the ranks in step). None = the whole model here.
    lora_config: serve LoRA adapters (``add_lora``; requests name them by ``lora_id``) in that many device
        slots (lora_slots.py); None = base model only.

    ``sleep(level)`` / ``wake_up(tags)`` free and restore the KV cache and the weights (vLLM's sleep mode:
    backends/sleep_levels.py, runner_sleep.py); the source is kept so that level 2 can reload the weights.
    """

    scores_prompts = True  # computes prompt_logprobs (engine/prompt_logprobs.py)
    embeds = True  # computes a prompt's embedding (engine/embeddings.py)

    def __init__(
        self,
        source: Any,
        dtype: str | torch.dtype = "float32",
        device: str | torch.device | None = None,
        *,
        state_dict: dict[str, Any] | None = None,
        seed: int = 0,
        attention_backend: str | None = None,
        progress: bool = True,
        num_threads: int | None = None,
        tp: Any = None,
        kv_dtype: str = "auto",
        cuda_graphs: bool = True,
        max_graph_batch: int = 64,
        pack_cpu_weights: bool = True,
        lora_config: LoraConfig | None = None,
        cpu_decode_kernel: bool = True,
        adaptive_threads: bool = True,
        huge_pages: bool = True,
        cpu_decode_head: str = "kernel",
    ) -> None:
        self.device = runner_device(source, device)
        self.dtype = resolve_dtype(dtype)
        # the dispatch table, once: which kernels this device runs (logged, and in the node's hello)
        self.kernel_plan = kernel_plan(self.device, attention_backend, kv_dtype, cuda_graphs)
        self.kv_dtype = torch.float8_e4m3fn if self.kernel_plan.kv_dtype == "fp8_e4m3" else self.dtype
        self.max_graph_batch = max_graph_batch
        self.graphs: DecodeGraphs | None = None
        self.graph_capture_s = 0.0
        logger.info("kernels: %s: %s", self.kernel_plan.summary(), self.kernel_plan.reason)
        # how the weights were loaded, kept so that a level-2 wake (sleep) loads them again the same way
        self._source, self._tp = source, tp
        self._build_args = dict(state_dict=state_dict, seed=seed, progress=progress, tp=tp)
        self._pack_cpu_weights, self._huge_pages = pack_cpu_weights, huge_pages
        self._load_model()
        if tp is not None:  # no sleep under tensor parallelism (runner_sleep.py): nothing to reload, none kept
            self._build_args["state_dict"] = None
        self.config = self.model.config
        self.sampler = Sampler(self.device, seed)
        # intra-op threads are a per-OS-thread setting (OpenMP): applied on the thread that executes
        self.num_threads = num_threads
        self.kv_cache: PagedKVCache | None = None
        self.attn: AttentionBackend | None = None
        self.buffers: StepBuffers | None = None  # the step's metadata lives here (step_buffers.py)
        self.use_cpu_decode = cpu_decode_kernel
        if cpu_decode_head not in ("kernel", "onednn"):
            raise ValueError(f"cpu_decode_head must be 'kernel' or 'onednn', got {cpu_decode_head!r}")
        self.cpu_decode_head = cpu_decode_head
        self.cpu_decoder: CpuDecoder | None = None  # bound to the KV cache in initialize_kv_cache
        self.thread_choice = ThreadChooser() if adaptive_threads else None
        self.block_size = 0
        self.lora_config = lora_config
        self.lora_slots = None if lora_config is None else LoraSlots(self.config, lora_config, self.dtype, self.device)
        # "triton" on CUDA (triton_lora.py), else "torch"
        self.lora_kernel = "torch" if lora_config is None else choose_lora_kernel(self.device)
        self._kv_spec: KVCacheSpec | None = None  # the last initialize_kv_cache's: a KV wake re-allocates it

    def _load_model(self) -> None:
        """The weights, as __init__ and a level-2 wake load them: the LlamaModel handed in, or one built from the
        source; then oneDNN-packed (cpu_packed.py) and moved onto huge pages (huge_weights.py) where they apply."""
        if isinstance(self._source, LlamaModel):
            if self._source.dtype != self.dtype:
                raise ValueError(f"model dtype {self._source.dtype} != requested {self.dtype}")
            self.model = self._source
        else:
            self.model = build_model(self._source, self.dtype, self.device, **self._build_args)
        self.packed_weights = self._pack_cpu_weights and pack_weights(self.model)
        self.huge_pages = None  # what huge_weights.py got (CPU only); the arena lives on the model
        if self._huge_pages and self.device.type == "cpu":
            self.huge_pages = huge_weights.ensure_on_huge_pages(self.model)

    # ---- ModelRunner protocol -------------------------------------------------------------

    @property
    def max_model_len(self) -> int:
        return self.config.max_position_embeddings

    def kv_bytes_per_block(self, block_size: int) -> int:
        elem = torch.empty((), dtype=self.kv_dtype).element_size()
        return kv_bytes_per_block(self.config, block_size, elem)

    def initialize_kv_cache(self, spec: KVCacheSpec) -> None:
        c = self.config
        self._kv_spec = spec
        self.block_size = spec.block_size
        self.kv_cache = PagedKVCache(KVLayout.from_spec(c, spec), self.kv_dtype, self.device)
        backend = attention_backend_class(self.kernel_plan.attention)
        self.attn = backend(c.num_attention_heads, c.num_key_value_heads, c.head_dim, spec.block_size, self.device)
        self.buffers = StepBuffers.for_buckets(self.device, spec.block_size, GRAPH_BUCKETS, self.max_graph_batch)
        self.cpu_decoder = None
        if self.use_cpu_decode and supports(self.model, self.kv_dtype, self.model.tp):
            lib = load_library()
            if lib is not None:
                self.cpu_decoder = CpuDecoder(lib, self.model, self.kv_cache.layers, spec.block_size)
                if self.lora_slots is not None:
                    self.cpu_decoder.bind_lora(self.lora_slots)  # LoRA decode rows in the kernel too
        heads = (c.num_attention_heads, c.num_key_value_heads)
        plain = backend is GatherSDPABackend
        if self.use_cpu_decode and plain and serves_attention(self.device, self.kv_dtype, *heads):
            lib = load_library()  # larger decode batches: the C kernel's attention inside the torch path
            if lib is not None:
                self.attn = CpuPagedBackend(lib, *heads, c.head_dim, spec.block_size, self.device)
        if self.kernel_plan.cuda_graphs:
            self._capture_graphs()

    @property
    def weight_bytes(self) -> int:
        """Bytes of weights a decode step reads: all of them, less an untied embedding table (its rows
        are looked up, not streamed). For the decode roofline (engine/decode_roofline.py)."""
        m = self.model
        total = sum(p.numel() * p.element_size() for p in m.parameters())  # a tied head counted once
        if m.lm_head_t is not m.embed_t:
            total -= m.embed_t.numel() * m.embed_t.element_size()
        return total

    @property
    def kernels(self) -> str:
        """The kernels this runner chose, in one line (the node's hello, ``zoo top``'s detail view)."""
        line = self.kernel_plan.summary()
        if self.packed_weights:
            line += " matmul=onednn-packed"
        if self.huge_pages is not None:
            line += " " + self.huge_pages.summary()
        if self.cpu_decoder is not None:
            line += f" decode<={CPU_DECODE_MAX_ROWS}=cpu-kernel"
        if isinstance(self.attn, CpuPagedBackend):
            line += " decode-attention=cpu-kernel"
        if self.graphs is not None:
            line += f" captured {list(self.graphs.batch_sizes)} in {self.graph_capture_s:.1f}s"
        elif self.kernel_plan.cuda_graphs:
            line += " capture failed: eager"
        return line

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        t0 = time.perf_counter()
        self._check_awake()
        if self.num_threads is not None and torch.get_num_threads() != self.num_threads:
            torch.set_num_threads(self.num_threads)
        self._apply_block_moves(batch)
        out = RunnerOutput()
        if batch.requests:
            with torch.inference_mode():
                logits, slots, prompt_rows, hidden = self._forward(batch.requests)
                if hidden is not None:
                    take_embeddings(hidden, slots, out)
                if prompt_rows is not None:  # scored, then cut off: the sampler sees the sampled rows only
                    num_sampled = logits.shape[0] - len(prompt_rows.logits_rows)
                    score_prompt_rows(logits[num_sampled:], prompt_rows, out)
                    logits = logits[:num_sampled]
                if slots:
                    self._sample(logits, slots, out)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        out.step_time_s = time.perf_counter() - t0
        return out

    # ---- extras ----------------------------------------------------------------------------

    def compute_logits(self, batch: SchedulerOutput) -> dict[str, torch.Tensor]:
        """Like execute without sampling: fp32 logits [len(spec_token_ids) + 1, V] per sampling request."""
        self._apply_block_moves(batch)
        if not batch.requests:
            return {}
        with torch.inference_mode():
            logits, slots, _, _ = self._forward(batch.requests)
        return {s.request.req_id: logits[s.first_row : s.first_row + s.num_rows].clone() for s in slots}

    def _capture_graphs(self) -> None:
        """Capture decode graphs per batch bucket; on any failure, log it and stay eager."""
        sizes = GRAPH_BUCKETS.batch_sizes_up_to(self.max_graph_batch)
        try:
            graphs = DecodeGraphs(
                self.model, self.kv_cache.layers, self.attn, sizes, self.max_model_len, self.block_size
            )
            self.graph_capture_s = graphs.capture()
            self.graphs = graphs
        except Exception:  # a capture that fails leaves a working eager runner
            logger.exception("CUDA graph capture failed; decode runs eagerly")
            self.graphs = None

    # ---- step internals --------------------------------------------------------------------

    def _apply_block_moves(self, batch: SchedulerOutput) -> None:
        apply_block_moves(self.kv_cache, batch)
        self.sampler.drop(batch.finished_req_ids)

    def _forward(self, requests: list[ScheduledRequest]) -> _Forward:
        # longest context first: the attention backend groups neighbouring decodes by padded width
        decodes = sorted((r for r in requests if r.is_decode), key=lambda r: r.start_pos, reverse=True)
        decode_loras = {r.lora_id for r in decodes}
        if 1 < len(decode_loras) <= MAX_LORA_SEGMENTS + 1:
            # few adapters: rows of one adapter side by side, so each is a segment (lora_batch.py); stable,
            # so each adapter's rows keep their longest-first order
            rank = {lora_id: i for i, lora_id in enumerate(sorted(decode_loras, key=lambda x: (x is None, x or 0)))}
            decodes.sort(key=lambda r: rank[r.lora_id])
        chunks = [r for r in requests if not r.is_decode]
        graphable = not chunks and decode_loras == {None}  # graphs were captured without adapters
        if self.graphs is not None and graphable and self.graphs.bucket(len(decodes)) is not None:
            return self._forward_graph(decodes)
        if self.cpu_decoder is not None and graphable and len(decodes) <= CPU_DECODE_MAX_ROWS:
            return self._forward_cpu_kernel(decodes)
        kernel_lora = self.lora_slots is not None and self.lora_kernel == "torch"  # LoRA rows in the C kernel
        if self.cpu_decoder is not None and kernel_lora and not chunks and len(decodes) <= CPU_DECODE_MAX_ROWS:
            decodes.sort(key=lambda r: (r.lora_id is None, r.lora_id or 0))  # an adapter's rows side by side
            return self._forward_cpu_kernel(decodes, self._kernel_row_slots(decodes, decode_loras))

        # rows [decodes | chunks] into this step's pieces of the preallocated buffers (step_buffers.py)
        buf = self.buffers
        buf.reset()
        bs = self.block_size
        chunk_toks = [chunk_token_ids(r) for r in chunks]
        nd = len(decodes)
        num_rows = nd + sum(len(t) for t in chunk_toks)
        ids, input_ids = buf.take(num_rows)
        pos, positions = buf.take(num_rows)
        slots, slot_mapping = buf.take(num_rows)
        sample_rows = SampleRows()

        if decodes:
            ids[:nd] = [r.token_ids[0] for r in decodes]
            pos[:nd] = [r.start_pos for r in decodes]
            slots[:nd] = [r.block_ids[r.start_pos // bs] * bs + r.start_pos % bs for r in decodes]
            for i, r in enumerate(decodes):
                sample_rows.add(r, i)

        chunk_specs: list[tuple[int, int, list[int]]] = []
        prompt_rows = PromptRows()  # a chunk's rows that score its prompt (prompt_logprobs), after the sampled ones
        row = nd
        for r, toks in zip(chunks, chunk_toks):
            n = len(toks)
            ids[row : row + n] = toks
            np.add(arange_view(n), r.start_pos, out=pos[row : row + n])
            slots[row : row + n] = flat_slots(np.asarray(r.block_ids, dtype=np.int64), pos[row : row + n], bs)
            chunk_specs.append((r.start_pos, n, r.block_ids))
            sample_rows.add(r, row)
            prompt_rows.add(r, row)
            row += n

        if pos.max() >= self.max_model_len:
            raise ValueError(f"position {pos.max()} exceeds max_model_len {self.max_model_len}")
        meta = self.attn.build_metadata(
            [r.start_pos + 1 for r in decodes], [r.block_ids for r in decodes], chunk_specs, slot_mapping, buf
        )
        logits_rows = sample_rows.logits_rows + prompt_rows.logits_rows
        rows_np, logits_idx = buf.take(len(logits_rows))
        rows_np[:] = logits_rows
        buf.upload()
        lora = self._lora_batch(decodes, chunks)
        embed = any(r.embed for r in chunks)
        out = self.model(input_ids, positions, self.kv_cache.layers, self.attn, meta, logits_idx, lora, embed)
        logits, hidden = out if embed else (out, None)
        return logits, sample_rows.slots, prompt_rows if prompt_rows.spans else None, hidden

    def _forward_graph(self, decodes: list[ScheduledRequest]) -> _Forward:
        """A step of plain decodes (sorted) replayed from its bucket's CUDA graph."""
        bs = self.block_size
        n = len(decodes)
        pos = np.fromiter((r.start_pos for r in decodes), dtype=np.int64, count=n)
        if pos.max() >= self.max_model_len:
            raise ValueError(f"position {pos.max()} exceeds max_model_len {self.max_model_len}")
        blk = np.fromiter((r.block_ids[r.start_pos // bs] for r in decodes), dtype=np.int64, count=n)
        ids = np.fromiter((r.token_ids[0] for r in decodes), dtype=np.int64, count=n)
        sample_rows = SampleRows()
        for i, r in enumerate(decodes):
            sample_rows.add(r, i)
        logits = self.graphs.run(ids, pos, blk * bs + pos % bs, (pos + 1).tolist(), [r.block_ids for r in decodes])
        return logits, sample_rows.slots, None, None

    def _forward_cpu_kernel(self, decodes: list[ScheduledRequest], row_slots: torch.Tensor | None = None) -> _Forward:
        """A step of a few plain decodes in one call of the C kernel (cpu_decode.py); row_slots: each row's
        LoRA slot or -1 (``_kernel_row_slots``)."""
        buf = self.buffers
        buf.reset()
        bs = self.block_size
        n = len(decodes)
        max_pos = max(r.start_pos for r in decodes)
        if max_pos >= self.max_model_len:
            raise ValueError(f"position {max_pos} exceeds max_model_len {self.max_model_len}")
        width = max_pos // bs + 1
        ids, input_ids = buf.take(n)
        pos, positions = buf.take(n)
        table_np, tables = buf.take(n * width)
        sample_rows = SampleRows()
        for i, r in enumerate(decodes):
            ids[i] = r.token_ids[0]
            pos[i] = r.start_pos
            nb = r.start_pos // bs + 1
            table_np[i * width : i * width + nb] = r.block_ids[:nb]
            sample_rows.add(r, i)
        threads = torch.get_num_threads()
        if self.thread_choice is not None:
            threads = self.thread_choice.pick(n, threads)
        t0 = time.perf_counter()
        # many rows: the output head over its panels in the kernel (cpu_decode_head="kernel"), or through torch
        # on oneDNN's packed weight ("onednn")
        head = (
            HEAD_FULL if n <= CPU_DECODE_HEAD_ROWS else HEAD_PANELS if self.cpu_decode_head == "kernel" else HEAD_NONE
        )
        logits = self.cpu_decoder.step(input_ids, positions, tables.view(n, width), max_pos, threads, head, row_slots)
        if head == HEAD_NONE:  # on the kernel's thread count: on a loaded machine 1 thread, so no peer stalls it
            all_threads = torch.get_num_threads()
            if threads == all_threads:
                logits = torch.mm(logits, self.model.lm_head_t)
            else:
                torch.set_num_threads(threads)
                try:
                    logits = torch.mm(logits, self.model.lm_head_t)
                finally:
                    torch.set_num_threads(all_threads)
        if self.thread_choice is not None:
            self.thread_choice.record(n, threads, time.perf_counter() - t0)
        return logits, sample_rows.slots, None, None

    def _kernel_row_slots(self, decodes: list[ScheduledRequest], lora_ids: set[int | None]) -> torch.Tensor:
        """The decode rows' device slots for the C kernel (int32, -1 = base), their adapters made resident."""
        slot_of = self.lora_slots.activate({i for i in lora_ids if i is not None})
        return torch.tensor([-1 if r.lora_id is None else slot_of[r.lora_id] for r in decodes], dtype=torch.int32)

    def _lora_batch(self, decodes: list[ScheduledRequest], chunks: list[ScheduledRequest]) -> LoraBatch | None:
        """Rows -> device slots for this step (rows are [decodes | chunks], each chunk contiguous)."""
        lora_ids = {r.lora_id for r in decodes} | {r.lora_id for r in chunks}
        lora_ids.discard(None)
        if not lora_ids:
            return None
        if self.lora_slots is None:
            raise ValueError("a request names a LoRA adapter but this runner has no lora_config")
        slot_of = self.lora_slots.activate(lora_ids)
        decode_slots = [slot_of.get(r.lora_id) for r in decodes]
        segments, row = [], len(decodes)
        for r in chunks:
            if r.lora_id is not None:
                segments.append((row, r.num_scheduled_tokens, slot_of[r.lora_id]))
            row += r.num_scheduled_tokens
        return LoraBatch(self.lora_slots, decode_slots, segments, self.device, kernel=self.lora_kernel)

    def _sample(self, logits: torch.Tensor, slots: list[SampleSlot], out: RunnerOutput) -> None:
        plain = [s for s in slots if not _has_draft_probs(s)]
        if len(plain) < len(slots):
            for s in slots:
                if _has_draft_probs(s):
                    self._verify_by_rejection(logits[s.first_row : s.first_row + s.num_rows], s.request, out)
            if not plain:
                return
            rows = torch.tensor([s.first_row + j for s in plain for j in range(s.num_rows)], device=logits.device)
            logits = logits.index_select(0, rows)
            plain = _renumbered(plain)
        req_ids, params = per_row(plain)
        plan = self.sampler.adjuster.plan(plain, logits.shape[-1])
        accept_sampled(plain, self.sampler.sample(logits, req_ids, params, plan), out)

    def _verify_by_rejection(self, logits: torch.Tensor, r: ScheduledRequest, out: RunnerOutput) -> None:
        """logits [k + 1, V] of a request whose drafts were sampled from ``spec_draft_probs``."""
        params = r.sampling_params
        k = len(r.spec_token_ids)
        probs = self.sampler.target_probs(logits, params)
        u = self.sampler.uniforms(2 * k + 1, r.req_id, params)
        emitted = rejection_sample(probs, r.spec_token_ids, r.spec_draft_probs, u)
        out.sampled_token_ids[r.req_id] = emitted
        if params.logprobs is not None:
            lp = logits[: len(emitted)].log_softmax(dim=-1)  # the model's own distribution, as sample() reports
            chosen = lp.gather(1, torch.tensor(emitted, device=lp.device)[:, None])[:, 0].tolist()
            top_lp, top_ids = lp.topk(max(params.logprobs, 1), dim=-1)
            top = [
                list(zip(i[: params.logprobs], v[: params.logprobs])) for i, v in zip(top_ids.tolist(), top_lp.tolist())
            ]
            out.logprobs[r.req_id] = [TokenLogprob(t, c, tp) for t, c, tp in zip(emitted, chosen, top)]


def runner_device(source: Any, device: str | torch.device | None) -> torch.device:
    """Where a runner of ``source`` runs: ``device``, or a built model's own device when None."""
    if not isinstance(source, LlamaModel):
        return torch.device("cpu" if device is None else device)
    own = source.embed_t.device
    if device is None:
        return own
    asked = torch.device(device)
    if asked.type != own.type or (asked.index is not None and own.index is not None and asked.index != own.index):
        raise ValueError(f"the model's weights are on {own}, not on the requested device {asked}")
    return own


def _has_draft_probs(slot: SampleSlot) -> bool:
    r = slot.request
    return r.spec_draft_probs is not None and bool(r.spec_token_ids) and not r.sampling_params.greedy


def _renumbered(slots: list[SampleSlot]) -> list[SampleSlot]:
    """The same slots over a logits tensor holding only their rows, consecutively."""
    renumbered, row = [], 0
    for s in slots:
        renumbered.append(SampleSlot(s.request, row, s.num_rows))
        row += s.num_rows
    return renumbered


def take_embeddings(hidden: torch.Tensor, slots: list[SampleSlot], out: RunnerOutput) -> None:
    """Each embedding request's vector: its sampled row's final hidden state, L2-normalised in fp32
    (engine/embeddings.py)."""
    for s in slots:
        if s.request.embed:
            row = hidden[s.first_row].float()
            out.embeddings[s.request.req_id] = torch.nn.functional.normalize(row, dim=0).tolist()
