"""`zoo up`: a local zoo — the control plane and its agents as supervised child processes.

LocalZoo.start()  ─► control plane process ─► agent processes ─► wait until /health counts them all
LocalZoo.supervise() restarts an agent that died (bounded restarts, backoff)
LocalZoo.stop()   ─► SIGINT agents (they leave at once: no point draining, the whole zoo stops), then
                     SIGTERM the control plane; SIGKILL what is left after a grace period. With the control
                     plane's ``shutdown_timeout`` set (zoo.toml [controlplane] shutdown_timeout = 30: vLLM's
                     --shutdown-timeout), the control plane first: it refuses new requests while those in flight
                     finish on the agents (at most that long), then the agents

The children live in their own sessions (a terminal's Ctrl-C reaches only the supervisor, which stops them
in order), so they must not outlive it: each asks the kernel for a signal when its parent dies
(``prctl(PR_SET_PDEATHSIG)``, Linux; best effort elsewhere) — a ``zoo up`` killed with SIGKILL takes its
children with it. ``run_up`` stops the zoo at SIGINT, SIGTERM or SIGHUP, and catches SIGINT explicitly:
started in the background from a script, a process inherits SIGINT ignored.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from backends.host_cpus import usable_cores
from zoo.up_config import UpConfig, cpu_threads_each

STOP_GRACE_S = 10.0
MAX_RESTARTS = 5
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)  # what stops `zoo up`
_PR_SET_PDEATHSIG = 1


class ZooStartError(RuntimeError):
    """A child died or the fleet did not become ready in time; the message carries its log tail."""


@dataclass(slots=True)
class _Child:
    """stop_signal: how the supervisor stops it, and what the kernel sends it if the supervisor dies."""

    name: str
    argv: list[str]
    log_path: Path
    stop_signal: signal.Signals = signal.SIGTERM
    proc: subprocess.Popen | None = None
    num_restarts: int = 0
    restart_at_s: float = 0.0


def shutdown_timeout_s(controlplane_options: dict) -> float:
    """The control plane's drain at SIGTERM, from zoo.toml's [controlplane] (0: none, or a value it refuses)."""
    value = controlplane_options.get("shutdown_timeout", 0)
    ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < math.inf
    return float(value) if ok else 0.0


def _die_with_parent(death_signal: int):
    """A ``preexec_fn``: the child gets ``death_signal`` when the process that forked it dies. It also
    takes SIGINT back to its default (a supervisor started in the background has it ignored, and the
    ignoring would be inherited). Linux; elsewhere only the SIGINT part."""
    parent_pid = os.getpid()
    prctl = getattr(ctypes.CDLL(None, use_errno=True), "prctl", None) if sys.platform.startswith("linux") else None

    def setup() -> None:  # runs in the child between fork and exec: no imports, no threads
        with contextlib.suppress(ValueError):  # ValueError: forked from another thread than the main one
            signal.signal(signal.SIGINT, signal.SIG_DFL)
        if prctl is not None:
            prctl(_PR_SET_PDEATHSIG, death_signal, 0, 0, 0)
            if os.getppid() != parent_pid:  # the supervisor died before the prctl
                os.kill(os.getpid(), death_signal)

    return setup


class LocalZoo:
    def __init__(self, config: UpConfig, log_dir: Path, python: str = sys.executable) -> None:
        self.config = config
        self.log_dir = log_dir
        self._python = python
        self._controlplane = _Child("controlplane", config.controlplane_argv(), log_dir / "controlplane.log")
        threads = cpu_threads_each(config.agents, usable_cores())  # a share of this host's cores each
        self._agents = [
            _Child(
                a.node_id,
                a.argv(config.control, None if a.backend == "sim" else threads),
                log_dir / f"agent-{a.node_id}.log",
                signal.SIGINT,
            )
            for a in config.agents
        ]

    def __enter__(self) -> LocalZoo:
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- life cycle -----------------------------------------------------------------------------

    def start(self) -> None:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        try:
            self._spawn(self._controlplane)
            for agent in self._agents:
                self._spawn(agent)
            self.wait_ready()
        except BaseException:
            self.stop()
            raise

    def _spawn(self, child: _Child) -> None:
        log = child.log_path.open("ab")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        child.proc = subprocess.Popen(
            [self._python, "-m", "zoo", *child.argv],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # Ctrl-C reaches the supervisor only; it stops children in order
            preexec_fn=_die_with_parent(child.stop_signal),  # ... and they die with it
        )
        log.close()

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.config.base_url}/health", timeout=2) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:  # 503 while degraded still carries the JSON body
            with contextlib.suppress(ValueError):
                return json.loads(e.read())
            return None
        except (OSError, ValueError):
            return None

    def wait_ready(self) -> dict:
        """Block until every agent has joined; raise ZooStartError with the log tail of a child that died."""
        deadline = time.monotonic() + self.config.ready_timeout_s
        while time.monotonic() < deadline:
            for child in (self._controlplane, *self._agents):
                if child.proc is not None and child.proc.poll() is not None:
                    raise ZooStartError(f"{child.name} exited with {child.proc.returncode}:\n{self.log_tail(child)}")
            h = self.health()
            if h is not None and h.get("nodes", 0) >= len(self._agents):
                return h
            time.sleep(0.2)
        raise ZooStartError(f"the zoo was not ready after {self.config.ready_timeout_s:.0f} s; logs in {self.log_dir}")

    def supervise(self) -> list[str]:
        """Restart agents that died (bounded, with backoff); return the names restarted now."""
        restarted = []
        now = time.monotonic()
        if self._controlplane.proc is not None and self._controlplane.proc.poll() is not None:
            raise ZooStartError(f"the control plane exited:\n{self.log_tail(self._controlplane)}")
        for child in self._agents:
            if child.proc is None or child.proc.poll() is None:
                continue
            if child.num_restarts >= MAX_RESTARTS:
                continue
            if child.restart_at_s == 0.0:
                child.restart_at_s = now + min(2.0**child.num_restarts, 30.0)
            elif now >= child.restart_at_s:
                child.num_restarts += 1
                child.restart_at_s = 0.0
                self._spawn(child)
                restarted.append(child.name)
        return restarted

    def stop(self) -> None:
        """Agents first (they send NodeLeave), then the control plane; or, when the control plane drains at
        SIGTERM (its ``shutdown_timeout``), the control plane first, so the requests in flight finish."""
        drain_s = shutdown_timeout_s(self.config.controlplane_options)
        order = [(self._agents, STOP_GRACE_S), ([self._controlplane], STOP_GRACE_S)]
        if drain_s > 0:
            order = [([self._controlplane], drain_s + STOP_GRACE_S), (self._agents, STOP_GRACE_S)]
        for group, grace_s in order:
            live = [c for c in group if c.proc is not None and c.proc.poll() is None]
            for c in live:
                with contextlib.suppress(ProcessLookupError):
                    c.proc.send_signal(c.stop_signal)
            live = [c.proc for c in live]
            deadline = time.monotonic() + grace_s
            for p in live:
                try:
                    p.wait(timeout=max(0.1, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()

    def log_tail(self, child: _Child, num_lines: int = 20) -> str:
        try:
            return "\n".join(child.log_path.read_text(errors="replace").splitlines()[-num_lines:])
        except OSError:
            return "(no log)"

    def describe(self, metrics_urls: dict[str, str] | None = None) -> str:
        """The banner; ``metrics_urls`` (node id → its /metrics, from ``agent_metrics_urls``) adds a line each."""
        cfg = self.config
        lines = [
            f"OpenAI API   {cfg.base_url}/v1",
            f"metrics      {cfg.base_url}/metrics",
            f"control      {cfg.control}",
            "dashboard    zoo top",
            f"agents       {', '.join(f'{a.node_id} ({a.backend})' for a in cfg.agents)}",
            f"logs         {self.log_dir}",
        ]
        knobs_file = cfg.controlplane_options.get("router_knobs_file")
        if knobs_file is not None:  # zoo.toml's [controlplane.router] (none: the defaults), re-read at a SIGHUP
            proc = self._controlplane.proc
            pid = proc.pid if proc is not None else "<control plane pid>"
            lines.append(f"router       edit [controlplane.router] in {knobs_file}, then kill -HUP {pid} to reload it")
        if metrics_urls is not None:
            lines.append(f"prometheus   {cfg.base_url}/metrics/targets (http_sd_configs: every agent's /metrics)")
            lines += [f"  {a.node_id:<10} {metrics_urls.get(a.node_id, '(not reported)')}" for a in cfg.agents]
        return "\n".join(lines)

    def agent_metrics_urls(self, timeout_s: float = 5.0) -> dict[str, str] | None:
        """Node id → its agent's /metrics URL, from the control plane's service discovery document; waits
        (at most ``timeout_s``) until every agent has reported one (an agent reports it just after joining).
        None when the document cannot be read (e.g. API keys protect it): the banner then lists none."""
        deadline = time.monotonic() + timeout_s
        urls: dict[str, str] = {}
        while True:
            try:
                with urllib.request.urlopen(f"{self.config.base_url}/metrics/targets", timeout=2) as r:
                    groups = json.loads(r.read())
                urls = {
                    g["labels"]["__meta_zoo_node"]: f"{g['labels']['__scheme__']}://{g['targets'][0]}"
                    f"{g['labels']['__metrics_path__']}"
                    for g in groups
                }
            except (OSError, ValueError, KeyError, IndexError, TypeError):
                return urls or None
            if len(urls) >= len(self._agents) or time.monotonic() >= deadline:
                return urls
            time.sleep(0.1)


def _interrupt(signum: int, frame) -> None:
    raise KeyboardInterrupt(signal.Signals(signum).name)


def run_up(config: UpConfig, log_dir: Path) -> int:
    """`zoo up`: start, print the endpoints, supervise until SIGINT (Ctrl-C) / SIGTERM / SIGHUP, stop cleanly."""
    for signum in STOP_SIGNALS:  # SIGINT too: started in the background from a script, it is ignored
        signal.signal(signum, _interrupt)
    zoo = LocalZoo(config, log_dir)
    print(f"starting a local zoo: control plane + {len(config.agents)} agents ...", flush=True)
    try:
        zoo.start()
        print("ready.\n" + zoo.describe(zoo.agent_metrics_urls()), flush=True)
        while True:
            for name in zoo.supervise():
                print(f"restarted agent {name}", flush=True)
            time.sleep(0.5)
    except KeyboardInterrupt:
        print("\nshutting down ...", flush=True)
        return 0
    except ZooStartError as e:
        print(f"zoo: error: {e}", file=sys.stderr)
        return 1
    finally:
        for signum in STOP_SIGNALS:  # a second signal must not interrupt the stopping (SIGKILL still works)
            signal.signal(signum, signal.SIG_IGN)
        zoo.stop()
