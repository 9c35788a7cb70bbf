"""Loopback ports for callers that must name a port before a process binds it (a child process, a restart on the
same port). Picked below the kernel's ephemeral range, so an outgoing connection elsewhere on the host can never
be handed the port between the check and the bind (the race that bind-to-0-and-release has)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


def _ephemeral_low() -> int:
    try:
        return int(_RANGE_FILE.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A loopback TCP port that is free now and outside the ephemeral range."""
    high = min(_ephemeral_low(), 65536) - 1
    for _ in range(200):
        port = random.randint(10000, max(10001, high))
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    with socket.socket() as s:  # a crowded host: fall back to the kernel's choice
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
