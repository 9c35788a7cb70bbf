"""The CPU side of tail latency: run-queue delay and off-CPU time of traced threads, from sched tracepoints.

Per traced process (``group`` = node index, one per agent; the control plane is a node too)::

    sched_wakeup / sched_wakeup_new(tid)   runq_start[tid] = now                 (tid traced)
    sched_switch  prev = tid, still runnable (preempted)
                                           runq_start[tid] = now, count a preemption
    sched_switch  prev = tid               off_start[tid] = now                  (loop threads only)
    sched_switch  next = tid               runq delay = now - runq_start[tid]   → RUNQ (all threads),
                                                                                 LOOP_RUNQ (loop threads)
                                           off-CPU    = now - off_start[tid]    → LOOP_OFFCPU

Threads are known by tid (the tracepoints name the woken / switched-in task by tid only): user space seeds
``tids`` from /proc/<pid>/task; a thread that appears later is added when it is first switched out (the
current task's tgid is traced) or created (sched_wakeup_new with a traced parent).

The "loop thread" is the engine thread of an agent (or the event loop of the control plane): by explicit tid,
else the thread whose name is ``ENGINE_THREAD_NAME`` (agent/engine_thread.py names its thread so),
else the process's main thread.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import enum
import os
from dataclasses import dataclass

from agent.engine_thread import ENGINE_THREAD_NAME
from observe.ebpf.histogram import HIST_C, Histogram


class SchedHist(enum.IntEnum):
    RUNQ = 0  # run-queue delay of every thread of the process
    LOOP_RUNQ = 1  # run-queue delay of the loop thread
    LOOP_OFFCPU = 2  # time the loop thread spent off CPU (sleeping, blocked, or preempted)


class SchedCount(enum.IntEnum):
    LOOP_SWITCHES = 0  # times the loop thread was switched in
    LOOP_PREEMPTIONS = 1  # times the loop thread was switched out while still runnable
    WAKEUPS = 2  # wakeups of any traced thread


BPF_TEXT = (
    r"""
#include <uapi/linux/ptrace.h>
"""
    + HIST_C
    + r"""
struct tinfo { u32 node; u32 loop; u32 tgid; };
struct count_key { u32 what; u32 group; };

BPF_HASH(tids, u32, struct tinfo, 16384);
BPF_HASH(tgids, u32, u32, 1024);
BPF_HASH(runq_start, u32, u64, 16384);
BPF_HASH(off_start, u32, u64, 1024);
BPF_HASH(sched_hist, struct hist_key, u64, 16384);
BPF_HASH(sched_sum, u32, u64, 1024);
BPF_HASH(sched_counts, struct count_key, u64, 1024);

static __always_inline void observe(u32 kind, u32 node, u64 delta) {
    u32 group = (kind << 16) | node;
    struct hist_key hk = {.group = group, .slot = hist_slot(delta)};
    sched_hist.atomic_increment(hk);
    sched_sum.atomic_increment(group, delta);
}

static __always_inline void count(u32 what, u32 node) {
    struct count_key k = {.what = what, .group = node};
    sched_counts.atomic_increment(k);
}

static __always_inline void on_wakeup(u32 tid, u64 now) {
    struct tinfo *ti = tids.lookup(&tid);
    if (!ti)
        return;
    runq_start.update(&tid, &now);
    count(2, ti->node);
}

TRACEPOINT_PROBE(sched, sched_wakeup) {
    on_wakeup(args->pid, bpf_ktime_get_ns());
    return 0;
}

TRACEPOINT_PROBE(sched, sched_wakeup_new) {
    u64 now = bpf_ktime_get_ns();
    u32 parent = bpf_get_current_pid_tgid() >> 32;
    u32 *node = tgids.lookup(&parent);
    if (node) {
        u32 tid = args->pid;
        struct tinfo ti = {.node = *node, .loop = 0, .tgid = parent};
        tids.update(&tid, &ti);
    }
    on_wakeup(args->pid, now);
    return 0;
}

TRACEPOINT_PROBE(sched, sched_switch) {
    u64 now = bpf_ktime_get_ns();
    u32 prev = args->prev_pid;
    u32 next = args->next_pid;
    if (prev != 0) {
        struct tinfo *ti = tids.lookup(&prev);
        if (!ti) {
            u32 tgid = bpf_get_current_pid_tgid() >> 32;  /* current is prev */
            u32 *node = tgids.lookup(&tgid);
            if (node) {
                struct tinfo fresh = {.node = *node, .loop = 0, .tgid = tgid};
                tids.update(&prev, &fresh);
                ti = tids.lookup(&prev);
            }
        }
        if (ti) {
            if ((args->prev_state & 0xff) == 0) {  /* TASK_RUNNING (preempted): it waits in the run queue */
                runq_start.update(&prev, &now);
                if (ti->loop)
                    count(1, ti->node);
            }
            if (ti->loop)
                off_start.update(&prev, &now);
        }
    }
    if (next != 0) {
        struct tinfo *ti = tids.lookup(&next);
        if (ti) {
            u64 *ts = runq_start.lookup(&next);
            if (ts) {
                u64 delta = now - *ts;
                runq_start.delete(&next);
                observe(0, ti->node, delta);
                if (ti->loop)
                    observe(1, ti->node, delta);
            }
            if (ti->loop) {
                u64 *off = off_start.lookup(&next);
                if (off) {
                    observe(2, ti->node, now - *off);
                    off_start.delete(&next);
                }
                count(0, ti->node);
            }
        }
    }
    return 0;
}
"""
)


def thread_ids(pid: int) -> list[int]:
    try:
        return sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []


def thread_name(pid: int, tid: int) -> str:
    try:
        with open(f"/proc/{pid}/task/{tid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def find_loop_thread(pid: int) -> int:
    """The tid named ENGINE_THREAD_NAME, else the main thread (tid == pid)."""
    for tid in thread_ids(pid):
        if thread_name(pid, tid) == ENGINE_THREAD_NAME:
            return tid
    return pid


@dataclass
class SchedSnapshot:
    hists: dict[tuple[SchedHist, int], Histogram]  # (kind, node) → histogram (ns)
    counts: dict[tuple[SchedCount, int], int]  # (what, node) → count


class SchedProbe:
    """Owns one BPF program with the three sched tracepoints (attached at construction)."""

    def __init__(self, bcc) -> None:
        self._bpf = bcc.BPF(text=BPF_TEXT.encode())
        self._tids = self._bpf[b"tids"]
        self._tgids = self._bpf[b"tgids"]
        self._pids: dict[int, int] = {}  # pid → node

    def add_process(self, pid: int, node: int, loop_tids: list[int] | None = None) -> list[int]:
        """Trace every thread of ``pid`` under ``node``; returns the loop tids it chose."""
        loops = loop_tids if loop_tids else [find_loop_thread(pid)]
        self._tgids[ctypes.c_uint32(pid)] = ctypes.c_uint32(node)
        for tid in thread_ids(pid):
            self._tids[ctypes.c_uint32(tid)] = self._tids.Leaf(node, int(tid in loops), pid)
        for tid in loops:
            self._tids[ctypes.c_uint32(tid)] = self._tids.Leaf(node, 1, pid)
        self._pids[pid] = node
        return loops

    def remove_process(self, pid: int) -> None:
        self._pids.pop(pid, None)
        self._tgids.pop(ctypes.c_uint32(pid), None)
        for k, v in list(self._tids.items()):
            if v.tgid == pid:
                self._tids.pop(k, None)

    def snapshot(self) -> SchedSnapshot:
        hists: dict[tuple[SchedHist, int], Histogram] = {}
        for k, v in self._bpf[b"sched_hist"].items():
            key = (SchedHist(k.group >> 16), k.group & 0xFFFF)
            hists.setdefault(key, Histogram()).add_slot(k.slot, v.value)
        for k, v in self._bpf[b"sched_sum"].items():
            key = (SchedHist(k.value >> 16), k.value & 0xFFFF)
            if key in hists:
                hists[key].sum_ns = v.value
        counts = {(SchedCount(k.what), k.group): v.value for k, v in self._bpf[b"sched_counts"].items()}
        return SchedSnapshot(hists=hists, counts=counts)

    def clear(self) -> None:
        for name in ("sched_hist", "sched_sum", "sched_counts"):
            self._bpf[name.encode()].clear()

    def close(self) -> None:
        self._bpf.cleanup()
