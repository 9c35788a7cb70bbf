"""The C decode kernel inside a JAX program: an XLA FFI custom call (``jax.ffi``) for CPU decode steps of a
few rows, the route JAX serving takes on accelerators (a hand-written kernel called from the jitted program).

Why: a batch-1 decode step reads every weight once. XLA's CPU dots (YNNPACK in jax 0.10) read this model's
narrow [in, out] matrices at ~9-15 GB/s, and a step is ~40 small programs/ops per layer: the pure-XLA step
stays at ~half the torch runner's speed, whose decode of <= 4 rows is one call of
backends/torch/csrc/cpu_decode.c. Here the same C source (shared with the torch loader) is compiled with a small
FFI handler (csrc/decode_ffi.cc) into one library; the jitted step passes the runner's own weight arrays (the
[in, out] layout the kernel reads), the KV cache (aliased to the result, so it is updated in place and
donated as in the XLA path) and the step's rows, and gets the logits back.

The output head of steps of more than MAX_ROWS rows runs in the kernel too, as its register-blocked GEMM over a
copy of the head packed in 32-column panels (``pack_panels``; the C kernel's ``head = 2``), the counterpart of
the torch runner's oneDNN-packed head. Profiled on a 32-row SmolLM2 step (1 thread, process CPU, one process,
bench/results/2026-12-02-engine-jax-ab.json): the kernel without head ~100 ms (as torch's call of it); the head as
XLA's dot over [E, V] ~31 ms, as oneDNN's packed product (torch) ~21 ms, on the panels ~15 ms. The panel head
gives the kernel's own matrix-vector head bit for bit.

Built on first use with the system compilers (gcc for the C, g++ for the handler against
``jax.ffi.include_dir()``) into a cache directory keyed by both sources, the flags, the compilers, jaxlib's
version and the CPU (``ZOO_KERNEL_CACHE``, default ``~/.cache/zoo/kernels``). No compiler, a failed build or
``ZOO_CPU_DECODE=0``: ``load()`` returns False and the runner keeps the pure-XLA program (logged once).

Serves: fp32 weights and KV on the CPU device, no LoRA rows, up to ``MAX_ROWS`` rows a step one row a request,
up to ``MAX_PADDED_ROWS`` padded to the batch bucket (padding rows write only the scratch block). Logits differ
from the XLA program's by float rounding (sums in another order); tests/backends/jax/test_cpu_kernel.py bounds it
and checks greedy tokens.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import platform
import shutil
import subprocess
import tempfile
from functools import partial
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from backends.head_panels import pack_panels
from backends.host_cpus import usable_cores
from backends.kernel_cache import cpu_flags, kernel_cache_dir, kernels_switched_off, source_text

logger = logging.getLogger(__name__)

ROOT = Path(__file__).resolve().parents[1]
C_SOURCE = ROOT / "torch" / "csrc" / "cpu_decode.c"  # shared with the torch runner, read-only here
FFI_SOURCE = Path(__file__).with_name("csrc") / "decode_ffi.cc"
# -ffp-contract=off as the torch runner's (backends/torch/cpu_decode.py says why)
CFLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-fPIC", "-std=gnu11")
CXXFLAGS = ("-O2", "-std=c++17", "-fPIC", "-shared", "-fopenmp", "-w")
TARGET = "zoo_jax_cpu_decode_step"
# rows a step served by the kernel (as the torch runner): more rows are matrix-matrix products
MAX_ROWS = 4
# more rows, up to this, run padded to their batch bucket (rows at position 0 of the scratch block): the kernel's
# blocked GEMMs serve them (torch's runner sends the same steps to it)
MAX_PADDED_ROWS = 64
# where the output head runs (``head`` of kernel_decode_step; the kernel's ``head`` attribute for the last two):
HEAD_XLA = 0  # an XLA dot over the kernel's final-norm output (kept as a reference path)
HEAD_KERNEL = 1  # in the kernel, its matrix-vector loop over the [E, V] head: fastest for <= MAX_ROWS rows
HEAD_PANELS = 2  # in the kernel, its register-blocked GEMM over the head packed in 32-column panels: more rows


def _tool(env: str, *names: str) -> str | None:
    return os.environ.get(env) or next((p for p in map(shutil.which, names) if p), None)


def build_library() -> Path | None:
    """The compiled FFI library's path (built now if not cached); None where it cannot be built."""
    cc, cxx = _tool("CC", "gcc", "cc"), _tool("CXX", "g++", "c++")
    if cc is None or cxx is None or platform.system() != "Linux" or not hasattr(jax, "ffi"):
        return None
    try:
        include = jax.ffi.include_dir()
        versions = "".join(
            subprocess.run([t, "--version"], capture_output=True, text=True, timeout=30).stdout for t in (cc, cxx)
        )
        parts = (source_text(C_SOURCE), FFI_SOURCE.read_text(), " ".join(CFLAGS + CXXFLAGS), versions, cpu_flags())
        key = hashlib.sha256(b"\0".join(x.encode() for x in (*parts, jax.lib.__version__))).hexdigest()[:16]
        target = kernel_cache_dir() / f"zoo_jax_decode-{key}.so"
        if target.exists():
            return target
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
            obj, lib = Path(tmp) / "cpu_decode.o", Path(tmp) / "lib.so"
            steps = (
                [cc, *CFLAGS, "-c", str(C_SOURCE), "-o", str(obj)],
                [cxx, *CXXFLAGS, f"-I{include}", str(FFI_SOURCE), str(obj), "-o", str(lib), "-lm"],
            )
            for cmd in steps:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
                if done.returncode != 0:
                    logger.warning("JAX CPU decode kernel: %s failed: %s", cmd[0], done.stderr.strip()[-2000:])
                    return None
            os.replace(lib, target)  # atomic: a concurrent build of the same key writes the same bytes
        return target
    except (OSError, subprocess.SubprocessError) as e:
        logger.warning("JAX CPU decode kernel: build failed: %s", e)
        return None


@functools.cache
def load() -> bool:
    """Build, load and register the custom call once per process; False where it is unavailable or off."""
    if kernels_switched_off():
        return False
    path = build_library()
    if path is None:
        logger.warning("JAX CPU decode kernel unavailable (no C/C++ compiler or jax.ffi): decode runs on XLA")
        return False
    lib = ctypes.CDLL(str(path))
    jax.ffi.register_ffi_target(TARGET, jax.ffi.pycapsule(lib.ZooJaxDecodeStep), platform="cpu")
    return True


def default_num_threads() -> int:
    """The kernel's OpenMP threads: the cores this process may run on (``ZOO_CPU_DECODE_THREADS`` overrides)."""
    if os.environ.get("ZOO_CPU_DECODE_THREADS"):
        return max(1, int(os.environ["ZOO_CPU_DECODE_THREADS"]))
    return usable_cores()


@struct.dataclass
class KernelParams:
    """What the kernel reads beside the runner's layer weights: the embedding and head as [E, V] (one array
    when tied), the head again in column panels ([ceil(V / 32), E, 32], ``pack_panels``) and the rotary table
    with sin's first half negated ([2, P, D])."""

    embed_t: jax.Array
    head_t: jax.Array
    head_panels: jax.Array
    rope_signed: jax.Array


def kernel_params(params) -> KernelParams:
    """From a runner's LlamaParams (fp32): the transposed copies the kernel reads (one more [E, V] array,
    two when the head is untied) and the panel-packed head (one more)."""
    embed_np = np.ascontiguousarray(np.asarray(params.embed).T)
    tied = params.lm_head is params.embed
    head_np = embed_np if tied else np.ascontiguousarray(np.asarray(params.lm_head).T)
    embed_t = jnp.asarray(embed_np)
    head_t = embed_t if tied else jnp.asarray(head_np)
    rope = np.array(params.rope, dtype=np.float32)
    half = rope.shape[-1] // 2
    rope[1, :, :half] *= -1.0
    device = params.embed.devices().pop()
    kp = KernelParams(embed_t, head_t, jnp.asarray(pack_panels(head_np)), jnp.asarray(rope))
    return jax.device_put(kp, device)


def head_for(rows: int, xla_head: bool = False) -> int:
    """Where a step of ``rows`` rows runs the output head: HEAD_KERNEL up to MAX_ROWS, HEAD_PANELS above
    (``xla_head``: HEAD_XLA above, the path before the panels, kept for A/B runs)."""
    if rows <= MAX_ROWS:
        return HEAD_KERNEL
    return HEAD_XLA if xla_head else HEAD_PANELS


def supports(config, dtype: np.dtype, device: jax.Device) -> bool:
    """Whether the kernel can serve this model (before building anything)."""
    return (
        device.platform == "cpu"
        and np.dtype(dtype) == np.float32
        and config.num_attention_heads % config.num_key_value_heads == 0
    )


@partial(jax.jit, static_argnames=("dims", "head"), donate_argnames=("kv",))
def kernel_decode_step(
    params, kparams: KernelParams, kv, token_ids, positions, tables, num_threads, *, dims, head=HEAD_KERNEL
):
    """One decode token for each of B rows (B <= MAX_PADDED_ROWS; padding rows at position 0 of the scratch block)
    -> (fp32 logits [B, V], kv).
    token_ids, positions [B] int32; tables [B, W] int32 block tables (the new token's slot is
    tables[b, pos // bs] * bs + pos % bs); num_threads: int32 scalar (a traced operand: any count runs the same
    program); ``kv`` is donated and updated in place. head: where the output head runs: HEAD_KERNEL, the kernel's
    matrix-vector loop (a few rows); HEAD_PANELS, the kernel's blocked GEMM over ``kparams.head_panels`` (many
    rows: on a 32-row SmolLM2 step ~15 ms CPU, ~21 ms for oneDNN's packed product in the torch runner, ~31 ms
    for XLA's dot); HEAD_XLA, the kernel returns the final RMSNorm's output and XLA's dot applies the head."""
    if head not in (HEAD_XLA, HEAD_KERNEL, HEAD_PANELS):
        raise ValueError(f"head must be HEAD_XLA, HEAD_KERNEL or HEAD_PANELS, got {head!r}")
    b = token_ids.shape[0]
    vocab = kparams.embed_t.shape[1]
    layers = [w for lp in params.layers for w in (lp.input_norm, lp.qkv, lp.o, lp.post_norm, lp.gate_up, lp.down)]
    call = jax.ffi.ffi_call(
        TARGET,
        (
            jax.ShapeDtypeStruct((b, vocab if head != HEAD_XLA else kparams.embed_t.shape[0]), jnp.float32),
            jax.ShapeDtypeStruct(kv.shape, kv.dtype),
        ),
        input_output_aliases={4: 1},
    )
    out, kv = call(
        token_ids,
        positions,
        tables,
        jnp.asarray(num_threads, dtype=jnp.int32),
        kv,
        kparams.rope_signed,
        kparams.embed_t,
        kparams.head_panels if head == HEAD_PANELS else kparams.head_t,
        params.norm,
        *layers,
        num_heads=np.int32(dims.num_heads),
        num_kv_heads=np.int32(dims.num_kv_heads),
        eps=np.float32(dims.rms_norm_eps),
        head=np.int32(head),
    )
    return (jnp.dot(out, kparams.head_t) if head == HEAD_XLA else out), kv
