"""The profiler session a node runs for its ``--profiler-config`` (backends/profiler_config.py), chosen by the
profiler's kind and checked against the node's backend when the agent starts:

    torch → backends/torch/profiler_session.TorchProfilerSession   (torch, sim and fake nodes: their engine's CPU work)
    cuda  → backends/torch/profiler_session.CudaProfilerSession    (torch nodes)
    jax   → backends/jax/profiler_session.JaxProfilerSession       (JAX nodes)

A JAX node's steps run in XLA, which torch's profilers do not see, so "torch" and "cuda" are refused there, as "jax"
is on a node whose work is not JAX's.
"""

from __future__ import annotations

from backends.profiler_config import ProfilerConfig

_KINDS_BY_BACKEND = {"jax": ("jax",)}  # any other backend: torch's two


def check_profiler_backend(config: ProfilerConfig, backend: str) -> None:
    """ValueError when ``config``'s profiler cannot see a ``backend`` node's work."""
    kinds = _KINDS_BY_BACKEND.get(backend, ("torch", "cuda"))
    if config.enabled and config.profiler not in kinds:
        raise ValueError(
            f"--profiler-config: profiler {config.profiler!r} does not see a {backend} node's work; "
            f"use {' or '.join(repr(k) for k in kinds)}"
        )


def make_profiler_session(config: ProfilerConfig, worker_name: str):
    """A new, unstarted session of ``config``'s profiler (``worker_name``: the trace files' prefix, the node id)."""
    if config.profiler == "jax":
        from backends.jax.profiler_session import JaxProfilerSession

        return JaxProfilerSession(config, worker_name)
    from backends.torch.profiler_session import CudaProfilerSession, TorchProfilerSession

    session = CudaProfilerSession if config.profiler == "cuda" else TorchProfilerSession
    return session(config, worker_name)
