"""A node's profiler sessions on torch (backends/profiler_config.py): vLLM's "torch" and "cuda" profilers.

``TorchProfilerSession`` runs torch.profiler from /start_profile to /stop_profile on the engine thread: its CPU ops
(and the GPU's kernels on a CUDA device), each engine step under a ``zoo_step_<n>`` range. At the stop it writes the
trace as vLLM's workers do (``<node id>.<ns>.pt.trace.json``, ``.gz`` with ``torch_profiler_use_gzip``), and with
``torch_profiler_dump_cuda_time_total`` the table of the top ops by self time (CUDA time on a CUDA device, else CPU
time), ``profiler_out_<node id>.<ns>.txt``, as vLLM's ``profiler_out_<rank>.txt``. With ``warmup_iterations`` > 0 it
follows torch.profiler's schedule (wait, warmup, active, once), as vLLM's.

``stop`` only ends the recording (tens of ms) and hands back the writing, which the engine thread runs on another
thread (agent/engine_thread.py): on SmolLM2 here, 25 steps' op table alone took 0.8 s and the whole write 1.3 s
(3.3 s with Python stacks), a stall of the node's every request had it run on the engine thread.

``CudaProfilerSession`` is vLLM's "cuda" profiler: cudaProfilerStart and Stop only, for an outer profiler (``nsys
profile --capture-range=cudaProfilerApi``) that writes the trace; on a host without CUDA it refuses to start.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # read only (bench/gpu_check.py runs it where msgspec is not installed)
    from backends.profiler_config import ProfilerConfig

TOP_OPS = 100  # rows of the op table written beside the trace


class TorchProfilerSession:
    """One start-to-stop trace of this process's torch work."""

    def __init__(self, config: ProfilerConfig, worker_name: str) -> None:
        self.config = config
        self.worker_name = worker_name
        self._prof = None
        self._scheduled = config.warmup_iterations > 0
        self._ready = False  # torch.profiler says its trace is complete (at the stop, or the schedule's end)

    def start(self) -> None:
        import torch
        from torch.profiler import ProfilerActivity, profile, schedule

        c = self.config
        os.makedirs(c.torch_profiler_dir, exist_ok=True)
        self._ready = False
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
        steps = None
        if self._scheduled:
            steps = schedule(wait=c.wait_iterations, warmup=c.warmup_iterations, active=c.active_iterations, repeat=1)
        self._prof = profile(
            activities=activities,
            schedule=steps,
            on_trace_ready=self._trace_ready,
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

    def _trace_ready(self, prof) -> None:
        self._ready = True  # written by the writing ``stop`` hands back, off the engine thread

    def stop(self) -> Callable[[], list[str]]:
        """End the recording (on the engine thread: quick); the writing, which returns the files it wrote."""
        prof, self._prof = self._prof, None
        if prof is None:
            return list
        c = self.config
        try:
            prof.stop()
        except UnicodeDecodeError as e:  # torch's Python tracer gave an event a name that is not UTF-8
            hint = "; torch_profiler_with_stack false avoids it" if c.torch_profiler_with_stack else ""
            raise RuntimeError(f"torch could not read its own trace ({e}){hint}") from None
        return lambda: self._write(prof) if self._ready else []

    def _write(self, prof) -> list[str]:
        c = self.config
        stem = f"{self.worker_name}.{time.time_ns()}"
        trace = os.path.join(
            c.torch_profiler_dir, f"{stem}.pt.trace.json" + (".gz" if c.torch_profiler_use_gzip else "")
        )
        prof.export_chrome_trace(trace)
        files = [trace]
        if c.torch_profiler_dump_cuda_time_total:
            import torch

            sort_by = "self_cuda_time_total" if torch.cuda.is_available() else "self_cpu_time_total"
            path = os.path.join(c.torch_profiler_dir, f"profiler_out_{stem}.txt")
            with contextlib.suppress(AssertionError, RuntimeError):  # no events recorded: no table to write
                table = prof.key_averages().table(sort_by=sort_by, row_limit=TOP_OPS)
                with open(path, "w") as f:
                    f.write(table)
                files.append(path)
        return files


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

    def stop(self) -> Callable[[], list[str]]:
        import torch

        torch.cuda.profiler.stop()
        return list
