"""What the eBPF probes cost and how their hop latency compares with the application's own timestamps.

Set-up: this process is the control plane's side (a ROUTER on loopback); a child process is an agent
(``python -m bench.observe_ebpf echo ENDPOINT``: a DEALER that answers every GenerateRequest with a
TokenChunk). One round trip, sequential (one message in flight)::

    ROUTER ──GenerateRequest(32 prompt tokens, sent_ns)──► DEALER   app hop router→agent = recv_ns - sent_ns,
    ROUTER ◄──TokenChunk(1 token, sent_ns, text=that hop)── DEALER   carried back in the reply's text
    app hop agent→router = recv_ns - sent_ns

Untraced and traced blocks alternate (``num_rounds`` of each mode, the modes' order rotating, the probes
attached to both processes before a traced block and detached after it) so that the load of a shared host
hits every mode alike; the throughput ratio is the median of the per-round ratios (target ≥ 0.95).
Reported per hop mode (observe/ebpf/zmq_hops.py: "wire" = send/recv syscalls of libzmq's I/O threads,
"libzmq" = uprobes on zmq_msg_send / zmq_msg_recv): round trips/s, the ratio, and for the traced messages
the eBPF hop histogram next to the application-level figures of the same messages.

Needs root and eBPF (``make ebpf``); ``bench_ebpf_overhead`` raises RuntimeError with the reason otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import zmq

from bench.stats import format_table, percentile
from engine.sampling_params import SamplingParams
from observe.ebpf.probe import ZooProbe
from transport.codec import decode, encode
from transport.messages import CancelRequest, GenerateRequest, TokenChunk

TARGET_RATIO = 0.95
NODE_ID = "bench-agent"
STOP_ID = "__stop__"
WAIT_MS = 20_000


def _echo_agent(endpoint: str) -> int:
    """The child: answer each GenerateRequest with a TokenChunk whose text is the request's app-level hop (ns)."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, NODE_ID.encode())
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    hello = TokenChunk(request_id="hello", token_ids=[], text="", node_id=NODE_ID)
    hello.sent_ns = time.monotonic_ns()
    sock.send_multipart(encode(hello))
    while True:
        frames = sock.recv_multipart()
        recv_ns = time.monotonic_ns()
        msg, _ = decode(frames)
        if msg.request_id == STOP_ID:
            return 0
        reply = TokenChunk(request_id=msg.request_id, token_ids=[7], text=str(recv_ns - msg.sent_ns), node_id=NODE_ID)
        reply.sent_ns = time.monotonic_ns()
        sock.send_multipart(encode(reply))


def _cpu_ns(pids: tuple[int, ...]) -> int:
    """CPU time (ns) of every thread of these processes, from /proc/<pid>/task/<tid>/schedstat."""
    total = 0
    for pid in pids:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass  # a thread that just exited
    return total


def _block(sock: zmq.Socket, num: int, prefix: str) -> tuple[float, list[int], list[int]]:
    """``num`` round trips; (seconds, app hops router→agent, app hops agent→router) in ns."""
    to_agent: list[int] = []
    to_router: list[int] = []
    prompt = list(range(32))
    ident = NODE_ID.encode()
    t0 = time.perf_counter()
    for i in range(num):
        msg = GenerateRequest(
            request_id=f"{prefix}-{i:07d}",
            prompt_token_ids=prompt,
            sampling=SamplingParams(),
            arrival_ns=0,
            routed_ns=0,
        )
        msg.sent_ns = time.monotonic_ns()
        sock.send_multipart([ident, *encode(msg)])
        if not sock.poll(WAIT_MS):
            raise TimeoutError(f"no reply to {msg.request_id} within {WAIT_MS} ms")
        _, *frames = sock.recv_multipart()
        recv_ns = time.monotonic_ns()
        reply, _ = decode(frames)
        to_router.append(recv_ns - reply.sent_ns)
        to_agent.append(int(reply.text))
    return time.perf_counter() - t0, to_agent, to_router


def _us(values_ns: list[int], q: float) -> float:
    return percentile(values_ns, q) / 1e3


def _summary(seconds: float, to_agent: list[int], to_router: list[int]) -> dict:
    n = len(to_agent)
    return {
        "num_round_trips": n,
        "round_trips_per_s": n / seconds if seconds > 0 else 0.0,
        "app_hop_router_to_agent_us": {"p50": _us(to_agent, 50), "p99": _us(to_agent, 99)},
        "app_hop_agent_to_router_us": {"p50": _us(to_router, 50), "p99": _us(to_router, 99)},
    }


DEFAULT_MODES = ("wire", "wire+sched", "libzmq")


def bench_ebpf_overhead(
    num_messages: int = 20_000, num_rounds: int = 10, hop_modes: tuple[str, ...] = DEFAULT_MODES
) -> dict:
    """Round trips untraced and with the probes of each mode (``num_messages`` per mode, in ``num_rounds``
    blocks per mode, the modes' order rotating from round to round). The first mode is the headline ratio.

    A mode is a hop mode ("wire" | "libzmq"), "+sched" adding the scheduler probes on both processes."""
    per_block = max(1, num_messages // num_rounds)
    modes = ["untraced", *hop_modes]
    ctx = zmq.Context()
    router = ctx.socket(zmq.ROUTER)
    router.setsockopt(zmq.LINGER, 0)
    router.setsockopt(zmq.ROUTER_MANDATORY, 1)
    port = router.bind_to_random_port("tcp://127.0.0.1")
    child = subprocess.Popen([sys.executable, "-m", "bench.observe_ebpf", "echo", f"tcp://127.0.0.1:{port}"])
    probes = {m: ZooProbe(sched=m.endswith("+sched"), hop_mode=m.removesuffix("+sched")) for m in hop_modes}
    pids = (os.getpid(), child.pid)
    acc: dict[str, list] = {m: [0.0, [], []] for m in modes}
    block_s: dict[str, list[float]] = {m: [] for m in modes}  # per round, for paired ratios
    cpu_ns: dict[str, int] = dict.fromkeys(modes, 0)  # both processes, all threads
    compile_s: dict[str, float] = {}
    attach_ms: dict[str, list[float]] = {m: [] for m in hop_modes}
    snaps: dict[str, dict] = {}
    try:
        if not router.poll(WAIT_MS):
            raise TimeoutError("the echo agent did not connect")
        router.recv_multipart()
        for m, probe in probes.items():
            t0 = time.perf_counter()
            probe.attach(controlplane=pids[0], agents={NODE_ID: pids[1]})  # compiles
            compile_s[m] = time.perf_counter() - t0
            for pid in pids:
                probe.remove_process(pid)
            probe.clear()
        _block(router, min(1000, per_block), "warmup")
        for r in range(num_rounds):
            for mode in modes[r % len(modes) :] + modes[: r % len(modes)]:
                probe = probes.get(mode)
                if probe is not None:
                    t0 = time.perf_counter()
                    probe.attach(controlplane=pids[0], agents={NODE_ID: pids[1]})
                    attach_ms[mode].append(1e3 * (time.perf_counter() - t0))
                cpu0 = _cpu_ns(pids)
                seconds, to_agent, to_router = _block(router, per_block, f"{mode}-{r}")
                cpu_ns[mode] += _cpu_ns(pids) - cpu0
                if probe is not None:
                    for pid in pids:
                        probe.remove_process(pid)
                acc[mode][0] += seconds
                block_s[mode].append(seconds)
                acc[mode][1] += to_agent
                acc[mode][2] += to_router
        snaps = {m: probe.read() for m, probe in probes.items()}
        stop = CancelRequest(request_id=STOP_ID)
        stop.sent_ns = time.monotonic_ns()
        router.send_multipart([NODE_ID.encode(), *encode(stop)])
        child.wait(timeout=WAIT_MS / 1e3)
    finally:
        for probe in probes.values():
            probe.detach()
        if child.poll() is None:
            child.kill()
            child.wait()
        router.close()
        ctx.term()

    untraced = _summary(*acc["untraced"])
    untraced["cpu_us_per_round_trip"] = cpu_ns["untraced"] / 1e3 / len(acc["untraced"][1])
    traced = {}
    for m in hop_modes:
        t = _summary(*acc[m])
        # CPU time the two processes spent per round trip (includes the probes run in their context; the sched
        # tracepoints also run in other tasks' switches): steadier on a loaded host than wall-clock throughput
        t["cpu_us_per_round_trip"] = cpu_ns[m] / 1e3 / len(acc[m][1])
        # the median of per-round ratios: blocks of one round ran back to back, so a shared host's load drifts less
        ratio = statistics.median(u / x for u, x in zip(block_s["untraced"], block_s[m]))
        comparison = {}
        for direction, app_ns in (("router->agent", acc[m][1]), ("agent->router", acc[m][2])):
            h = snaps[m]["hops"].get(direction, {"count": 0, "p50_ns": 0.0, "p99_ns": 0.0, "mean_ns": None})
            comparison[direction] = {
                "count_ebpf": h["count"],
                "count_app": len(app_ns),
                "ebpf_p50_us": h["p50_ns"] / 1e3,
                "app_p50_us": _us(app_ns, 50),
                "ebpf_p99_us": h["p99_ns"] / 1e3,
                "app_p99_us": _us(app_ns, 99),
                "ebpf_mean_us": (h["mean_ns"] or 0.0) / 1e3,
                "app_mean_us": sum(app_ns) / len(app_ns) / 1e3 if app_ns else 0.0,
            }
        traced[m] = {
            **t,
            "throughput_ratio": ratio,
            "throughput_ratio_total": t["round_trips_per_s"] / untraced["round_trips_per_s"],
            "meets_target": ratio >= TARGET_RATIO,
            "added_us_per_round_trip": 1e6 / t["round_trips_per_s"] - 1e6 / untraced["round_trips_per_s"],
            "ebpf_vs_app": comparison,
            "messages": snaps[m]["messages"],
            "compile_s": compile_s[m],
            "attach_ms": sum(attach_ms[m]) / len(attach_ms[m]) if attach_ms[m] else 0.0,
        }
    head = hop_modes[0]
    return {
        "num_messages": per_block * num_rounds,
        "num_rounds": num_rounds,
        "untraced": untraced,
        "traced": traced,
        "headline_mode": head,
        "throughput_ratio": traced[head]["throughput_ratio"],
        "target_ratio": TARGET_RATIO,
        "meets_target": traced[head]["meets_target"],
    }


def format_report(r: dict) -> str:
    u = r["untraced"]
    lines = [
        f"ping-pong ROUTER→DEALER→ROUTER, {r['num_messages']} round trips per mode in {r['num_rounds']} blocks",
        f"untraced: {u['round_trips_per_s']:.0f} round trips/s",
    ]
    rows = []
    for m, t in r["traced"].items():
        lines.append(
            f"traced ({m}): {t['round_trips_per_s']:.0f} round trips/s, ratio {t['throughput_ratio']:.3f} "
            f"(target ≥ {r['target_ratio']}) {'ok' if t['meets_target'] else 'MISSED'}, "
            f"+{t['added_us_per_round_trip']:.1f} µs per round trip, CPU {t['cpu_us_per_round_trip']:.1f} µs per "
            f"round trip (untraced {u['cpu_us_per_round_trip']:.1f}); compile {t['compile_s']:.1f} s, "
            f"attach {t['attach_ms']:.0f} ms"
        )
        for direction, c in t["ebpf_vs_app"].items():
            rows.append(
                [m, direction, c["count_ebpf"], c["ebpf_p50_us"], c["app_p50_us"], c["ebpf_p99_us"], c["app_p99_us"]]
            )
    headers = ["mode", "hop (same messages)", "count", "eBPF p50 µs", "app p50 µs", "eBPF p99 µs", "app p99 µs"]
    lines.append(format_table(headers, rows))
    lines.append(
        f"app-level hop p50/p99 µs untraced: router→agent {u['app_hop_router_to_agent_us']['p50']:.1f}/"
        f"{u['app_hop_router_to_agent_us']['p99']:.1f}, agent→router {u['app_hop_agent_to_router_us']['p50']:.1f}/"
        f"{u['app_hop_agent_to_router_us']['p99']:.1f}"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.observe_ebpf")
    sub = p.add_subparsers(dest="cmd")
    e = sub.add_parser("echo", help="(internal) the echo agent child")
    e.add_argument("endpoint")
    p.add_argument("--num-messages", type=int, default=20_000)
    p.add_argument("--num-rounds", type=int, default=10)
    p.add_argument(
        "--modes", default=",".join(DEFAULT_MODES), help="comma-separated (wire, libzmq, +sched); the first is headline"
    )
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if args.cmd == "echo":
        return _echo_agent(args.endpoint)
    modes = tuple(m for m in args.modes.split(",") if m)
    report = bench_ebpf_overhead(args.num_messages, args.num_rounds, hop_modes=modes)
    print(json.dumps(report, indent=2) if args.json else format_report(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
