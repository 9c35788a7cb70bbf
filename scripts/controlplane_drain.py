"""What a control plane restart costs the requests in flight, with and without the drain: ``python
scripts/controlplane_drain.py [--streams 24] [--max-tokens 150] [--step-ms 20] [--out FILE]``.

The same set-up twice, one after the other: a control plane process (``--fake-tokenizer``) and two agents
(``--fake-runner``, each step ``--step-ms``), ``--streams`` requests streaming over HTTP (half) and ZeroMQ (half);
once every stream has its first tokens, SIGTERM to the control plane, and a new HTTP request and a new ZeroMQ request
sent while it stops. Run 1: ``--shutdown-timeout 0`` (vLLM's default, and this control plane's); run 2:
``--shutdown-timeout 60``. Counts what each in-flight stream got (all its tokens, or an error) and what the new
requests were answered, and how long the process took to exit after the signal. Prints JSON (and writes it to
``--out``).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import anyio
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from backends.fake import FAKE_MODEL_NAME
from client import AsyncZooClient, ZooError
from transport.local_ports import free_port

REPO = Path(__file__).resolve().parents[1]


def _spawn(argv: list[str], log) -> subprocess.Popen:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "zoo.serve", *argv], cwd=REPO, stdout=log, stderr=log, env=env)


async def _health(http: str) -> dict:
    try:
        async with httpx.AsyncClient(timeout=5.0) as c:
            return (await c.get(f"http://{http}/health")).json()
    except (httpx.TransportError, ValueError):
        return {}


async def run_once(shutdown_timeout_s: float, num_streams: int, max_tokens: int, step_ms: float) -> dict:
    ports = {name: free_port() for name in ("agents", "clients", "stats", "http")}
    agents, clients, http = (f"tcp://127.0.0.1:{ports['agents']}", f"tcp://127.0.0.1:{ports['clients']}",
                             f"127.0.0.1:{ports['http']}")  # fmt: skip
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115
    cp = _spawn(["controlplane", "--fake-tokenizer", "--policy", "least_requests", "--listen", agents,
                 "--client-listen", clients, "--http", http, "--stats-listen", "none",
                 "--shutdown-timeout", str(shutdown_timeout_s)], log)  # fmt: skip
    agent = ["agent", "--control", agents, "--fake-runner", "--fake-step-ms", str(step_ms)]
    procs = [cp] + [_spawn([*agent, "--node-id", f"a{i}"], log) for i in range(2)]
    outcomes: list[str] = []  # per in-flight stream: "complete" (all its tokens), "error", "short"
    started = anyio.Event()
    num_started = 0
    try:
        with anyio.fail_after(120):
            while (await _health(http)).get("nodes") != 2:
                await anyio.sleep(0.1)
        async with AsyncZooClient(clients, timeout_s=120.0) as zoo, httpx.AsyncClient(timeout=120.0) as web:

            async def http_stream() -> None:
                nonlocal num_started
                body = {"model": FAKE_MODEL_NAME, "prompt": "hi", "max_tokens": max_tokens, "stream": True}
                num_tokens, failed = 0, False
                try:
                    async with web.stream("POST", f"http://{http}/v1/completions", json=body) as r:
                        async for line in r.aiter_lines():
                            if not line.startswith("data: {"):
                                continue
                            event = json.loads(line[6:])
                            failed = failed or "error" in event
                            num_tokens += sum(len(c.get("text", "")) for c in event.get("choices", []))
                            if num_tokens == 1:
                                num_started += 1
                                if num_started == num_streams:
                                    started.set()
                except httpx.HTTPError:
                    failed = True
                outcomes.append("error" if failed else "complete" if num_tokens == max_tokens else "short")

            async def zmq_stream() -> None:
                nonlocal num_started
                num_tokens = 0
                try:
                    async for chunk in await zoo.generate("hi", max_tokens=max_tokens, stream=True):
                        num_tokens += len(chunk.token_ids)
                        if num_tokens == 1:
                            num_started += 1
                            if num_started == num_streams:
                                started.set()
                except ZooError:
                    outcomes.append("error")
                    return
                outcomes.append("complete" if num_tokens == max_tokens else "short")

            async with anyio.create_task_group() as tg:
                for i in range(num_streams):
                    tg.start_soon(http_stream if i % 2 == 0 else zmq_stream)
                with anyio.fail_after(120):
                    await started.wait()
                cp.send_signal(signal.SIGTERM)
                signalled_s = time.monotonic()
                new_http = new_zmq = None
                with anyio.move_on_after(10):
                    while (await _health(http)).get("status") != "draining":
                        await anyio.sleep(0.01)
                    body = {"model": FAKE_MODEL_NAME, "prompt": "hi", "max_tokens": 3}
                    try:
                        new_http = (await web.post(f"http://{http}/v1/completions", json=body)).status_code
                    except httpx.HTTPError as e:
                        new_http = type(e).__name__
                    try:
                        await zoo.generate("hi", max_tokens=3)
                        new_zmq = "served"
                    except ZooError as e:
                        new_zmq = e.code.value
            exit_code = await anyio.to_thread.run_sync(lambda: cp.wait(timeout=120))
            exit_after_s = time.monotonic() - signalled_s
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
        log.close()
    return {
        "shutdown_timeout_s": shutdown_timeout_s,
        "in_flight_at_sigterm": num_streams,
        "completed": outcomes.count("complete"),
        "failed": outcomes.count("error"),
        "cut_short": outcomes.count("short"),
        "new_http_request_status": new_http,
        "new_zeromq_request": new_zmq,
        "exit_code": exit_code,
        "exit_after_sigterm_s": round(exit_after_s, 2),
    }


async def main(args: argparse.Namespace) -> dict:
    runs = []
    for timeout_s in (0.0, 60.0):
        runs.append(await run_once(timeout_s, args.streams, args.max_tokens, args.step_ms))
    return {
        "date": time.strftime("%Y-%m-%d"),
        "command": "python scripts/controlplane_drain.py " + " ".join(sys.argv[1:]),
        "set_up": {
            "streams": args.streams,
            "max_tokens": args.max_tokens,
            "agent_step_ms": args.step_ms,
            "agents": 2,
            "half_http_half_zeromq": True,
        },
        "runs": runs,
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--streams", type=int, default=24)
    parser.add_argument("--max-tokens", type=int, default=150)
    parser.add_argument("--step-ms", type=float, default=20.0)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    result = anyio.run(main, args)
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
