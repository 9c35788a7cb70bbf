"""The control plane's own profile between POST /start_profile and /stop_profile (vLLM's "frontend" trace).

vLLM's torch profiler traces its API server's AsyncLLM too unless ``ignore_frontend`` is set. Here the frontend is
the control plane: routing, admission, the gateway's parsing and the token relay, all Python on one event loop
thread. So with ``--profiler-config`` (its ``ignore_frontend`` false, as by default, and a directory), a start also
turns on ``cProfile`` on that thread, and the stop writes what it saw beside the nodes' traces:

    controlplane.<ns>.pstats    for ``python -m pstats``, snakeviz or ``pstats.Stats``
    controlplane.<ns>.txt       the 60 functions of most cumulative time, as ``pstats`` prints them

cProfile sees every function the loop thread runs (a task's each resume counts as a call), not the tokenizer and
grammar worker threads. It slows the loop while it runs, every call counted: 2.8x the gateway's CPU a chat request
here (384 -> 1,085 us, bench/results/2026-12-07-frontend-profile-overhead.json). An operator's tool, as vLLM says of
its own; ``ignore_frontend`` leaves the control plane out.
"""

from __future__ import annotations

import cProfile
import io
import os
import pstats
import time

TOP_FUNCTIONS = 60


class FrontendProfile:
    def __init__(self, directory: str) -> None:
        self.directory = directory
        self._profile: cProfile.Profile | None = None

    def start(self) -> str:
        """Profile the calling thread (the event loop's) from now on; ValueError if already profiling."""
        if self._profile is not None:
            raise ValueError("the control plane is already profiling: POST /stop_profile first")
        profile = cProfile.Profile()
        profile.enable()  # may raise ValueError: another profiler holds this thread
        self._profile = profile
        return "cProfile started on the control plane's event loop"

    def stop(self) -> cProfile.Profile:
        """Stop profiling; the profile to write (``write``, off the loop). ValueError if not profiling."""
        profile, self._profile = self._profile, None
        if profile is None:
            raise ValueError("the control plane is not profiling: POST /start_profile first")
        profile.disable()
        return profile

    def write(self, profile: cProfile.Profile) -> list[str]:
        """The profile's two files in the directory (made if missing); their paths."""
        os.makedirs(self.directory, exist_ok=True)
        stem = os.path.join(self.directory, f"controlplane.{time.time_ns()}")
        profile.dump_stats(stem + ".pstats")
        text = io.StringIO()
        pstats.Stats(profile, stream=text).sort_stats("cumulative").print_stats(TOP_FUNCTIONS)
        with open(stem + ".txt", "w") as f:
            f.write(text.getvalue())
        return [stem + ".pstats", stem + ".txt"]
