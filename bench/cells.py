"""`zoo bench cells`: does the VIP class hold its SLO while the batch class is pushed to 3x its capacity?

    examples/cells.toml: cell "vip" (1 x A10), cell "bulk" (2 x L4), simulated Llama-3-8B in real time
    load, open loop (Poisson, seeded): batch at 3x the bulk cell's capacity, vip at 40% of the vip cell's
    ┌ cells     the control plane reads the file's cells and classes (zoo controlplane --cells FILE)
    └ one pool  the same fleet, load and queue limits, no cells nor classes (the control plane before)

Both runs go through a real ControlPlane (in this process) and real agents in a child process
(``python -m sim.sim_agents``), timed at a ZeroMQ client. Per class and run: requests sent, completed,
refused (429), client-side TTFT P50/P99; and the ratios one pool / cells for the VIP class. What must hold
(tests/bench/test_cells_bench.py checks it): with cells the VIP class is never refused and all its
requests complete, while batch is refused (or queued); the figures themselves are not asserted.
Without ``--json`` it prints the table (``format_cells_table``: per run and class, against the class's TTFT
SLO at P99); the report carries the machine's load average (a shared machine slows the real processes).
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import anyio

from backends.sim.engine import SimTokenizer
from client import AsyncZooClient, ZooError, ZooOverloadedError
from controlplane.admission import AdmissionConfig
from controlplane.cells import CellsConfig, load_cells
from controlplane.node_latency import percentile_ms
from controlplane.router.router_config import RouterConfig
from controlplane.server import ControlPlane, ControlPlaneConfig
from sim.fleet import Fleet, load_fleet
from transport.process import stop_processes

REPO_ROOT = Path(__file__).resolve().parents[1]
FLEET_FILE = REPO_ROOT / "examples" / "cells.toml"
PROMPT_TOKENS = 256
OUTPUT_TOKENS = 32
BATCH_LOAD = 3.0  # x the bulk cell's capacity
VIP_LOAD = 0.4  # x the vip cell's capacity


@dataclass(slots=True)
class _Record:
    traffic_class: str
    sent_s: float
    first_token_s: float | None = None
    finish_s: float | None = None
    refused: bool = False
    error: str | None = None


@dataclass(slots=True)
class CellsBenchConfig:
    fleet_file: Path = FLEET_FILE
    duration_s: float = 8.0
    seed: int = 0
    policy: str = "least_requests"
    max_queue_per_node: int = 4  # the control plane's default limit (the batch class's too, in the file)
    classes: dict[str, float] = field(default_factory=lambda: {"batch": BATCH_LOAD, "vip": VIP_LOAD})


def class_rates(fleet: Fleet, cells: CellsConfig, loads: dict[str, float]) -> dict[str, float]:
    """Requests/s per class: ``load`` x the capacity of the class's home cell for the bench's request size."""
    rates = {}
    for name, load in loads.items():
        home = cells.home_cell(name)
        nodes = [n for n in fleet.nodes if n.cell == home]
        capacity = sum(fleet.node_capacity_req_per_s(n, PROMPT_TOKENS, OUTPUT_TOKENS) for n in nodes)
        rates[name] = load * capacity
    return rates


def arrivals(rates: dict[str, float], duration_s: float, seed: int) -> list[tuple[float, str]]:
    """(time, class) of every request, Poisson per class, merged in time order."""
    rng = random.Random(seed)
    out = []
    for name, rate in sorted(rates.items()):
        t = rng.expovariate(rate)
        while t < duration_s:
            out.append((t, name))
            t += rng.expovariate(rate)
    return sorted(out)


async def run_once(config: CellsBenchConfig, *, with_cells: bool) -> dict:
    """One run: a control plane (with or without the file's cells) and the fleet's agents in a child."""
    fleet = load_fleet(config.fleet_file)
    cells = load_cells(config.fleet_file) if with_cells else CellsConfig()
    model = fleet.model
    cp = ControlPlane(
        ControlPlaneConfig(
            agent_endpoint="tcp://127.0.0.1:0",
            client_endpoint="tcp://127.0.0.1:0",
            model_name=model.name,
            router=RouterConfig(policy=config.policy, cells=cells),
            admission=AdmissionConfig(max_queue_per_node=config.max_queue_per_node, max_queue_global=100_000),
            report_interval_s=0.1,
            heartbeat_interval_s=1.0,
            heartbeat_timeout_s=30.0,  # a loaded host must not expire a busy node mid-run
        ),
        SimTokenizer(model.vocab_size, model.eos_token_id),
    )
    rates = class_rates(fleet, load_cells(config.fleet_file), config.classes)
    schedule = arrivals(rates, config.duration_s, config.seed)
    records: list[_Record] = []
    log = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in the finally)
    child = None
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(cp.run)
            child = subprocess.Popen(
                [sys.executable, "-m", "sim.sim_agents", "--fleet", str(config.fleet_file), "--control",
                 cp.agent_endpoint], cwd=REPO_ROOT, stdout=log, stderr=subprocess.STDOUT, text=True,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
            with anyio.fail_after(120):
                while len(cp.registry) < len(fleet.nodes):
                    if child.poll() is not None:
                        log.seek(0)
                        raise RuntimeError(f"the sim agents exited with {child.returncode}:\n{log.read()[-3000:]}")
                    await anyio.sleep(0.05)
            await _load(cp.client_endpoint, schedule, records, model.vocab_size, config.seed)
            stats = cp.stats()
            tg.cancel_scope.cancel()
    finally:
        if child is not None:
            stop_processes([child])
        log.close()
    return {"classes": _summary(records), "server_classes": stats["classes"], "refused": stats["refused"]}


async def _load(endpoint: str, schedule, records: list[_Record], vocab_size: int, seed: int) -> None:
    rng = random.Random(seed + 1)
    async with AsyncZooClient(endpoint, timeout_s=300.0) as client, anyio.create_task_group() as tg:
        t0 = anyio.current_time()
        for i, (at_s, name) in enumerate(schedule):
            await anyio.sleep(max(0.0, t0 + at_s - anyio.current_time()))
            record = _Record(name, anyio.current_time() - t0)
            records.append(record)
            token_ids = [rng.randrange(10, vocab_size - 10) for _ in range(PROMPT_TOKENS)]
            tg.start_soon(_one, client, record, token_ids, f"{name}-{i}", t0)


async def _one(client: AsyncZooClient, record: _Record, token_ids: list[int], request_id: str, t0: float) -> None:
    try:
        stream = await client.generate(
            prompt_token_ids=token_ids,
            max_tokens=OUTPUT_TOKENS,
            temperature=0.0,
            ignore_eos=True,
            traffic_class=record.traffic_class,
            request_id=request_id,
            stream=True,
        )
        async with stream:
            async for chunk in stream:
                if chunk.token_ids and record.first_token_s is None:
                    record.first_token_s = anyio.current_time() - t0
                if chunk.finished:
                    record.finish_s = anyio.current_time() - t0
    except ZooOverloadedError:
        record.refused = True
    except ZooError as e:
        record.error = f"{type(e).__name__}: {e}"


def _summary(records: list[_Record]) -> dict[str, dict]:
    out = {}
    for name in sorted({r.traffic_class for r in records}):
        mine = [r for r in records if r.traffic_class == name]
        ttfts = [r.first_token_s - r.sent_s for r in mine if r.first_token_s is not None and r.finish_s is not None]
        out[name] = {
            "sent": len(mine),
            "completed": sum(r.finish_s is not None for r in mine),
            "refused": sum(r.refused for r in mine),
            "errors": sorted({r.error for r in mine if r.error}),
            "ttft_ms_p50": percentile_ms(ttfts, 50),
            "ttft_ms_p99": percentile_ms(ttfts, 99),
        }
    return out


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or not b else a / b


async def run_cells_bench_async(config: CellsBenchConfig) -> dict:
    started = time.perf_counter()
    cells = await run_once(config, with_cells=True)
    one_pool = await run_once(config, with_cells=False)
    vip_cells, vip_pool = cells["classes"].get("vip", {}), one_pool["classes"].get("vip", {})
    slo_ms = 1e3 * (load_cells(config.fleet_file).resolve("vip").slo_ttft_s or 0.0)
    return {
        "bench": "cells",
        "fleet": load_fleet(config.fleet_file).describe(),
        "duration_s": config.duration_s,
        "request": {"prompt_tokens": PROMPT_TOKENS, "output_tokens": OUTPUT_TOKENS},
        "load_x_home_capacity": config.classes,
        "vip_slo_ttft_ms": slo_ms,
        "cells": cells,
        "one_pool": one_pool,
        "ratios_one_pool_over_cells": {
            "vip_ttft_p99": _ratio(vip_pool.get("ttft_ms_p99"), vip_cells.get("ttft_ms_p99")),
            "vip_ttft_p50": _ratio(vip_pool.get("ttft_ms_p50"), vip_cells.get("ttft_ms_p50")),
        },
        "vip_refused": {"cells": vip_cells.get("refused"), "one_pool": vip_pool.get("refused")},
        "wall_s": time.perf_counter() - started,
        "load_average_1m_5m_15m": list(os.getloadavg()),  # the machine may be shared: read figures with it
    }


def run_cells_bench(args: argparse.Namespace) -> dict:
    config = CellsBenchConfig(duration_s=3.0 if getattr(args, "quick", False) else 8.0)
    report = anyio.run(run_cells_bench_async, config)
    if not getattr(args, "json", False):
        print(format_cells_table(report))
    return report


def format_cells_table(report: dict) -> str:
    """The benchmark table: per run (cells / one pool) and class, requests sent, completed and refused (429),
    client-side TTFT P50/P99 and whether the class's TTFT SLO held at P99; then the VIP ratios."""
    from bench.stats import format_table

    classes = load_cells(FLEET_FILE).classes()  # the file the bench runs on: the classes' SLOs
    slo_ms = {name: tc.slo_ttft_s * 1e3 for name, tc in classes.items() if tc.slo_ttft_s is not None}
    loads = report.get("load_x_home_capacity", {})
    rows = []
    for run in ("cells", "one_pool"):
        for name, row in sorted(report[run]["classes"].items()):
            p99 = row["ttft_ms_p99"]
            held = "n/a" if name not in slo_ms or p99 is None else ("yes" if p99 <= slo_ms[name] else "NO")
            rows.append([run.replace("_", " "), name, f"{loads.get(name, float('nan')):g}x", row["sent"],
                         row["completed"], row["refused"], _ms(row["ttft_ms_p50"]), _ms(p99),
                         _ms(slo_ms.get(name)), held])  # fmt: skip
    headers = ["run", "class", "load", "sent", "done", "429", "TTFT p50 ms", "TTFT p99 ms", "SLO ms", "SLO held"]
    ratios = report.get("ratios_one_pool_over_cells", {})
    p50, p99 = (_x(ratios.get(f"vip_ttft_{q}")) for q in ("p50", "p99"))
    lines = [
        f"zoo bench cells: {report['fleet']}, {report['duration_s']:g} s open loop per run",
        format_table(headers, rows),
        f"VIP TTFT one pool / cells: p50 {p50}x, p99 {p99}x",
    ]
    if "load_average_1m_5m_15m" in report:
        lines.append("load average (1/5/15 min): " + " / ".join(f"{v:.1f}" for v in report["load_average_1m_5m_15m"]))
    return "\n".join(lines)


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.0f}"


def _x(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.2f}"
