"""A JAX node's profiler session (backends/profiler_config.py, profiler "jax"): jax.profiler from /start_profile to
/stop_profile, each engine step a ``zoo_step_<n>`` TraceAnnotation. ``jax.profiler.start_trace`` writes an XSpace
(``*.xplane.pb``, for TensorBoard's profile plugin or XProf) and, asked here, a Perfetto trace
(``perfetto_trace.json.gz``) under ``jax_profiler_dir/plugins/profile/<time>/``. torch's profiler sees none of a JAX
node's work, so its "torch" profiler is refused there (backends/profiler_sessions.py)."""

from __future__ import annotations

import os
from collections.abc import Callable

from backends.profiler_config import ProfilerConfig


def _files(directory: str) -> set[str]:
    return {os.path.join(root, name) for root, _, names in os.walk(directory) for name in names}


class JaxProfilerSession:
    def __init__(self, config: ProfilerConfig, worker_name: str) -> None:
        self.config = config
        self._before: set[str] = set()
        self._on = False

    def start(self) -> None:
        import jax

        os.makedirs(self.config.jax_profiler_dir, exist_ok=True)
        self._before = _files(self.config.jax_profiler_dir)
        jax.profiler.start_trace(self.config.jax_profiler_dir, create_perfetto_trace=True)
        self._on = True

    def annotate(self, name: str):
        import jax

        return jax.profiler.TraceAnnotation(name)

    def step(self) -> None:
        pass

    def stop(self) -> Callable[[], list[str]]:
        """End the trace (jax writes it then, on this thread); what it wrote, listed by the callable returned."""
        import jax

        if not self._on:
            return list
        self._on = False
        jax.profiler.stop_trace()
        files = sorted(_files(self.config.jax_profiler_dir) - self._before)
        return lambda: files
