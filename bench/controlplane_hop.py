"""Control-plane transport benchmarks: router → agent hop latency, and routed requests per second.

bench_hop_latency: ping-pong over tcp loopback, the echoing side in a child process, one message in flight.
    ours:  ROUTER side = a Link (outbox → writer → codec, sent_ns stamp) in an anyio loop; the agent side = a
           Link + Dispatcher; the hop ends when the Ping *handler* runs (decoded), and starts when the
           sender queued it (``submit``) — the whole path a GenerateRequest takes.
    bare:  a blocking pyzmq ROUTER/DEALER pair sending the same number of bytes; the hop ends when
           recv_multipart returns.
    Both read CLOCK_MONOTONIC on one host, so one-way figures are meaningful.

bench_routed_throughput: the control plane in this process, two agent processes with the trivial runner
    (``TrivialRunner``: no compute, **1 output token per request**), a load-generator process driving
    ``concurrency`` requests at once through AsyncZooClient (prompt_token_ids, so no tokenization). Reports
    completed requests/s and the control plane's CPU use; ``requests_per_cpu_s`` is the rate one saturated
    core would route.

curve=True (both benches; ``bench_curve_cost`` runs each with CURVE off and on, in one run): the ROUTERs are
    CURVE servers with a ZAP allow list (transport/curve.py), the DEALERs CURVE clients, and the agent-side
    channel checks every message's key against its routing id, as ``zoo controlplane --curve-dir`` does.
    ``python -m bench.controlplane_hop --curve [--json-out FILE]``.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from transport.process import stop_processes

REPO_ROOT = Path(__file__).resolve().parents[1]


def _percentiles_us(samples_ns: list[int]) -> dict[str, float]:
    ordered = sorted(samples_ns)

    def pick(q: float) -> float:
        return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] / 1e3

    return {"p50_us": round(pick(0.50), 1), "p99_us": round(pick(0.99), 1)}


# --------------------------------------------------------------------------- bare pyzmq


def _bare_echo(endpoint: str) -> None:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    sock.send(b"ready")
    while True:
        frames = sock.recv_multipart()
        now = time.monotonic_ns()
        if frames[0] == b"stop":
            break
        sock.send_multipart([struct.pack("<q", now)])
    sock.close()
    ctx.term()


def _bare_hops(message_bytes: int, num_messages: int) -> tuple[list[int], list[int]]:
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:0")
    endpoint = sock.getsockopt_string(zmq.LAST_ENDPOINT)
    child = multiprocessing.get_context("spawn").Process(target=_bare_echo, args=(endpoint,), daemon=True)
    child.start()
    hops, rtts = [], []
    try:
        peer, _ = sock.recv_multipart()
        pad = b"\x00" * max(0, message_bytes - 8)
        for _ in range(num_messages):
            t0 = time.monotonic_ns()
            sock.send_multipart([peer, struct.pack("<q", t0) + pad])
            _, reply = sock.recv_multipart()
            rtts.append(time.monotonic_ns() - t0)
            hops.append(struct.unpack("<q", reply)[0] - t0)
        sock.send_multipart([peer, b"stop"])
    finally:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
        sock.close()
        ctx.term()
    return hops, rtts


# --------------------------------------------------------------------------- our path


def _our_echo(endpoint: str, curve_keys: tuple[bytes, bytes, bytes] | None = None) -> None:
    import anyio

    anyio.run(_our_echo_main, endpoint, curve_keys)


async def _our_echo_main(endpoint: str, curve_keys: tuple[bytes, bytes, bytes] | None = None) -> None:
    import anyio
    import zmq.asyncio

    from transport.curve import CurveClient, CurveKeyPair
    from transport.dispatch import Dispatcher
    from transport.link import Link
    from transport.messages import Ping, Pong
    from transport.sockets import Channel, connect_dealer

    ctx = zmq.asyncio.Context()
    curve = None if curve_keys is None else CurveClient(curve_keys[0], CurveKeyPair(curve_keys[1], curve_keys[2]))
    done = anyio.Event()
    link: Link

    def handle_ping(incoming) -> None:
        now = time.monotonic_ns()
        if incoming.msg.payload == b"stop":
            done.set()
            return
        link.send_nowait(Pong(request_id=incoming.msg.request_id, payload=struct.pack("<q", now)))

    dispatcher = Dispatcher({Ping: handle_ping}, name="bench agent")
    link = Link(Channel(connect_dealer(ctx, endpoint, routing_id=b"bench-agent", curve=curve)),
                lambda batch: [dispatcher.dispatch(r) for r in batch])  # fmt: skip
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.read_loop)
        tg.start_soon(link.write_loop)
        link.send_nowait(Pong(request_id="ready"))
        await done.wait()
        tg.cancel_scope.cancel()
    link.close()
    ctx.term()


def _our_hops(message_bytes: int, num_messages: int, curve: bool = False) -> tuple[list[int], list[int]]:
    import anyio

    return anyio.run(_our_hops_main, message_bytes, num_messages, curve)


async def _our_hops_main(message_bytes: int, num_messages: int, curve: bool = False) -> tuple[list[int], list[int]]:
    import anyio
    import zmq.asyncio

    from transport.curve import ControlPlaneCurve, CurveKeyPair, ZapHandler
    from transport.dispatch import Dispatcher
    from transport.link import Link
    from transport.messages import Ping, Pong
    from transport.sockets import Channel, bind_router

    ctx = zmq.asyncio.Context()
    zap, echo_keys, server_curve = None, None, None
    if curve:  # the control plane's agent socket: CURVE server, ZAP allow list, key-bound routing ids
        server, agent = CurveKeyPair.generate(), CurveKeyPair.generate()
        cp_curve = ControlPlaneCurve(server, {agent.public_key: "bench-agent"})
        zap, server_curve = ZapHandler(ctx, cp_curve.zap_policy()), cp_curve.agent_server
        echo_keys = (server.public_key, agent.public_key, agent.secret_key)
    sock, endpoint = bind_router(ctx, "tcp://127.0.0.1:0", handover=True, curve=server_curve)
    replies: list = []
    arrived = anyio.Event()

    def handle_pong(incoming) -> None:
        nonlocal arrived
        replies.append((incoming.peer, incoming.msg))
        arrived.set()

    dispatcher = Dispatcher({Pong: handle_pong}, name="bench router")
    link = Link(Channel(sock, peers_bound_to_keys=curve), lambda batch: [dispatcher.dispatch(r) for r in batch])
    child = multiprocessing.get_context("spawn").Process(target=_our_echo, args=(endpoint, echo_keys), daemon=True)
    child.start()
    hops, rtts = [], []
    # the payload's padding makes the encoded Ping as long as the bare message
    pad = b"\x00" * max(0, message_bytes - 40)
    try:
        async with anyio.create_task_group() as tg:
            if zap is not None:
                tg.start_soon(zap.serve)
            tg.start_soon(link.read_loop)
            tg.start_soon(link.write_loop)
            with anyio.fail_after(30):
                await arrived.wait()
            peer = replies.pop()[0]
            for i in range(num_messages):
                arrived = anyio.Event()
                t0 = time.monotonic_ns()
                link.send_nowait(Ping(request_id=f"{i:08d}", payload=pad), peer)
                with anyio.fail_after(10):
                    await arrived.wait()
                rtts.append(time.monotonic_ns() - t0)
                hops.append(struct.unpack("<q", replies.pop()[1].payload)[0] - t0)
            link.send_nowait(Ping(payload=b"stop"), peer)
            await anyio.sleep(0.05)  # let the writer flush the stop before the socket closes
            tg.cancel_scope.cancel()
    finally:
        child.join(timeout=5)
        if child.is_alive():
            child.kill()
        link.close()
        if zap is not None:
            zap.close()
        ctx.term()
    return hops, rtts


def bench_hop_latency(message_bytes: int = 256, num_messages: int = 2000) -> dict:
    """Router → agent one-way hop and round trip, ours vs bare pyzmq, p50/p99 in µs."""
    warmup = min(200, num_messages // 10)
    bare_hops, bare_rtts = _bare_hops(message_bytes, num_messages + warmup)
    our_hops, our_rtts = _our_hops(message_bytes, num_messages + warmup)
    bare = {"hop": _percentiles_us(bare_hops[warmup:]), "rtt": _percentiles_us(bare_rtts[warmup:])}
    ours = {"hop": _percentiles_us(our_hops[warmup:]), "rtt": _percentiles_us(our_rtts[warmup:])}
    return {
        "message_bytes": message_bytes,
        "num_messages": num_messages,
        "bare_pyzmq": bare,
        "ours": ours,
        "hop_p50_ratio": round(ours["hop"]["p50_us"] / bare["hop"]["p50_us"], 2),
        "hop_p99_ratio": round(ours["hop"]["p99_us"] / bare["hop"]["p99_us"], 2),
        "target_hop_p50_ratio": 1.5,
    }


# --------------------------------------------------------------------------- routed throughput


async def _load(endpoint: str, seconds: float, concurrency: int, curve_dir: str | None = None) -> dict:
    import anyio

    from client import AsyncZooClient, ZooError
    from transport.curve import load_curve_client

    completed = errors = 0
    deadline = time.monotonic() + seconds
    curve = None if curve_dir is None else load_curve_client(curve_dir, "clients", "bench-loader")
    async with AsyncZooClient(endpoint, timeout_s=30, curve=curve) as zoo:

        async def worker() -> None:
            nonlocal completed, errors
            while time.monotonic() < deadline:
                try:
                    await zoo.generate(prompt_token_ids=[5, 6, 7, 8], max_tokens=1)
                    completed += 1
                except ZooError:
                    errors += 1

        async with anyio.create_task_group() as tg:
            for _ in range(concurrency):
                tg.start_soon(worker)
    return {"completed": completed, "errors": errors}


def bench_routed_throughput(
    seconds: float = 5.0, concurrency: int = 128, num_agents: int = 2, curve: bool = False
) -> dict:
    """Requests/s routed and streamed end to end with the trivial runner (1 output token per request)."""
    import anyio

    with tempfile.TemporaryDirectory(prefix="zoo-bench-curve-") as curve_dir:
        return anyio.run(_throughput_main, seconds, concurrency, num_agents, curve_dir if curve else None)


async def _throughput_main(seconds: float, concurrency: int, num_agents: int, curve_dir: str | None = None) -> dict:
    import anyio

    from backends.fake import FAKE_MODEL_NAME, ByteTokenizer
    from controlplane.admission import AdmissionConfig
    from controlplane.router.router_config import RouterConfig
    from controlplane.server import ControlPlane, ControlPlaneConfig
    from transport.curve import load_controlplane_curve, make_curve_dir

    curve = None
    if curve_dir is not None:
        make_curve_dir(curve_dir, agents=[f"bench-{i}" for i in range(num_agents)], clients=["bench-loader"])
        curve = load_controlplane_curve(curve_dir)
    cp = ControlPlane(
        ControlPlaneConfig(agent_endpoint="tcp://127.0.0.1:0", client_endpoint="tcp://127.0.0.1:0",
                           model_name=FAKE_MODEL_NAME, router=RouterConfig(policy="least_requests"),
                           admission=AdmissionConfig(max_queue_per_node=100_000, max_queue_global=100_000),
                           curve=curve),
        ByteTokenizer(),
    )  # fmt: skip
    procs: list[subprocess.Popen] = []
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(cp.run)
            for i in range(num_agents):
                argv = [sys.executable, "-m", "zoo.serve", "agent", "--control", cp.agent_endpoint]
                argv += ["--node-id", f"bench-{i}", "--fake-runner"]
                argv += [] if curve_dir is None else ["--curve-dir", curve_dir]
                procs.append(
                    subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
            await cp.wait_until(lambda: len(cp.registry) == num_agents, 60)
            code = (
                "import anyio, json, sys; from bench.controlplane_hop import _load; "
                f"print(json.dumps(anyio.run(_load, {cp.client_endpoint!r}, {seconds}, {concurrency}, {curve_dir!r})))"
            )
            loader = subprocess.Popen([sys.executable, "-c", code], cwd=REPO_ROOT, stdout=subprocess.PIPE, text=True)
            procs.append(loader)
            await cp.wait_until(lambda: cp.counters["routed"] > 0, 60)  # the loader is up
            start_completed, start_wall = cp.counters["completed"], time.monotonic()
            start_cpu = resource.getrusage(resource.RUSAGE_SELF)
            output = (await anyio.to_thread.run_sync(loader.communicate))[0]
            end_cpu = resource.getrusage(resource.RUSAGE_SELF)
            wall_s = time.monotonic() - start_wall
            completed = cp.counters["completed"] - start_completed
            tg.cancel_scope.cancel()
    finally:
        stop_processes(procs)
    cpu_s = (end_cpu.ru_utime - start_cpu.ru_utime) + (end_cpu.ru_stime - start_cpu.ru_stime)
    load = json.loads(output.strip().splitlines()[-1]) if output.strip() else {}
    return {
        "runner": "TrivialRunner, 1 output token per request, 4 prompt token ids (no tokenization)",
        "curve": curve_dir is not None,
        "num_agents": num_agents,
        "concurrency": concurrency,
        "seconds": round(wall_s, 2),
        "requests_per_s": round(completed / wall_s, 1),
        "controlplane_cpu_utilization": round(cpu_s / wall_s, 2),
        "requests_per_cpu_s": round(completed / cpu_s, 1) if cpu_s else None,
        "client_errors": load.get("errors"),
        "target_requests_per_s": 2000,
    }


def _stream_cpu(num_messages: int, message_bytes: int, curve: bool) -> dict:
    import anyio

    return anyio.run(_stream_cpu_main, num_messages, message_bytes, curve)


async def _stream_cpu_main(num_messages: int, message_bytes: int, curve: bool) -> dict:
    """A DEALER streams ``num_messages`` Pings to a ROUTER in this one process (encode, encrypt, TCP loopback,
    decrypt, our channel's receive path with its key check): CPU seconds of the process (its libzmq I/O
    threads included) per message — a figure that other load on the machine does not inflate much."""
    import anyio
    import zmq
    import zmq.asyncio

    from transport.curve import ControlPlaneCurve, CurveClient, CurveKeyPair, ZapHandler
    from transport.messages import Ping
    from transport.sockets import Channel, bind_router, connect_dealer

    ctx = zmq.asyncio.Context()
    zap, server_curve, client_curve = None, None, None
    if curve:
        server, agent = CurveKeyPair.generate(), CurveKeyPair.generate()
        cp_curve = ControlPlaneCurve(server, {agent.public_key: "bench-agent"})
        zap, server_curve = ZapHandler(ctx, cp_curve.zap_policy()), cp_curve.agent_server
        client_curve = CurveClient(server.public_key, agent)
    sock, endpoint = bind_router(ctx, "tcp://127.0.0.1:0", handover=True, curve=server_curve)
    router = Channel(sock, peers_bound_to_keys=curve)
    dealer = Channel(connect_dealer(ctx, endpoint, routing_id=b"bench-agent", curve=client_curve))
    pad = b"\x00" * max(0, message_bytes - 40)
    received = 0
    try:
        async with anyio.create_task_group() as tg:
            if zap is not None:
                tg.start_soon(zap.serve)
            dealer.send(Ping(payload=pad))  # connected and authenticated before the clock starts
            while received < 1:
                received += len(await router.recv_batch())
            start_cpu, start_wall = resource.getrusage(resource.RUSAGE_SELF), time.monotonic()

            async def produce() -> None:
                for _ in range(num_messages):
                    while True:
                        try:
                            dealer.send(Ping(payload=pad))
                            break
                        except zmq.Again:
                            await dealer.wait_writable()

            tg.start_soon(produce)
            while received < num_messages + 1:
                received += len(await router.recv_batch())
            end_cpu, wall_s = resource.getrusage(resource.RUSAGE_SELF), time.monotonic() - start_wall
            tg.cancel_scope.cancel()
    finally:
        dealer.close()
        router.close()
        if zap is not None:
            zap.close()
        ctx.term()
    cpu_s = (end_cpu.ru_utime - start_cpu.ru_utime) + (end_cpu.ru_stime - start_cpu.ru_stime)
    return {"cpu_s": cpu_s, "wall_s": wall_s, "num_messages": num_messages}


def bench_curve_cost(
    num_messages: int = 3000, message_bytes: int = 256, seconds: float = 5.0, concurrency: int = 128, rounds: int = 2
) -> dict:
    """Hop latency and routed req/s with CURVE off and on, in one run, alternated ``rounds`` times (off, on,
    off, on …) so a drift of the machine hits both; the figures pool every round's samples / completions."""
    warmup = min(200, num_messages // 10)
    hops: dict[bool, list[int]] = {False: [], True: []}
    rtts: dict[bool, list[int]] = {False: [], True: []}
    runs: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(rounds):
        for curve in (False, True):
            h, r = _our_hops(message_bytes, num_messages + warmup, curve=curve)
            hops[curve] += h[warmup:]
            rtts[curve] += r[warmup:]
    for _ in range(rounds):
        for curve in (False, True):
            runs[curve].append(bench_routed_throughput(seconds, concurrency, curve=curve))
    streams: dict[bool, list[dict]] = {False: [], True: []}
    for _ in range(rounds):
        for curve in (False, True):
            streams[curve].append(_stream_cpu(10 * num_messages, message_bytes, curve))

    def stream_cost(curve: bool) -> dict:
        cpu_s = sum(s["cpu_s"] for s in streams[curve])
        num = sum(s["num_messages"] for s in streams[curve])
        wall_s = sum(s["wall_s"] for s in streams[curve])
        return {"cpu_us_per_message": round(cpu_s / num * 1e6, 2), "messages_per_s": round(num / wall_s)}

    def latency(curve: bool) -> dict:
        return {"hop": _percentiles_us(hops[curve]), "rtt": _percentiles_us(rtts[curve])}

    def throughput(curve: bool) -> dict:
        rates = [run["requests_per_s"] for run in runs[curve]]
        per_cpu = [run["requests_per_cpu_s"] for run in runs[curve] if run["requests_per_cpu_s"]]
        return {
            "requests_per_s": round(sum(rates) / len(rates), 1),
            "requests_per_s_each_round": rates,
            "requests_per_cpu_s": round(sum(per_cpu) / len(per_cpu), 1) if per_cpu else None,
            "requests_per_cpu_s_each_round": per_cpu,
            "client_errors": sum(run["client_errors"] or 0 for run in runs[curve]),
        }

    off, on = latency(False), latency(True)
    t_off, t_on = throughput(False), throughput(True)
    s_off, s_on = stream_cost(False), stream_cost(True)
    import os

    import zmq

    return {
        "date": time.strftime("%Y-%m-%d"),
        "what": "CURVE (ZAP allow list, key-bound agent ids) on vs off; our Link/codec path; same run",
        "how": (
            "python -m bench.controlplane_hop --curve; hop: a Ping from the control-plane-side Link to an "
            "echoing agent process (Link + Dispatcher), one in flight, one-way hop from CLOCK_MONOTONIC; "
            f"throughput: the control plane in-process, 2 fake-runner agent processes, one AsyncZooClient "
            f"load process at concurrency {concurrency}, 1 output token per request"
        ),
        "machine": f"{os.cpu_count()} CPUs (shared), libzmq {zmq.zmq_version()}, pyzmq {zmq.__version__}",
        "message_bytes": message_bytes,
        "num_messages_per_round": num_messages,
        "rounds": rounds,
        "hop_latency": {"curve_off": off, "curve_on": on},
        "hop_p50_ratio": round(on["hop"]["p50_us"] / off["hop"]["p50_us"], 2),
        "hop_p99_ratio": round(on["hop"]["p99_us"] / off["hop"]["p99_us"], 2),
        "rtt_p50_ratio": round(on["rtt"]["p50_us"] / off["rtt"]["p50_us"], 2),
        "routed_throughput": {
            "seconds_per_round": seconds,
            "concurrency": concurrency,
            "curve_off": t_off,
            "curve_on": t_on,
        },
        "requests_per_s_ratio": round(t_on["requests_per_s"] / t_off["requests_per_s"], 3),
        "requests_per_cpu_s_ratio": (
            round(t_on["requests_per_cpu_s"] / t_off["requests_per_cpu_s"], 3)
            if t_on["requests_per_cpu_s"] and t_off["requests_per_cpu_s"]
            else None
        ),
        "stream_cpu": {
            "what": "one process, DEALER → ROUTER, our encode/receive path; CPU of the process per message",
            "num_messages_per_round": 10 * num_messages,
            "curve_off": s_off,
            "curve_on": s_on,
        },
        "stream_cpu_per_message_ratio": round(s_on["cpu_us_per_message"] / s_off["cpu_us_per_message"], 3),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.controlplane_hop")
    parser.add_argument("--curve", action="store_true", help="CURVE off vs on (hop latency and routed req/s)")
    parser.add_argument("--num-messages", type=int, default=3000, help="hops per round (--curve)")
    parser.add_argument("--seconds", type=float, default=5.0, help="routed-throughput seconds per round (--curve)")
    parser.add_argument("--rounds", type=int, default=2, help="off/on alternations (--curve)")
    parser.add_argument("--json-out", default=None, help="also write the JSON report here")
    args = parser.parse_args(argv)
    if args.curve:
        report = bench_curve_cost(args.num_messages, seconds=args.seconds, rounds=args.rounds)
    else:
        report = {"hop": bench_hop_latency(), "throughput": bench_routed_throughput()}
    text = json.dumps(report, indent=2)
    print(text)
    if args.json_out:
        Path(args.json_out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
