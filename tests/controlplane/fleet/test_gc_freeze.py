"""A started control plane and agent freeze their start-up heap out of the garbage collector (observe/gc_pauses.py;
``--no-gc-freeze`` leaves it), and export every collection's pause on /metrics (real processes on loopback)."""

from __future__ import annotations

import re
import time

import httpx

from transport.local_ports import free_port


def _frozen(url: str, timeout_s: float = 60.0) -> int:
    """zoo:process_gc_frozen_objects from ``url`` once the process has settled (its full collection counted)."""
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            text = httpx.get(url, timeout=5).text
            found = re.search(r"^zoo:process_gc_frozen_objects ([0-9.e+]+)$", text, re.M)
            settled = re.search(r'^zoo:process_gc_pause_seconds_count\{generation="2"\} ([0-9.e+]+)$', text, re.M)
            if found and settled and (float(found.group(1)) > 0 or float(settled.group(1)) > 0):
                return int(float(found.group(1)))
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{url} never exported the collector's figures")
        time.sleep(0.1)


def test_the_control_plane_and_agent_freeze_their_start_up_heap(spawn_controlplane, spawn_agent):
    cp = spawn_controlplane()
    port = free_port()
    spawn_agent(cp.agent_endpoint, "a", "--metrics-port", str(port))
    assert _frozen(f"http://{cp.http}/metrics") > 50_000  # the modules' objects, at least
    assert _frozen(f"http://127.0.0.1:{port}/metrics") > 10_000  # a fake-runner agent: ~42,000
    kept = spawn_controlplane(None, "--no-gc-freeze")
    deadline = time.monotonic() + 60
    while True:  # a collection of generation 2 happens on its own only under load: wait for the gauge, frozen 0
        try:
            text = httpx.get(f"http://{kept.http}/metrics", timeout=5).text
            if "zoo:process_gc_frozen_objects 0.0" in text:
                break
        except httpx.HTTPError:
            pass
        assert time.monotonic() < deadline, "the control plane never served /metrics"
        time.sleep(0.1)
