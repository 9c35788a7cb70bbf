"""A fleet in real time, and its virtual-time twin: the check that the simulator tells the truth.

    real time     ControlPlane actor (real ROUTER sockets, registry, policy, admission)
                    ▲ ZeroMQ            ▲ ZeroMQ
                  AsyncZooClient      NodeAgents (sim/sim_agents.py; in this process, each with its own engine
                  replays the trace    thread, or all in one child process ``python -m sim.sim_agents``)
                  at its arrival       whose SimModelRunner sleeps each step's predicted time
                  times; TTFT/TPOT
                  measured here
    virtual time  sim/des.py FleetSimulator: the same fleet, trace, seed (→ the same prompt token ids), policy
                  and report interval, on a virtual clock

    rt, virtual, twin = run_twin(fleet, workload, "round_robin")
    print(twin.format())

    zoo sim --realtime --fleet examples/twin_fleet.toml --trace conv --load 0.6 --max-requests 40 \\
                       --policy round_robin [--agents-in-process] [--json]      (sim/cli.py)

Both sides produce a ``SimResult`` (sim/des.py), so sim/report.py summarizes either. The client measures
TTFT from the moment it sends a request (its actual, not its scheduled, arrival) to the first chunk that
carries a token, and TPOT as (last token - first token) / (output tokens - 1), the DES's definitions.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import numpy as np

from backends.sim.engine import SimTokenizer
from client import AsyncZooClient, ZooError
from controlplane.admission import AdmissionConfig
from controlplane.server import ControlPlane, ControlPlaneConfig
from sim.des import FleetSimulator, NodeResult, RequestRecord, SimResult, default_router_config
from sim.fleet import Fleet
from sim.sim_agents import serve_sim_agents
from sim.workload import PromptFactory, Workload
from transport.process import stop_processes

REPO_ROOT = Path(__file__).resolve().parents[1]
TWIN_PERCENTILES = (50, 99)


# --------------------------------------------------------------------------- the real-time run


async def run_realtime_async(
    fleet: Fleet,
    workload: Workload,
    policy: str,
    *,
    seed: int = 0,
    report_interval_s: float = 0.25,
    agents_in_process: bool = True,
    fleet_path: str | None = None,
    timeout_s: float = 300.0,
    admission: AdmissionConfig | None = None,
) -> SimResult:
    """Replay ``workload`` through a real control plane and simulated agents; records timed at the client.

    agents_in_process False: the agents run in one child process (``python -m sim.sim_agents --fleet
    fleet_path``), so they do not share this process's GIL with the control plane and the client.
    """
    model = fleet.model
    cp = ControlPlane(
        ControlPlaneConfig(
            agent_endpoint="tcp://127.0.0.1:0",
            client_endpoint="tcp://127.0.0.1:0",
            model_name=model.name,
            router=default_router_config(fleet, policy),
            admission=admission or AdmissionConfig(),  # the DES's default too
            report_interval_s=report_interval_s,
            heartbeat_interval_s=1.0,
            heartbeat_timeout_s=30.0,  # a loaded host must not expire a busy node mid-run
        ),
        SimTokenizer(model.vocab_size, model.eos_token_id),
    )
    child: subprocess.Popen | None = None
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in the finally)
    agents = []
    wall_start = time.perf_counter()
    try:
        with anyio.fail_after(timeout_s):
            async with anyio.create_task_group() as tg:
                await tg.start(cp.run)
                if agents_in_process:
                    agents = await tg.start(serve_sim_agents, fleet, cp.agent_endpoint)
                else:
                    if fleet_path is None:
                        raise ValueError("agents in a child process need fleet_path (a TOML file or bundled name)")
                    child = subprocess.Popen(
                        [sys.executable, "-m", "sim.sim_agents", "--fleet", fleet_path, "--control", cp.agent_endpoint],
                        cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
                        env={**os.environ, "PYTHONUNBUFFERED": "1"},
                    )  # fmt: skip
                await _wait_joined(cp, len(fleet.nodes), child, log)
                records = await _replay(cp.client_endpoint, fleet, workload, seed)
                tg.cancel_scope.cancel()
    finally:
        if child is not None:
            stop_processes([child])
        log.close()
    wall_s = time.perf_counter() - wall_start
    end_s = max((r.finish_s or r.arrival_s for r in records), default=0.0)
    return SimResult(
        policy=policy,
        workload=workload.name,
        time_scale=workload.time_scale,
        records=records,
        nodes=_node_results(fleet, records, agents),
        end_s=end_s,
        arrivals_end_s=records[-1].arrival_s if records else 0.0,
        wall_s=wall_s,
        num_events=0,
        drained=all(r.finish_s is not None for r in records),
        info={"mode": "realtime", "agents_in_process": agents_in_process},
    )


def run_realtime(fleet: Fleet, workload: Workload, policy: str, **kwargs) -> SimResult:
    return anyio.run(lambda: run_realtime_async(fleet, workload, policy, **kwargs))


async def _wait_joined(cp: ControlPlane, num_nodes: int, child, log) -> None:
    with anyio.fail_after(60):
        while len(cp.registry) < num_nodes:
            if child is not None and child.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"the sim agents exited with {child.returncode}:\n{log.read()[-3000:]}")
            await anyio.sleep(0.05)


async def _replay(endpoint: str, fleet: Fleet, workload: Workload, seed: int) -> list[RequestRecord]:
    """Send each request at its arrival time (relative to the start) and time its tokens."""
    prompts = PromptFactory(fleet.model.vocab_size, seed)
    max_model_len = fleet.engine.scheduler_config(fleet.model).max_model_len
    records: list[RequestRecord] = []
    async with AsyncZooClient(endpoint, timeout_s=120.0) as client, anyio.create_task_group() as tg:
        t0 = anyio.current_time()
        for index, trace_request in enumerate(workload.requests):
            token_ids = prompts.prompt_token_ids(trace_request, index)
            max_tokens = min(trace_request.max_tokens, max_model_len - len(token_ids))
            await anyio.sleep(max(0.0, t0 + trace_request.arrival_s - anyio.current_time()))
            record = RequestRecord(
                f"r{index}",
                trace_request.traffic_class,
                anyio.current_time() - t0,
                trace_request.num_prompt_tokens,
                trace_request.max_tokens,
            )
            records.append(record)
            if max_tokens >= 1:
                tg.start_soon(_one_request, client, record, token_ids, max_tokens, t0)
    return records


async def _one_request(client: AsyncZooClient, record: RequestRecord, token_ids, max_tokens: int, t0: float) -> None:
    try:
        stream = await client.generate(
            prompt_token_ids=token_ids,
            max_tokens=max_tokens,
            temperature=0.0,
            traffic_class=record.traffic_class,
            request_id=record.req_id,
            stream=True,
        )
    except ZooError as e:  # refused (429 from admission control, no node ...): recorded as the DES records it
        record.refusal = e.code.value
        return
    async with stream:
        async for chunk in stream:
            now_s = anyio.current_time() - t0
            if chunk.token_ids:
                if record.first_token_s is None:
                    record.first_token_s = now_s
                record.num_output_tokens += len(chunk.token_ids)
            record.node_id = chunk.node_id or record.node_id
            if chunk.finished:
                record.finish_s = now_s


def _node_results(fleet: Fleet, records: list[RequestRecord], agents) -> list[NodeResult]:
    by_id = {a.config.node_id: a for a in agents}
    out = []
    for spec in fleet.nodes:
        agent = by_id.get(spec.node_id)
        num_requests = sum(1 for r in records if r.node_id == spec.node_id)
        if agent is None or agent.engine is None:
            out.append(NodeResult(spec.node_id, spec.cell, spec.hardware.profile, spec.hardware.tp,
                                  0, 0.0, 0, 0, 0, 0, 0.0, num_requests))  # fmt: skip
            continue
        stats = agent.engine.make_stats()
        runner = agent.engine.runner
        out.append(
            NodeResult(
                spec.node_id, spec.cell, spec.hardware.profile, spec.hardware.tp, runner.num_steps,
                runner.busy_time_s, stats.num_preemptions_total, stats.num_swapped_out_blocks_total,
                stats.num_swapped_in_blocks_total, stats.num_recomputed_tokens_total, stats.prefix_cache_hit_rate,
                num_requests,
            )
        )  # fmt: skip
    return out


# --------------------------------------------------------------------------- the twin comparison


@dataclass(slots=True)
class TwinComparison:
    """Percentiles of the real-time and the virtual-time run; ``rel_diff`` = realtime / virtual - 1."""

    rows: dict[str, tuple[float, float, float]] = field(default_factory=dict)  # "ttft_p50" → (rt, virtual, diff)
    num_requests: int = 0
    num_unfinished: int = 0  # real-time requests that never finished
    same_node_share: float = math.nan  # requests both runs sent to the same node

    def worst(self) -> tuple[str, float]:
        name = max(self.rows, key=lambda k: abs(self.rows[k][2]))
        return name, self.rows[name][2]

    def within(self, tolerance: float) -> bool:
        return self.num_unfinished == 0 and all(abs(d) <= tolerance for _, _, d in self.rows.values())

    def format(self) -> str:
        lines = [f"{'metric':10s} {'real-time':>10s} {'virtual':>10s} {'diff':>7s}   (ms)"]
        for name, (rt, virtual, diff) in self.rows.items():
            lines.append(f"{name:10s} {1e3 * rt:10.1f} {1e3 * virtual:10.1f} {diff:+7.1%}")
        lines.append(
            f"{self.num_requests} requests, {self.num_unfinished} unfinished in real time, "
            f"{self.same_node_share:.0%} routed to the same node by both"
        )
        return "\n".join(lines)


def compare(realtime: SimResult, virtual: SimResult) -> TwinComparison:
    """TTFT and TPOT p50/p99 of both runs (empirical percentiles, as sim/report.py computes them)."""
    twin = TwinComparison(num_requests=len(virtual.records))
    twin.num_unfinished = sum(1 for r in realtime.records if r.finish_s is None)
    for metric in ("ttft", "tpot"):
        rt = np.array([getattr(r, f"{metric}_s") for r in realtime.records])
        vt = np.array([getattr(r, f"{metric}_s") for r in virtual.records])
        for p in TWIN_PERCENTILES:
            a = float(np.percentile(rt, p, method="inverted_cdf"))
            b = float(np.percentile(vt, p, method="inverted_cdf"))
            twin.rows[f"{metric}_p{p}"] = (a, b, a / b - 1 if b > 0 else math.inf)
    nodes_rt = {r.req_id: r.node_id for r in realtime.records}
    same = [nodes_rt.get(r.req_id) == r.node_id for r in virtual.records]
    twin.same_node_share = sum(same) / len(same) if same else math.nan
    return twin


def run_twin(
    fleet: Fleet,
    workload: Workload,
    policy: str,
    *,
    seed: int = 0,
    report_interval_s: float = 0.25,
    admission: AdmissionConfig | None = None,
    **realtime_kwargs,
) -> tuple[SimResult, SimResult, TwinComparison]:
    """The same fleet, trace, seed, policy, admission limits and report interval in real time and in virtual
    time."""
    admission = admission or AdmissionConfig()
    virtual = FleetSimulator(
        fleet, workload, policy, admission=admission, seed=seed, report_interval_s=report_interval_s
    ).run()
    realtime = run_realtime(
        fleet, workload, policy, seed=seed, report_interval_s=report_interval_s, admission=admission, **realtime_kwargs
    )
    return realtime, virtual, compare(realtime, virtual)
