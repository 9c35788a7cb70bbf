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
"""

from __future__ import annotations

import json
import multiprocessing
import resource
import struct
import subprocess
import sys
import time
from pathlib import Path

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


def _our_echo(endpoint: str) -> None:
    import anyio

    anyio.run(_our_echo_main, endpoint)


async def _our_echo_main(endpoint: str) -> None:
    import anyio
    import zmq.asyncio

    from transport.dispatch import Dispatcher
    from transport.link import Link
    from transport.messages import Ping, Pong
    from transport.sockets import Channel, connect_dealer

    ctx = zmq.asyncio.Context()
    done = anyio.Event()
    link: Link

    def handle_ping(incoming) -> None:
        now = time.monotonic_ns()
        if incoming.msg.payload == b"stop":
            done.set()
            return
        link.send_nowait(Pong(request_id=incoming.msg.request_id, payload=struct.pack("<q", now)))

    dispatcher = Dispatcher({Ping: handle_ping}, name="bench agent")
    link = Link(Channel(connect_dealer(ctx, endpoint, routing_id=b"bench-agent")),
                lambda batch: [dispatcher.dispatch(r) for r in batch])  # fmt: skip
    async with anyio.create_task_group() as tg:
        tg.start_soon(link.read_loop)
        tg.start_soon(link.write_loop)
        link.send_nowait(Pong(request_id="ready"))
        await done.wait()
        tg.cancel_scope.cancel()
    link.close()
    ctx.term()


def _our_hops(message_bytes: int, num_messages: int) -> tuple[list[int], list[int]]:
    import anyio

    return anyio.run(_our_hops_main, message_bytes, num_messages)


async def _our_hops_main(message_bytes: int, num_messages: int) -> tuple[list[int], list[int]]:
    import anyio
    import zmq.asyncio

    from transport.dispatch import Dispatcher
    from transport.link import Link
    from transport.messages import Ping, Pong
    from transport.sockets import Channel, bind_router

    ctx = zmq.asyncio.Context()
    sock, endpoint = bind_router(ctx, "tcp://127.0.0.1:0", handover=True)
    replies: list = []
    arrived = anyio.Event()

    def handle_pong(incoming) -> None:
        nonlocal arrived
        replies.append((incoming.peer, incoming.msg))
        arrived.set()

    dispatcher = Dispatcher({Pong: handle_pong}, name="bench router")
    link = Link(Channel(sock), lambda batch: [dispatcher.dispatch(r) for r in batch])
    child = multiprocessing.get_context("spawn").Process(target=_our_echo, args=(endpoint,), daemon=True)
    child.start()
    hops, rtts = [], []
    # the payload's padding makes the encoded Ping as long as the bare message
    pad = b"\x00" * max(0, message_bytes - 40)
    try:
        async with anyio.create_task_group() as tg:
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


async def _load(endpoint: str, seconds: float, concurrency: int) -> dict:
    import anyio

    from client import AsyncZooClient, ZooError

    completed = errors = 0
    deadline = time.monotonic() + seconds
    async with AsyncZooClient(endpoint, timeout_s=30) as zoo:

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


def bench_routed_throughput(seconds: float = 5.0, concurrency: int = 128, num_agents: int = 2) -> dict:
    """Requests/s routed and streamed end to end with the trivial runner (1 output token per request)."""
    import anyio

    return anyio.run(_throughput_main, seconds, concurrency, num_agents)


async def _throughput_main(seconds: float, concurrency: int, num_agents: int) -> dict:
    import anyio

    from backends.fake import FAKE_MODEL_NAME, ByteTokenizer
    from controlplane.admission import AdmissionConfig
    from controlplane.router.router_config import RouterConfig
    from controlplane.server import ControlPlane, ControlPlaneConfig

    cp = ControlPlane(
        ControlPlaneConfig(agent_endpoint="tcp://127.0.0.1:0", client_endpoint="tcp://127.0.0.1:0",
                           model_name=FAKE_MODEL_NAME, router=RouterConfig(policy="least_requests"),
                           admission=AdmissionConfig(max_queue_per_node=100_000, max_queue_global=100_000)),
        ByteTokenizer(),
    )  # fmt: skip
    procs: list[subprocess.Popen] = []
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(cp.run)
            for i in range(num_agents):
                argv = [sys.executable, "-m", "zoo.serve", "agent", "--control", cp.agent_endpoint]
                argv += ["--node-id", f"bench-{i}", "--fake-runner"]
                procs.append(
                    subprocess.Popen(argv, cwd=REPO_ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                )
            await cp.wait_until(lambda: len(cp.registry) == num_agents, 60)
            code = (
                "import anyio, json, sys; from bench.controlplane_hop import _load; "
                f"print(json.dumps(anyio.run(_load, {cp.client_endpoint!r}, {seconds}, {concurrency})))"
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
        for p in procs:
            if p.poll() is None:
                p.terminate()
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
    cpu_s = (end_cpu.ru_utime - start_cpu.ru_utime) + (end_cpu.ru_stime - start_cpu.ru_stime)
    load = json.loads(output.strip().splitlines()[-1]) if output.strip() else {}
    return {
        "runner": "TrivialRunner, 1 output token per request, 4 prompt token ids (no tokenization)",
        "num_agents": num_agents,
        "concurrency": concurrency,
        "seconds": round(wall_s, 2),
        "requests_per_s": round(completed / wall_s, 1),
        "controlplane_cpu_utilization": round(cpu_s / wall_s, 2),
        "requests_per_cpu_s": round(completed / cpu_s, 1) if cpu_s else None,
        "client_errors": load.get("errors"),
        "target_requests_per_s": 2000,
    }


if __name__ == "__main__":
    print(json.dumps({"hop": bench_hop_latency(), "throughput": bench_routed_throughput()}, indent=2))
