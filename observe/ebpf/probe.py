"""``ZooProbe``: the zmq hop probes and the scheduler probes on a local zoo, read as one plain snapshot.

    with ZooProbe() as probe:
        probe.attach(controlplane=cp_pid, agents={"node-a": pid_a, "node-b": pid_b})
        ...
        stats = probe.read()   # plain dict, see ``read``

Node indexes in the kernel maps: 0 = the control plane (and clients), 1.. = agents in attach order.
``zoo probe`` (``run_probe``) finds the processes by their command lines and prints the snapshot periodically.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from types import ModuleType

from observe.ebpf.env import bundled_libzmq, ebpf_status, libzmq_paths_of, load_bcc
from observe.ebpf.histogram import Histogram
from observe.ebpf.sched_probe import SchedCount, SchedHist, SchedProbe
from observe.ebpf.zmq_hops import HopEvent, HopMode, Role, ZmqHopProbe

CONTROLPLANE = "controlplane"


class ZooProbe:
    """Attach / read / detach; a context manager. One owner (not thread-safe)."""

    def __init__(
        self,
        *,
        hops: bool = True,
        sched: bool = True,
        hop_mode: HopMode | str = HopMode.WIRE,
        trace_messages: bool = False,
    ) -> None:
        self._want_hops = hops
        self.hop_mode = HopMode(hop_mode)
        self._want_sched = sched
        self._trace_messages = trace_messages
        self._bcc: ModuleType | None = None
        self._hops: ZmqHopProbe | None = None
        self._sched: SchedProbe | None = None
        self._node_names: dict[int, str] = {0: CONTROLPLANE}
        self._agents: dict[str, int] = {}
        self._controlplane: int | None = None
        self._clients: list[int] = []
        self.loop_tids: dict[str, list[int]] = {}
        self.attach_s = 0.0  # compile + load + attach time of the last attach()

    # ------------------------------------------------------------------ life cycle

    def attach(
        self,
        controlplane: int | None = None,
        agents: Mapping[str, int] | None = None,
        clients: Sequence[int] = (),
        loop_tids: Mapping[str, Sequence[int]] | None = None,
    ) -> ZooProbe:
        """Compile (first call only) and attach to these processes. Raises RuntimeError when eBPF is unavailable.

        ``loop_tids``: node id (or "controlplane") → the engine/event loop thread ids, when known.
        """
        t0 = time.perf_counter()
        if self._bcc is None:
            self._bcc = load_bcc()
            if self._want_hops:
                self._hops = ZmqHopProbe(self._bcc, mode=self.hop_mode, trace_messages=self._trace_messages)
            if self._want_sched:
                self._sched = SchedProbe(self._bcc)
        loop_tids = loop_tids or {}
        if controlplane is not None:
            self._controlplane = controlplane
            self._add(controlplane, Role.ROUTER, 0, loop_tids.get(CONTROLPLANE))
        for node_id, pid in (agents or {}).items():
            node = self._node_index(node_id)
            self._agents[node_id] = pid
            self._add(pid, Role.AGENT, node, loop_tids.get(node_id))
        for pid in clients:
            self._clients.append(pid)
            self._add(pid, Role.CLIENT, 0, None, sched=False)
        self.attach_s = time.perf_counter() - t0
        return self

    def _node_index(self, node_id: str) -> int:
        for i, name in self._node_names.items():
            if name == node_id and i != 0:
                return i
        i = max(self._node_names) + 1
        self._node_names[i] = node_id
        return i

    def _add(self, pid: int, role: Role, node: int, loops: Sequence[int] | None, sched: bool = True) -> None:
        if not os.path.exists(f"/proc/{pid}"):
            raise ProcessLookupError(f"no process {pid}")
        if self._hops is not None:
            libs = libzmq_paths_of(pid) or [bundled_libzmq()]
            for lib in libs:
                self._hops.add_process(pid, role, node, lib)
        if self._sched is not None and sched:
            name = self._node_names[node] if role is not Role.CLIENT else f"client-{pid}"
            self.loop_tids[name] = self._sched.add_process(pid, node, list(loops) if loops else None)

    def remove_process(self, pid: int) -> None:
        """Stop tracing ``pid`` (its uprobes detached, its threads forgotten); the program stays loaded."""
        if self._hops is not None:
            self._hops.remove_process(pid)
        if self._sched is not None:
            self._sched.remove_process(pid)
        if self._controlplane == pid:
            self._controlplane = None
        self._agents = {n: p for n, p in self._agents.items() if p != pid}
        self._clients = [p for p in self._clients if p != pid]

    def detach(self) -> None:
        if self._hops is not None:
            self._hops.close()
            self._hops = None
        if self._sched is not None:
            self._sched.close()
            self._sched = None
        self._bcc = None

    def __enter__(self) -> ZooProbe:
        return self

    def __exit__(self, *exc) -> None:
        self.detach()

    # ------------------------------------------------------------------ reading

    def clear(self) -> None:
        """Zero every histogram and count (the probes stay attached)."""
        if self._hops is not None:
            self._hops.clear()
        if self._sched is not None:
            self._sched.clear()

    def take_events(self) -> list[HopEvent]:
        """Per-message hop events since the last call (only with ``trace_messages=True``)."""
        return self._hops.take_events() if self._hops is not None else []

    def read(self) -> dict:
        """A plain snapshot (JSON-serializable); histograms as ``Histogram.to_dict()`` (ns)::

        {"source": "ebpf", "hop_mode": "wire" | "libzmq", "monotonic_ns": int,
         "processes": {"controlplane": pid, "agents": {node_id: pid}, "clients": [pid]},
         "hops": {"router->agent": H, "agent->router": H, ...},            all nodes together
         "hops_by_node": {node_id: {"router->agent": H, "agent->router": H}},
         "messages": {"sent": {role: n}, "received": {role: n}, "matched": {direction: n}, "unmatched": n},
         "sched": {node_id | "controlplane": {"runq_delay": H, "loop_runq_delay": H, "loop_offcpu": H,
                                              "loop_switches": n, "loop_preemptions": n, "wakeups": n}}}
        """
        out: dict = {
            "source": "ebpf",
            "hop_mode": self.hop_mode.value,
            "monotonic_ns": time.monotonic_ns(),
            "processes": {"controlplane": self._controlplane, "agents": dict(self._agents), "clients": self._clients},
            "hops": {},
            "hops_by_node": {},
            "messages": {"sent": {}, "received": {}, "matched": {}, "unmatched": 0},
            "sched": {},
        }
        if self._hops is not None:
            snap = self._hops.snapshot()
            merged: dict[str, Histogram] = {}
            for (direction, node), h in snap.hops.items():
                merged.setdefault(direction, Histogram()).merge(h)
                name = self._node_names.get(node, str(node))
                out["hops_by_node"].setdefault(name, {})[direction] = h.to_dict()
            out["hops"] = {d: h.to_dict() for d, h in sorted(merged.items())}
            msgs = out["messages"]
            for (label, _node), n in snap.counts.items():
                what, who = label.split(":", 1)
                if what == "unmatched":
                    msgs["unmatched"] += n
                else:
                    msgs[what][who] = msgs[what].get(who, 0) + n
        if self._sched is not None:
            snap = self._sched.snapshot()
            for node, name in self._node_names.items():
                if name != CONTROLPLANE and name not in self._agents:
                    continue
                if name == CONTROLPLANE and self._controlplane is None:
                    continue
                empty = Histogram()
                out["sched"][name] = {
                    "runq_delay": snap.hists.get((SchedHist.RUNQ, node), empty).to_dict(),
                    "loop_runq_delay": snap.hists.get((SchedHist.LOOP_RUNQ, node), empty).to_dict(),
                    "loop_offcpu": snap.hists.get((SchedHist.LOOP_OFFCPU, node), empty).to_dict(),
                    "loop_switches": snap.counts.get((SchedCount.LOOP_SWITCHES, node), 0),
                    "loop_preemptions": snap.counts.get((SchedCount.LOOP_PREEMPTIONS, node), 0),
                    "wakeups": snap.counts.get((SchedCount.WAKEUPS, node), 0),
                    "loop_tids": self.loop_tids.get(name, []),
                }
        return out


# ---------------------------------------------------------------------- finding a running zoo


def _zoo_subcommand(argv: list[str]) -> list[str] | None:
    """The arguments after `zoo` in `python -m zoo SUB ...` or `.../zoo SUB ...`; None for other programs."""
    for i, a in enumerate(argv[:-1]):
        if a == "-m" and argv[i + 1] == "zoo":
            return argv[i + 2 :]
    if argv and os.path.basename(argv[0]) == "zoo":
        return argv[1:]
    if len(argv) > 1 and os.path.basename(argv[1]) == "zoo" and "python" in os.path.basename(argv[0]):
        return argv[2:]
    return None


def _flag(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a == name and i + 1 < len(args):
            return args[i + 1]
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
    return None


def find_zoo_processes() -> tuple[int | None, dict[str, int]]:
    """(control plane pid, {node id: agent pid}) of the zoo processes on this host, by command line."""
    controlplane: int | None = None
    agents: dict[str, int] = {}
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
        except OSError:
            continue
        sub = _zoo_subcommand(argv)
        if not sub:
            continue
        if sub[0] == "controlplane":
            controlplane = int(entry)
        elif sub[0] == "agent":
            agents[_flag(sub, "--node-id") or f"pid-{entry}"] = int(entry)
    return controlplane, agents


# ---------------------------------------------------------------------- `zoo probe`


def add_probe_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--controlplane-pid", type=int, default=None, help="control plane pid (default: found by cmdline)")
    p.add_argument(
        "--agent-pid", action="append", default=[], metavar="NODE=PID", help="agent pid by node id (repeatable)"
    )
    p.add_argument(
        "--control",
        default="tcp://127.0.0.1:5556",
        help="push each snapshot to this control plane's client endpoint, for `zoo top` ('none': print only)",
    )
    p.add_argument("--interval-s", type=float, default=2.0, help="seconds between printed snapshots")
    p.add_argument("--duration-s", type=float, default=0.0, help="stop after this many seconds (0 = until Ctrl-C)")
    p.add_argument("--json", action="store_true", help="one JSON snapshot per line instead of tables")
    p.add_argument("--no-sched", action="store_true", help="zmq hop probes only")
    p.add_argument(
        "--hop-mode",
        choices=[m.value for m in HopMode],
        default=HopMode.WIRE.value,
        help="wire: send/recv syscalls of libzmq's I/O threads (cheap); libzmq: uprobes on zmq_msg_send/recv",
    )


def _us(ns: float) -> str:
    return f"{ns / 1e3:9.1f}"


def format_snapshot(snap: dict) -> str:
    """A human-readable table of one ``ZooProbe.read()`` snapshot (µs)."""
    lines = [f"{'hop':<22}{'count':>9}{'p50 µs':>10}{'p99 µs':>10}{'mean µs':>10}"]
    for node, hops in sorted(snap["hops_by_node"].items()):
        for direction, h in sorted(hops.items()):
            mean = _us(h["mean_ns"]) if h["mean_ns"] else f"{'-':>9}"
            lines.append(f"{node + ' ' + direction:<22}{h['count']:>9}{_us(h['p50_ns'])} {_us(h['p99_ns'])} {mean}")
    m = snap["messages"]
    lines.append(f"messages sent {m['sent']} received {m['received']} unmatched {m['unmatched']}")
    if snap["sched"]:
        lines.append(f"{'cpu':<22}{'runq p50':>10}{'runq p99':>10}{'off p50':>10}{'off p99':>10}{'preempt':>9}")
        for name, s in sorted(snap["sched"].items()):
            rq, off = s["runq_delay"], s["loop_offcpu"]
            lines.append(
                f"{name:<22}{_us(rq['p50_ns'])} {_us(rq['p99_ns'])} {_us(off['p50_ns'])} {_us(off['p99_ns'])}"
                f"{s['loop_preemptions']:>9}"
            )
    return "\n".join(lines)


def run_probe(args: argparse.Namespace) -> int:
    """`zoo probe`: attach to the local zoo and print snapshots. Exit 2 when eBPF or the zoo is missing."""
    available, reason = ebpf_status()
    if not available:
        print(f"zoo probe: eBPF unavailable: {reason}", file=sys.stderr)
        return 2
    found_cp, found_agents = find_zoo_processes()
    controlplane = args.controlplane_pid if args.controlplane_pid is not None else found_cp
    agents = dict(found_agents)
    for item in args.agent_pid:
        node_id, _, pid = item.partition("=")
        if not pid.isdigit():
            print(f"zoo probe: --agent-pid wants NODE=PID, got {item!r}", file=sys.stderr)
            return 2
        agents[node_id] = int(pid)
    if controlplane is None and not agents:
        print("zoo probe: no zoo processes found (start one with `zoo up`, or pass --*-pid)", file=sys.stderr)
        return 2
    pusher = SnapshotPusher(args.control) if args.control != "none" else None
    with ZooProbe(sched=not args.no_sched, hop_mode=args.hop_mode) as probe:
        probe.attach(controlplane=controlplane, agents=agents)
        print(
            f"zoo probe: attached in {probe.attach_s:.1f} s to control plane {controlplane}, agents {agents}",
            file=sys.stderr,
        )
        deadline = time.monotonic() + args.duration_s if args.duration_s > 0 else None
        try:
            while deadline is None or time.monotonic() < deadline:
                time.sleep(
                    args.interval_s if deadline is None else max(0.0, min(args.interval_s, deadline - time.monotonic()))
                )
                snap = probe.read()
                print(json.dumps(snap) if args.json else format_snapshot(snap) + "\n", flush=True)
                if pusher is not None:
                    pusher.push(snap)
        except KeyboardInterrupt:
            pass
        finally:
            if pusher is not None:
                pusher.close()
    return 0


class SnapshotPusher:
    """Sends snapshots to the control plane (a DEALER on its client ROUTER) as ProbeSnapshot messages.
    Never blocks the probe: with the control plane away, snapshots are dropped, not queued."""

    def __init__(self, endpoint: str) -> None:
        import zmq

        self._zmq = zmq
        self._ctx = zmq.Context()
        self._sock = self._ctx.socket(zmq.DEALER)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDHWM, 2)
        self._sock.connect(endpoint)
        self.num_dropped = 0

    def push(self, snapshot: dict) -> None:
        from transport.codec import encode
        from transport.messages import ProbeSnapshot

        try:
            self._sock.send_multipart(
                encode(ProbeSnapshot(sent_ns=time.monotonic_ns(), snapshot=snapshot)), flags=self._zmq.NOBLOCK
            )
        except self._zmq.Again:
            self.num_dropped += 1

    def close(self) -> None:
        self._sock.close()
        self._ctx.term()
