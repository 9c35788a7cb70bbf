"""The scheduler probes on a real busy process: an engine-like loop thread that spins and sleeps, next to
CPU hogs that keep the run queue non-empty."""

from __future__ import annotations

from observe.ebpf.probe import ZooProbe

NUM_SLEEPS = 100

LOOP = r"""
import sys, threading, time
from agent.engine_thread import set_thread_name

n = int(sys.argv[1])
ready, go, tid = threading.Event(), threading.Event(), []

def engine_loop():
    set_thread_name()
    tid.append(threading.get_native_id())
    ready.set()
    go.wait()
    for _ in range(n):
        end = time.perf_counter() + 0.002
        while time.perf_counter() < end:
            pass
        time.sleep(0.0005)

t = threading.Thread(target=engine_loop)
t.start()
ready.wait()
print(tid[0], flush=True)
assert sys.stdin.readline().strip() == "go"
go.set()
t.join()
print("done", flush=True)
"""

HOG = r"""
import sys, time
assert sys.stdin.readline().strip() == "go"
end = time.perf_counter() + float(sys.argv[1])
while time.perf_counter() < end:
    pass
"""


def test_loop_thread_run_queue_and_off_cpu(ebpf_ready, spawn):
    agent = spawn(LOOP, str(NUM_SLEEPS))
    engine_tid = int(agent.readline())
    hogs = [spawn(HOG, "0.5") for _ in range(2)]
    with ZooProbe(hops=False) as probe:
        probe.attach(agents={"node-a": agent.pid})
        assert probe.loop_tids["node-a"] == [engine_tid]  # found by its thread name
        for child in (agent, *hogs):
            child.send("go")
        assert agent.readline() == "done"
        for hog in hogs:
            hog.finish()
        snap = probe.read()

    s = snap["sched"]["node-a"]
    assert s["loop_tids"] == [engine_tid]
    assert s["loop_switches"] >= NUM_SLEEPS  # at least one switch-in after each sleep
    assert s["loop_offcpu"]["count"] >= NUM_SLEEPS
    assert s["loop_offcpu"]["p50_ns"] > 0
    assert s["runq_delay"]["count"] >= NUM_SLEEPS  # every wake-up goes through the run queue
    assert s["runq_delay"]["p99_ns"] > 0
    assert s["loop_runq_delay"]["count"] >= NUM_SLEEPS
    assert s["wakeups"] >= NUM_SLEEPS
