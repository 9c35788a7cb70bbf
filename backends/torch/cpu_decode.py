"""The CPU decode kernel: a whole fp32 decode step of a few rows in one C call (csrc/cpu_decode.c).

A decode step on the CPU reads every weight once per token. Through torch ops it costs ~130 aten ops per
layer and MKL's sgemv over this model's narrow matrices, which runs at 12-17 GB/s on one core and does not
split them over two: batch-1 decode stayed at ~36% of the bandwidth roofline however the ops were arranged.
The kernel reads each matrix once in the stored ``[in, out]`` layout (a column range per thread, no repacked
copy), attends over the paged cache without gathering it, and runs the step as one OpenMP parallel region.

Built on first use with the system C compiler (``gcc -O3 -march=native -ffp-contract=off -fopenmp``, ~1 s) into a cache
directory keyed by the source, the flags, the compiler and the CPU (``ZOO_KERNEL_CACHE``, default
``~/.cache/zoo/kernels``), loaded with ctypes. Where there is no compiler, or the build fails, ``load_library``
returns None and the runner keeps the torch path (logged once). ``ZOO_CPU_DECODE=0`` turns the kernel off.

Serves: a CPU LlamaModel in fp32 with an fp32 KV cache, no tensor parallelism, steps of plain decodes of at most
``MAX_ROWS`` rows, with or without LoRA adapters (``bind_lora``: each row's slot of lora_slots.py, the low-rank
deltas added after each base product inside the kernel). From 5 rows on (csrc's ``GEMM_MIN_ROWS``) the products are
compute-bound: a register-blocked GEMM (8 rows x 32 columns of accumulators) over the same stored layout,
attention per (row, KV head), and the output head through a copy of the head packed in 32-column panels
(``HEAD_PANELS``: each panel streams contiguously through the same micro-kernel; the JAX runner's layout, one
more [E, V] array, on huge pages) or, with ``head=HEAD_NONE``, left to the caller (oneDNN's packed weight,
cpu_packed.py). Profiled on a batch-32 SmolLM2 step (1 thread, CPU time): the torch path ~150 ms (matmuls ~75%,
gather + SDPA ~20%), this kernel ~98 ms + ~21 ms for oneDNN's head, ~15 ms for the panel head. The model's logits
differ from the torch path's by float rounding (the sums run in another order); greedy tokens match
transformers and the torch path (tests/backends/torch/test_cpu_decode.py).
"""

from __future__ import annotations

import ctypes
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import torch

from backends.head_panels import pack_panels, panels_shape
from backends.kernel_cache import cpu_flags, kernel_cache_dir, kernels_switched_off, source_text
from backends.torch import huge_weights

logger = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "cpu_decode.c"
# -ffp-contract=off: no a * b + c fused into one FMA, so every path rounds each product and each sum alike. GNU C
# fuses by default where the compiler chooses, and on an AVX-512 Xeon it fused the vector products but not the head's
# last-column loop: the panel head's logits then differed from the full head's in the last bit (the tests' bit-for-bit
# equality of the two)
CFLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-fPIC", "-shared", "-std=gnu11")
# decode rows per step served by the kernel (from 5 rows on, csrc's GEMM_MIN_ROWS, its products are register-
# blocked GEMMs and its attention runs per (row, KV head)); larger steps take the torch path
MAX_ROWS = 64
# steps of more rows run the output head over the panel-packed head (or, asked, leave it to oneDNN)
HEAD_ROWS = 4
HEAD_NONE, HEAD_FULL, HEAD_PANELS = 0, 1, 2  # csrc: the final norm's output / the [E, V] head / its panels
MAX_KERNEL_ROWS = 64  # what one call accepts at all (csrc: MAX_B)

_P = ctypes.c_void_p
_ERRORS = {
    -1: "a token id or position out of range",
    -2: "a block table too short or a block id out of range",
    -4: "a LoRA slot out of range",
}


class _Model(ctypes.Structure):
    _fields_ = [
        ("num_layers", ctypes.c_int),
        ("hidden", ctypes.c_int),
        ("inter", ctypes.c_int),
        ("num_heads", ctypes.c_int),
        ("num_kv_heads", ctypes.c_int),
        ("head_dim", ctypes.c_int),
        ("vocab", ctypes.c_int),
        ("block_size", ctypes.c_int),
        ("max_positions", ctypes.c_int),
        ("num_blocks", ctypes.c_long),
        ("eps", ctypes.c_float),
        ("qkv", _P),
        ("o", _P),
        ("gate_up", _P),
        ("down", _P),
        ("norm_in", _P),
        ("norm_post", _P),
        ("norm_final", _P),
        ("embed_t", _P),
        ("head_t", _P),
        ("kv", _P),
        ("kv_half", ctypes.c_long),
        ("rope", _P),
    ]


class _Lora(ctypes.Structure):
    """csrc's zoo_lora: the LoRA slot tensors (lora_slots.py) read in place, and one step's slot per row."""

    _fields_ = [
        ("rank", ctypes.c_int),
        ("num_slots", ctypes.c_int),
        ("row_slot", _P),
        ("a", _P * 4),  # groups qkv, o, gate_up, down: [layers, S, in, n R]
        ("b", _P * 7),  # modules q, k, v, o, gate, up, down: [layers, S, R, out]
        ("work", _P),
    ]


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("cc")


def build_library(source: Path = SOURCE) -> Path | None:
    """The compiled kernel's path (built now if not cached); None where no compiler works."""
    cc = _compiler()
    if cc is None or platform.system() != "Linux":
        return None
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30).stdout
        key = hashlib.sha256(
            b"\0".join(x.encode() for x in (source_text(source), " ".join(CFLAGS), version, cpu_flags()))
        ).hexdigest()[:16]
        target = kernel_cache_dir() / f"{source.stem}-{key}.so"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=target.parent)
        os.close(fd)
        done = subprocess.run([cc, *CFLAGS, str(source), "-o", tmp, "-lm"], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            os.unlink(tmp)
            logger.warning("CPU decode kernel: %s failed: %s", cc, done.stderr.strip()[-2000:])
            return None
        os.replace(tmp, target)  # atomic: a concurrent build of the same key writes the same bytes
        return target
    except (OSError, subprocess.SubprocessError) as e:
        logger.warning("CPU decode kernel: build failed: %s", e)
        return None


_LIB: ctypes.CDLL | None = None
_LIB_TRIED = False


def load_library() -> ctypes.CDLL | None:
    """The kernel library (built and loaded once per process), or None: no compiler, or turned off."""
    global _LIB, _LIB_TRIED
    if _LIB_TRIED:
        return _LIB
    _LIB_TRIED = True
    if kernels_switched_off():
        return None
    path = build_library()
    if path is None:
        logger.warning("CPU decode kernel unavailable (no working C compiler): decode runs on torch ops")
        return None
    lib = ctypes.CDLL(str(path))
    lib.zoo_scratch_floats.argtypes = [_P, ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.zoo_scratch_floats.restype = ctypes.c_long
    # model, rows, tokens, positions, tables, table width, logits, scratch, scratch floats, threads, head
    i32 = ctypes.c_int
    lib.zoo_decode_step.argtypes = [_P, i32, _P, _P, _P, i32, _P, _P, ctypes.c_long, i32, i32]
    lib.zoo_decode_step.restype = ctypes.c_int
    lib.zoo_decode_step_lora.argtypes = [_P, _P, i32, _P, _P, _P, i32, _P, _P, ctypes.c_long, i32, i32]
    lib.zoo_decode_step_lora.restype = ctypes.c_int
    lib.zoo_lora_work_floats.argtypes = [_P, i32, i32, i32]
    lib.zoo_lora_work_floats.restype = ctypes.c_long
    lib.zoo_gemv.argtypes = [_P, ctypes.c_int, ctypes.c_int, _P, ctypes.c_int, _P, ctypes.c_int, ctypes.c_int]
    lib.zoo_gemv.restype = None
    _LIB = lib
    return lib


def _ptrs(tensors: list[torch.Tensor]) -> ctypes.Array:
    return (_P * len(tensors))(*(t.data_ptr() for t in tensors))


def gemv(lib: ctypes.CDLL, x: torch.Tensor, w_t: torch.Tensor, num_threads: int, out: torch.Tensor | None = None):
    """The kernel's matrix-vector product alone: ``out + x @ w_t`` (or ``x @ w_t`` without ``out``), x [B, K]
    and w_t [K, N] contiguous fp32 CPU tensors; returns out (a new [B, N] tensor without one)."""
    b, k = x.shape
    n = w_t.shape[1]
    for t in (x, w_t, *(() if out is None else (out,))):
        if t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu":
            raise ValueError("gemv needs contiguous fp32 CPU tensors")
    if not 1 <= b <= MAX_KERNEL_ROWS or w_t.shape[0] != k or (out is not None and out.shape != (b, n)):
        raise ValueError(f"shapes {tuple(x.shape)} @ {tuple(w_t.shape)} -> {None if out is None else tuple(out.shape)}")
    add = out is not None
    y = out if add else torch.empty(b, n)
    lib.zoo_gemv(w_t.data_ptr(), k, n, x.data_ptr(), b, y.data_ptr(), int(add), num_threads)
    return y


def supports(model: Any, kv_dtype: torch.dtype, tp: Any = None) -> bool:
    """Whether the kernel can serve this model's decode steps (before building anything)."""
    return (
        model.dtype == torch.float32
        and kv_dtype == torch.float32
        and model.embed_t.device.type == "cpu"
        and tp is None
        and model.config.num_attention_heads % model.config.num_key_value_heads == 0
    )


def pack_head_panels(head_t: torch.Tensor) -> torch.Tensor:
    """The head's panels (backends/head_panels.py) in a tensor on huge pages where they can be had."""
    panels = huge_weights.zeros(panels_shape(*head_t.shape), torch.float32, head_t.device)
    pack_panels(head_t.numpy(), out=panels.numpy())
    return panels


class CpuDecoder:
    """One model and its KV cache bound to the kernel. Holds raw pointers into the model's weights and the
    cache: weights written in place stay seen (except the output head's panel copy, taken here: a head rewritten
    after binding needs a new CpuDecoder, as tensors replaced after binding do)."""

    def __init__(self, lib: ctypes.CDLL, model: Any, kv_layers: list[torch.Tensor], block_size: int) -> None:
        c = model.config
        self.lib = lib
        self.vocab = c.vocab_size
        self.hidden = c.hidden_size
        plain = lambda t: t.as_subclass(torch.Tensor)  # noqa: E731 (packed weights: their [in, out] data)
        layers = model.layers
        weights = {
            name: [plain(getattr(layer, name)) for layer in layers]
            for name in ("qkv_proj_t", "o_proj_t", "gate_up_proj_t", "down_proj_t")
        }
        norms_in = [layer.input_layernorm.weight for layer in layers]
        norms_post = [layer.post_attention_layernorm.weight for layer in layers]
        kv = list(kv_layers)
        every = [w for ws in weights.values() for w in ws]
        every += [*norms_in, *norms_post, *kv, model.rope_signed, model.norm.weight]
        every += [plain(model.embed_t), plain(model.lm_head_t)]
        for t in every:
            if t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu":
                raise ValueError("the CPU decode kernel needs contiguous fp32 CPU tensors")
        self._keep = every  # the pointers below stay valid while these live
        self._arrays = [_ptrs(weights[n]) for n in weights] + [_ptrs(norms_in), _ptrs(norms_post), _ptrs(kv)]
        qkv, o, gate_up, down, n_in, n_post, kv_ptrs = self._arrays
        self.model = _Model(
            num_layers=len(layers),
            hidden=c.hidden_size,
            inter=c.intermediate_size,
            num_heads=c.num_attention_heads,
            num_kv_heads=c.num_key_value_heads,
            head_dim=c.head_dim,
            vocab=c.vocab_size,
            block_size=block_size,
            max_positions=model.rope_signed.shape[1],
            num_blocks=kv[0].shape[1],
            eps=c.rms_norm_eps,
            qkv=ctypes.cast(qkv, _P),
            o=ctypes.cast(o, _P),
            gate_up=ctypes.cast(gate_up, _P),
            down=ctypes.cast(down, _P),
            norm_in=ctypes.cast(n_in, _P),
            norm_post=ctypes.cast(n_post, _P),
            norm_final=model.norm.weight.data_ptr(),
            embed_t=model.embed_t.data_ptr(),
            head_t=model.lm_head_t.data_ptr(),
            kv=ctypes.cast(kv_ptrs, _P),
            kv_half=kv[0][0].numel(),
            rope=model.rope_signed.data_ptr(),
        )
        self._ref = ctypes.byref(self.model)
        # the head in 32-column panels [ceil(V / 32), E, 32] (the last zero-padded), for steps of many rows
        self._head_panels = pack_head_panels(plain(model.lm_head_t))
        self.model_panels = _Model()
        ctypes.memmove(ctypes.byref(self.model_panels), self._ref, ctypes.sizeof(_Model))
        self.model_panels.head_t = self._head_panels.data_ptr()
        self._ref_panels = ctypes.byref(self.model_panels)
        self._scratch = torch.empty(0)
        self._lora: _Lora | None = None
        self._lora_work = torch.empty(0)
        self.lora_steps = 0  # steps served with LoRA rows (tests check that the kernel ran them)

    def bind_lora(self, lora_slots: Any) -> None:
        """Read LoRA rows' deltas from these slots (lora_slots.py's LoraSlots; its tensors are written in place
        on loads, so the pointers stay valid)."""
        groups = lora_slots.groups  # lora_store.lora_groups: qkv, o, gate_up, down, as the C struct orders them
        tensors = [lora_slots.a[g.name] for g in groups] + [lora_slots.b[m] for g in groups for m in g.modules]
        for t in tensors:
            if t.dtype != torch.float32 or not t.is_contiguous() or t.device.type != "cpu":
                raise ValueError("the CPU decode kernel needs contiguous fp32 CPU LoRA slots")
        a, b = tensors[:4], tensors[4:]
        self._lora_keep = tensors
        self._lora = _Lora(
            rank=lora_slots.config.max_lora_rank,
            num_slots=a[0].shape[1],
            a=(_P * 4)(*(t.data_ptr() for t in a)),
            b=(_P * 7)(*(t.data_ptr() for t in b)),
        )

    def step(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        tables: torch.Tensor,
        max_pos: int,
        num_threads: int,
        head: int = HEAD_FULL,
        row_slots: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens, positions [B] int64, tables [B, W] int64 (contiguous, CPU), max_pos = positions.max():
        fp32 logits [B, V] (a new tensor) through the [E, V] head (HEAD_FULL: a matrix-vector loop, a few rows)
        or its panels (HEAD_PANELS: a blocked GEMM, many rows); HEAD_NONE (or False): the final RMSNorm's output
        [B, E] instead, for the caller to apply the output head. row_slots: int32 [B], each row's LoRA slot or -1
        (needs ``bind_lora``)."""
        b, w = tables.shape
        if not 1 <= b <= MAX_KERNEL_ROWS:
            raise ValueError(f"1 to {MAX_KERNEL_ROWS} rows a call, got {b}")
        if tokens.shape != (b,) or positions.shape != (b,) or not tables.is_contiguous():
            raise ValueError("tokens and positions must be [B], tables a contiguous [B, W]")
        if tokens.dtype != torch.int64 or positions.dtype != torch.int64 or tables.dtype != torch.int64:
            raise ValueError("tokens, positions and tables must be int64")
        need = self.lib.zoo_scratch_floats(self._ref, b, num_threads, max_pos + 1)
        if self._scratch.numel() < need:
            self._scratch = torch.empty(max(need, 2 * self._scratch.numel()))
        head = int(head)
        if head not in (HEAD_NONE, HEAD_FULL, HEAD_PANELS):
            raise ValueError(f"head must be HEAD_NONE, HEAD_FULL or HEAD_PANELS, got {head}")
        ref = self._ref_panels if head == HEAD_PANELS else self._ref
        logits = torch.empty(b, self.vocab if head else self.hidden)
        lora_args: tuple = ()
        if row_slots is not None:
            lora = self._lora
            if lora is None:
                raise ValueError("LoRA rows but no LoRA slots bound (bind_lora)")
            if row_slots.shape != (b,) or row_slots.dtype != torch.int32 or not row_slots.is_contiguous():
                raise ValueError("row_slots must be a contiguous int32 [B]")
            need = self.lib.zoo_lora_work_floats(self._ref, b, num_threads, lora.rank)
            if self._lora_work.numel() < need:
                self._lora_work = torch.empty(max(need, 2 * self._lora_work.numel()))
            lora.row_slot = row_slots.data_ptr()
            lora.work = self._lora_work.data_ptr()
            lora_args = (ctypes.byref(lora),)
        call = self.lib.zoo_decode_step_lora if lora_args else self.lib.zoo_decode_step
        rc = call(
            ref,
            *lora_args,
            b,
            tokens.data_ptr(),
            positions.data_ptr(),
            tables.data_ptr(),
            w,
            logits.data_ptr(),
            self._scratch.data_ptr(),
            self._scratch.numel(),
            num_threads,
            head,
        )
        if rc != 0:
            raise ValueError(f"CPU decode kernel: {_ERRORS.get(rc, f'error {rc}')}")
        if lora_args:
            self.lora_steps += 1
        return logits
