"""The CPU cores this process may run on: its affinity mask (what ``taskset`` or a container's cpuset leaves it),
which the processes it starts inherit; ``os.cpu_count()`` where the platform has no affinity call."""

from __future__ import annotations

import os


def usable_cores() -> int:
    """Cores this process may run on, at least 1."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)
