"""The control plane's CPU per relayed token over HTTP: a ``zoo controlplane --fake-tokenizer`` and one fake-runner
agent (``--fake-step-ms 2``) as child processes on loopback; 64 concurrent chat completions of 200 tokens each
(``ignore_eos``), streamed and not, in rounds; the control plane process's user + system CPU time (``/proc``) over each
round divided by the tokens it relayed (the agent's too: its steps are sleeps, so that is its event loop's work, which
shares the GIL with a real engine thread). ``--trees A B ...`` runs the same rounds against each source tree in turn (a
baseline commit's ``git worktree`` beside this one), one fleet at a time, alternating ``--reps`` times, so the ratios
come from one run on one host.

    .venv/bin/python scripts/relay_cpu.py --trees /tmp/base . > bench/results/<date>-relay-cpu.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from transport.local_ports import free_port

CONCURRENCY, TOKENS = 64, 200


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class Fleet:
    def __init__(self, tree: str) -> None:
        self.tree = str(Path(tree).resolve())
        ports = {name: free_port() for name in ("agents", "http")}
        self.url = f"http://127.0.0.1:{ports['http']}"
        agents = f"tcp://127.0.0.1:{ports['agents']}"
        python, quiet = sys.executable, {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
        self.cp = subprocess.Popen(
            [python, "-m", "zoo.serve", "controlplane", "--fake-tokenizer", "--listen", agents, "--client-listen",
             "none", "--http", f"127.0.0.1:{ports['http']}", "--stats-listen", "none", "--disable-access-log"],
            cwd=self.tree, **quiet,
        )  # fmt: skip
        self.agent = subprocess.Popen(
            [python, "-m", "zoo.serve", "agent", "--control", agents, "--node-id", "a", "--fake-runner",
             "--fake-step-ms", "2"],
            cwd=self.tree, **quiet,
        )  # fmt: skip

    def stop(self) -> None:
        for process in (self.cp, self.agent):
            process.terminate()
            process.wait(30)


async def _wait_ready(client: httpx.AsyncClient, url: str) -> str:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            models = (await client.get(f"{url}/v1/models")).json()["data"]
            if models:
                return models[0]["id"]
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url}: no model served")


async def _round(client: httpx.AsyncClient, fleet: Fleet, model: str, stream: bool) -> dict:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": TOKENS, "ignore_eos": True}

    async def one() -> int:
        if not stream:
            reply = await client.post(f"{fleet.url}/v1/chat/completions", json=body)
            return reply.json()["usage"]["completion_tokens"]
        tokens = 0
        async with client.stream("POST", f"{fleet.url}/v1/chat/completions", json={**body, "stream": True}) as reply:
            async for line in reply.aiter_lines():
                tokens += line.startswith('data: {"id"')
        return tokens

    cpu0, agent0, t0 = _cpu_s(fleet.cp.pid), _cpu_s(fleet.agent.pid), time.monotonic()
    tokens = sum(await asyncio.gather(*(one() for _ in range(CONCURRENCY))))
    cpu_s, wall_s = _cpu_s(fleet.cp.pid) - cpu0, time.monotonic() - t0
    agent_s = _cpu_s(fleet.agent.pid) - agent0
    return {
        "tokens": tokens,
        "cpu_us_per_token": 1e6 * cpu_s / tokens,
        "agent_cpu_us_per_token": 1e6 * agent_s / tokens,  # the fake runner's steps are sleeps: its loop's work
        "tokens_per_s": tokens / wall_s,
    }


async def main(trees: list[str], rounds: int, reps: int) -> dict:
    """``reps`` times, each tree in turn: its fleet started alone (the other's stopped: measured side by side, two
    fleets at once shared the cores and the ratios wandered), warmed, ``rounds`` rounds each way, stopped."""
    runs: dict[str, dict[str, list[dict]]] = {tree: {"stream": [], "whole": []} for tree in trees}
    async with httpx.AsyncClient(timeout=120, limits=httpx.Limits(max_connections=4 * CONCURRENCY)) as client:
        for _ in range(reps):
            for tree in trees:
                fleet = Fleet(tree)
                try:
                    model = await _wait_ready(client, fleet.url)
                    await _round(client, fleet, model, True)  # warm: connections, code paths
                    for _ in range(rounds):
                        for stream in (True, False):
                            runs[tree]["stream" if stream else "whole"].append(
                                await _round(client, fleet, model, stream)
                            )
                finally:
                    fleet.stop()
    summary = {
        tree: {way: statistics.median(r["cpu_us_per_token"] for r in by_way[way]) for way in by_way}
        for tree, by_way in runs.items()
    }
    agent = {
        tree: {way: statistics.median(r["agent_cpu_us_per_token"] for r in by_way[way]) for way in by_way}
        for tree, by_way in runs.items()
    }
    report = {
        "what": f"control plane CPU per relayed token, {CONCURRENCY} concurrent chat completions x {TOKENS} tokens, "
        "fake-runner agent (2 ms steps), medians of the rounds",
        "trees": trees,
        "cpu_us_per_token_median": summary,
        "agent_cpu_us_per_token_median": agent,
        "runs": runs,
        "host_cpus": os.cpu_count(),
        "date": time.strftime("%Y-%m-%d"),
    }
    if len(trees) == 2:
        base, new = trees
        report["ratio_new_over_base"] = {way: summary[new][way] / summary[base][way] for way in summary[new]}
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", nargs="+", default=["."])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.trees, args.rounds, args.reps)), indent=2))
