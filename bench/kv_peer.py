"""The receiving process of `zoo bench kv`'s transfer figure (``python -m bench.kv_peer SPEC_JSON``).

It binds two sockets and prints their endpoints as one JSON line on stdout, then serves until killed:

    plane: a KVDataPlane ROUTER (the agent's data socket: checks, checksums, assembles, acks each chunk)
    bare:  a bare pyzmq ROUTER that reads every frame (``copy=False``) and answers b"ok" to a b"E" frame

The same bytes go to each, from the bench's own process, so the ratio is the data plane's cost over zmq's.
"""

from __future__ import annotations

import json
import sys

import anyio
import zmq
import zmq.asyncio

from agent.kv_data_plane import DataPlaneConfig, KVDataPlane
from transport.kv_transfer import KVAcceptSpec


async def _bare(sock: zmq.asyncio.Socket) -> None:
    while True:
        frames = await sock.recv_multipart(copy=False)
        if len(frames) == 2 and frames[1].bytes == b"E":
            await sock.send_multipart([frames[0].bytes, b"ok"])


async def _main(spec: dict, chunk_bytes: int, max_inflight_bytes: int) -> None:
    ctx = zmq.asyncio.Context()
    received = [0]

    def on_received(kv) -> None:
        received[0] += 1

    plane = KVDataPlane(
        "bench-receiver",
        KVAcceptSpec(**spec),
        on_received,
        DataPlaneConfig(chunk_bytes=chunk_bytes, max_inflight_bytes=max_inflight_bytes),
        context=ctx,
    )
    bare = ctx.socket(zmq.ROUTER)
    bare.setsockopt(zmq.LINGER, 0)
    bare.bind("tcp://127.0.0.1:0")
    async with anyio.create_task_group() as tg:
        endpoint = await tg.start(plane.run)
        tg.start_soon(_bare, bare)
        print(json.dumps({"plane": endpoint, "bare": bare.getsockopt_string(zmq.LAST_ENDPOINT)}), flush=True)


def main() -> None:
    args = json.loads(sys.argv[1])
    anyio.run(_main, args["spec"], args["chunk_bytes"], args["max_inflight_bytes"])


if __name__ == "__main__":
    main()
