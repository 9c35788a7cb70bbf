"""A node's profiler sessions on torch (backends/profiler_config.py): vLLM's "torch" and "cuda" profilers.

``TorchProfilerSession`` runs torch.profiler from /start_profile to /stop_profile on the engine thread: its CPU ops
(and the GPU's kernels on a CUDA device), each engine step under a ``zoo_step_<n>`` range. At the stop it writes the
trace as vLLM's workers do, through ``torch.profiler.tensorboard_trace_handler`` (``<node id>.<ns>.pt.trace.json``,
``.gz`` with ``torch_profiler_use_gzip``), and with ``torch_profiler_dump_cuda_time_total`` the table of the top ops
by self time (CUDA time on a CUDA device, else CPU time), ``profiler_out_<node id>.txt``, as vLLM's
``profiler_out_<rank>.txt``. With ``warmup_iterations`` > 0 it follows torch.profiler's schedule (wait, warmup,
active, once), as vLLM's, and writes when the active steps end.

``CudaProfilerSession`` is vLLM's "cuda" profiler: cudaProfilerStart and Stop only, for an outer profiler (``nsys
profile --capture-range=cudaProfilerApi``) that writes the trace; on a host without CUDA it refuses to start.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # read only (bench/gpu_check.py runs it where msgspec is not installed)
    from backends.profiler_config import ProfilerConfig

TOP_OPS = 100  # rows of the op table written beside the trace


def _files(directory: str) -> set[str]:
    return {os.path.join(root, name) for root, _, names in os.walk(directory) for name in names}


class TorchProfilerSession:
    """One start-to-stop trace of this process's torch work."""

    def __init__(self, config: ProfilerConfig, worker_name: str) -> None:
        self.config = config
        self.worker_name = worker_name
        self._prof = None
        self._before: set[str] = set()
        self._scheduled = config.warmup_iterations > 0

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule, tensorboard_trace_handler

        c = self.config
        os.makedirs(c.torch_profiler_dir, exist_ok=True)
        self._before = _files(c.torch_profiler_dir)
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        steps = None
        if self._scheduled:
            steps = schedule(wait=c.wait_iterations, warmup=c.warmup_iterations, active=c.active_iterations, repeat=1)
        self._prof = profile(
            activities=activities,
            schedule=steps,
            on_trace_ready=tensorboard_trace_handler(c.torch_profiler_dir, self.worker_name, c.torch_profiler_use_gzip),
            record_shapes=c.torch_profiler_record_shapes,
            profile_memory=c.torch_profiler_with_memory,
            with_stack=c.torch_profiler_with_stack,
            with_flops=c.torch_profiler_with_flops,
        )
        self._prof.start()

    def annotate(self, name: str):
        """A range around one engine step in the trace."""
        from torch.profiler import record_function

        return record_function(name)

    def step(self) -> None:
        """One engine step ended (moves torch.profiler's schedule on; nothing without one)."""
        if self._scheduled and self._prof is not None:
            self._prof.step()

    def stop(self) -> list[str]:
        """Stop and write; the files this session wrote."""
        prof, self._prof = self._prof, None
        if prof is None:
            return []
        c = self.config
        try:
            prof.stop()
        except UnicodeDecodeError as e:  # torch's Python tracer gave an event a name that is not UTF-8
            hint = "; torch_profiler_with_stack false avoids it" if c.torch_profiler_with_stack else ""
            raise RuntimeError(f"torch could not read its own trace ({e}){hint}") from None
        if c.torch_profiler_dump_cuda_time_total:
            import torch

            sort_by = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
            path = os.path.join(c.torch_profiler_dir, f"profiler_out_{self.worker_name}.txt")
            with contextlib.suppress(AssertionError, RuntimeError):  # no events recorded: no table to write
                table = prof.key_averages().table(sort_by=sort_by, row_limit=TOP_OPS)
                with open(path, "w") as f:
                    f.write(table)
        return sorted(_files(c.torch_profiler_dir) - self._before)


class CudaProfilerSession:
    """vLLM's "cuda" profiler: the outer profiler's capture range, no file of its own."""

    def __init__(self, config: ProfilerConfig, worker_name: str) -> None:
        self.config = config

    def start(self) -> None:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError(
                "profiler 'cuda' marks a capture range for an outer CUDA profiler (nsys --capture-range="
                "cudaProfilerApi): this node has no CUDA device; use profiler 'torch'"
            )
        torch.cuda.profiler.start()

    def annotate(self, name: str):
        import torch

        return torch.cuda.nvtx.range(name)

    def step(self) -> None:
        pass

    def stop(self) -> list[str]:
        import torch

        torch.cuda.profiler.stop()
        return []
