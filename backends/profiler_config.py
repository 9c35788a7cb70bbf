"""vLLM's ``--profiler-config``: which profiler a node runs between POST /start_profile and POST /stop_profile.

vLLM (``vllm/config/profiler.py``, ``ProfilerConfig``; ``vllm/entrypoints/serve/profile/api_router.py``) serves the
two routes only when its server was started with a profiler, and writes each worker's trace under
``torch_profiler_dir``. Here the routes are the control plane's and the profilers are its nodes': each agent started
with ``--profiler-config`` (the same JSON keys, the same defaults) profiles its own engine and writes the traces on
its own disk (agent/node_profiler.py); the control plane started with one serves the routes
(controlplane/gateway/profile_routes.py) and asks every node.

    profiler: "torch" (torch.profiler: the engine thread's CPU ops, and the GPU's kernels on a CUDA device; a
        Chrome/Perfetto trace per node and start, ``<node id>.<time>.pt.trace.json[.gz]``), "cuda" (vLLM's: only
        cudaProfilerStart/Stop, for an outer profiler such as ``nsys --capture-range=cudaProfilerApi``), or "jax" (ours:
        jax.profiler for a JAX node, whose work torch's profiler does not see; a Perfetto trace and an XSpace under
        ``jax_profiler_dir``); None: profiling off.
    delay_iterations / max_iterations: engine steps skipped after a start before the trace begins, and the most
        steps it records (then it stops and writes by itself; 0: until /stop_profile), as vLLM's.
    warmup_iterations / active_iterations / wait_iterations: torch.profiler's schedule (when warmup > 0), as vLLM's.

What differs from vLLM, by name:
- ``torch_profiler_with_stack`` is off unless asked (vLLM's default is on): with torch 2.13's Python tracer on, a stop
  here failed in about half of the runs under pytest with an event whose name was not UTF-8, and such a stop loses
  the whole trace (the node says so, and the hint to turn it off).
- ``ignore_frontend``: the frontend is the control plane, whose Python loop a start profiles with cProfile
  (controlplane/gateway/frontend_profile.py) unless the control plane's own config sets it; an agent ignores it.
- ``capture_torch_profiler`` (CUDA graph capture traces) and ``detailed_trace_annotation`` (roofline annotations)
  are refused when true: not built here. Each step is annotated ``zoo_step_<n>`` instead.
- A directory must be a local path: vLLM's ``gs://``-style URIs are refused (nothing here writes to one).
- vLLM's earlier ``VLLM_TORCH_PROFILER_DIR`` still works as a default: profiler "torch" in that directory.
"""

from __future__ import annotations

import json
import os

import msgspec

PROFILERS = ("torch", "cuda", "jax")
ENV_TORCH_PROFILER_DIR = "VLLM_TORCH_PROFILER_DIR"  # vLLM < 0.12's way to turn the torch profiler on


class ProfilerConfig(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    profiler: str | None = None
    torch_profiler_dir: str = ""
    jax_profiler_dir: str = ""
    torch_profiler_with_stack: bool = False  # vLLM's default is True: see the module's docstring
    torch_profiler_with_flops: bool = False
    torch_profiler_use_gzip: bool = True
    torch_profiler_dump_cuda_time_total: bool = True
    torch_profiler_record_shapes: bool = False
    torch_profiler_with_memory: bool = False
    capture_torch_profiler: bool = False
    detailed_trace_annotation: bool = False
    ignore_frontend: bool = False
    delay_iterations: int = 0
    max_iterations: int = 0
    warmup_iterations: int = 0
    active_iterations: int = 5
    wait_iterations: int = 0

    @property
    def enabled(self) -> bool:
        return self.profiler is not None

    @property
    def trace_dir(self) -> str:
        """Where this profiler writes ("" for "cuda": the outer profiler decides)."""
        return self.jax_profiler_dir if self.profiler == "jax" else self.torch_profiler_dir


def parse_profiler_config(text: str) -> ProfilerConfig:
    """A ``--profiler-config`` JSON object → a checked ProfilerConfig; ValueError naming what is wrong."""
    try:
        raw = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"--profiler-config is not JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ValueError('--profiler-config must be a JSON object, e.g. \'{"profiler": "torch", ...}\'')
    try:
        config = msgspec.convert(raw, ProfilerConfig, strict=True)
    except msgspec.ValidationError as e:
        raise ValueError(f"--profiler-config: {e}") from None
    return checked(config)


def checked(config: ProfilerConfig) -> ProfilerConfig:
    """vLLM's checks (a directory with "torch" and only with it; counts ≥ 0, active ≥ 1) and ours; the directory
    made absolute."""
    kind = config.profiler
    if kind is not None and kind not in PROFILERS:
        raise ValueError(f"--profiler-config: profiler must be one of {', '.join(PROFILERS)} or null, got {kind!r}")
    for name in ("delay_iterations", "max_iterations", "warmup_iterations", "wait_iterations"):
        if getattr(config, name) < 0:
            raise ValueError(f"--profiler-config: {name} must be >= 0, got {getattr(config, name)}")
    if config.active_iterations < 1:
        raise ValueError(f"--profiler-config: active_iterations must be >= 1, got {config.active_iterations}")
    for name, owner in (("torch_profiler_dir", "torch"), ("jax_profiler_dir", "jax")):
        path = getattr(config, name)
        if path and kind != owner:
            raise ValueError(f"--profiler-config: {name} is only applicable when profiler is {owner!r}")
        if kind == owner and not path:
            raise ValueError(f"--profiler-config: {name} must be set when profiler is {owner!r}")
        if "://" in path:
            raise ValueError(f"--profiler-config: {name} must be a local directory, got {path!r}")
    for name in ("capture_torch_profiler", "detailed_trace_annotation"):
        if getattr(config, name):
            raise ValueError(f"--profiler-config: {name} is not supported here (each step is annotated zoo_step_<n>)")
    if kind in ("torch", "jax"):
        path = os.path.abspath(os.path.expanduser(config.trace_dir))
        config = msgspec.structs.replace(config, **{f"{kind}_profiler_dir": path})
    return config


def profiler_config_from_env(environ=os.environ) -> ProfilerConfig | None:
    """vLLM's earlier switch: ``$VLLM_TORCH_PROFILER_DIR`` set → the torch profiler writing there; else None."""
    path = environ.get(ENV_TORCH_PROFILER_DIR, "")
    return checked(ProfilerConfig(profiler="torch", torch_profiler_dir=path)) if path else None
