"""`zoo bench kv`: KV between agents, side by side with its baseline in the same run.

transfer: agent → agent throughput of the KV data plane (agent/kv_data_plane.py: chunked, windowed,
    checksummed, acknowledged) from this process to a receiver process on loopback (bench/kv_peer.py),
    and the same bytes in the same chunks through a bare pyzmq DEALER → ROUTER with one reply at the
    end. Rounds alternate (bare, plane, bare, ...); medians are reported, ``ratio_vs_bare`` = plane / bare.
migration: a running request moved between two engines vs recomputed (bench/kv_migration.py).
remote_swap: a preempted request's KV to a peer's host RAM and back vs recomputed (bench/kv_remote_swap.py).

The KV geometry is SmolLM2-135M's (30 layers, 3 KV heads, head dim 64, bf16, 16-token blocks:
368,640 bytes a block), ``context_tokens`` tokens of it per transfer.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import anyio
import zmq
import zmq.asyncio

from agent.kv_data_plane import DataPlaneConfig, KVDataPlane
from transport.kv_transfer import DEFAULT_CHUNK_BYTES, DEFAULT_MAX_INFLIGHT_BYTES, layout_nbytes
from transport.messages import KVWireLayout
from transport.process import stop_processes

SMOLLM2_KV = {"num_layers": 30, "block_size": 16, "num_kv_heads": 3, "head_dim": 64}


async def _bare_round(sock: zmq.asyncio.Socket, data: memoryview, chunk_bytes: int) -> float:
    start = time.perf_counter()
    for offset in range(0, len(data), chunk_bytes):
        await sock.send_multipart([data[offset : offset + chunk_bytes]], copy=False)
    await sock.send_multipart([b"E"])
    await sock.recv_multipart()
    return time.perf_counter() - start


async def _transfer(context_tokens: int, num_rounds: int, chunk_bytes: int, max_inflight_bytes: int) -> dict:
    num_blocks = -(-context_tokens // SMOLLM2_KV["block_size"])
    layout = KVWireLayout(num_blocks=num_blocks, dtype="bfloat16", **SMOLLM2_KV)
    data = memoryview(os.urandom(layout_nbytes(layout)))
    spec = {**SMOLLM2_KV, "max_blocks": num_blocks}
    args = json.dumps({"spec": spec, "chunk_bytes": chunk_bytes, "max_inflight_bytes": max_inflight_bytes})
    proc = subprocess.Popen([sys.executable, "-m", "bench.kv_peer", args], stdout=subprocess.PIPE, text=True)
    ctx = zmq.asyncio.Context()
    try:
        endpoints = json.loads(await anyio.to_thread.run_sync(proc.stdout.readline))
        bare = ctx.socket(zmq.DEALER)
        bare.setsockopt(zmq.LINGER, 0)
        bare.connect(endpoints["bare"])
        config = DataPlaneConfig(chunk_bytes=chunk_bytes, max_inflight_bytes=max_inflight_bytes)
        plane = KVDataPlane("bench-sender", _spec(spec), lambda kv: None, config, context=ctx)
        bare_s, plane_s = [], []
        async with anyio.create_task_group() as tg:
            await tg.start(plane.run)
            block_ids = list(range(num_blocks))
            await _bare_round(bare, data, chunk_bytes)  # warm-up: connections, first allocations
            await plane.send(endpoints["plane"], "warmup", block_ids, layout, data)
            for i in range(num_rounds):
                bare_s.append(await _bare_round(bare, data, chunk_bytes))
                plane_s.append(await plane.send(endpoints["plane"], f"bench-{i}", block_ids, layout, data))
            tg.cancel_scope.cancel()
        bare.close()
    finally:
        ctx.destroy(linger=0)
        stop_processes([proc])
    nbytes = len(data)
    bare_bps = nbytes / statistics.median(bare_s)
    plane_bps = nbytes / statistics.median(plane_s)
    return {
        "context_tokens": context_tokens,
        "bytes": nbytes,
        "chunk_bytes": chunk_bytes,
        "max_inflight_bytes": max_inflight_bytes,
        "rounds": num_rounds,
        "agent_bytes_per_s": plane_bps,
        "bare_pyzmq_bytes_per_s": bare_bps,
        "ratio_vs_bare": plane_bps / bare_bps,
        "agent_ms": [1e3 * s for s in plane_s],
        "bare_ms": [1e3 * s for s in bare_s],
    }


def _spec(spec: dict):
    from transport.kv_transfer import KVAcceptSpec

    return KVAcceptSpec(**spec)


def run_kv_bench(args: argparse.Namespace) -> dict:
    quick = getattr(args, "quick", False)
    report = {
        "transfer": anyio.run(
            _transfer, 2_000 if quick else 8_000, 3 if quick else 7, DEFAULT_CHUNK_BYTES, DEFAULT_MAX_INFLIGHT_BYTES
        ),
        "link": "loopback TCP (tcp://127.0.0.1), sender and receiver in two processes",
    }
    from bench.kv_migration import bench_migration

    report["migration"] = bench_migration(500 if quick else 2_000)
    from bench.kv_remote_swap import bench_remote_swap

    report["remote_swap"] = bench_remote_swap(500 if quick else 2_000)
    if not getattr(args, "json", False):
        t = report["transfer"]
        print(
            f"transfer {t['bytes'] / 1e6:.0f} MB: agent {t['agent_bytes_per_s'] / 1e9:.2f} GB/s, "
            f"bare pyzmq {t['bare_pyzmq_bytes_per_s'] / 1e9:.2f} GB/s, ratio {t['ratio_vs_bare']:.2f}"
        )
        g = report["migration"]
        print(
            f"migration of {g['context_tokens']} tokens: pause {g['pause_ms']:.0f} ms, recompute "
            f"{g['recompute_ms']:.0f} ms, speedup {g['speedup']:.1f}x, identical {g['identical']}"
        )
        r = report["remote_swap"]
        print(
            f"remote swap of {r['context_tokens']} tokens: out+in {r['out_in_ms']:.0f} ms, recompute "
            f"{r['recompute_ms']:.0f} ms, speedup {r['speedup']:.1f}x, identical {r['identical']}"
        )
    return report
