"""`zoo bench cells` (bench/cells.py): a two-cell fleet of simulated GPUs in real processes (a real control
plane reading examples/cells.toml, the agents in a child process), batch pushed to 3x its cell's capacity.
Behaviour only, never wall-clock figures: VIP is never refused and every VIP request completes, while
batch is refused (429) — or at least queued — and nothing fails otherwise."""

from __future__ import annotations

import functools
import json
from pathlib import Path

import anyio

from bench.cells import BATCH_LOAD, CellsBenchConfig, arrivals, class_rates, format_cells_table, run_once
from controlplane.cells import load_cells
from sim.fleet import load_fleet


def test_the_load_is_three_times_the_batch_cells_capacity():
    config = CellsBenchConfig()
    fleet, cells = load_fleet(config.fleet_file), load_cells(config.fleet_file)
    rates = class_rates(fleet, cells, {"batch": 1.0, "vip": 1.0})
    assert class_rates(fleet, cells, config.classes)["batch"] == BATCH_LOAD * rates["batch"]
    schedule = arrivals(class_rates(fleet, cells, config.classes), 5.0, seed=1)
    assert schedule == arrivals(class_rates(fleet, cells, config.classes), 5.0, seed=1)  # seeded
    assert {name for _, name in schedule} == {"batch", "vip"}


def test_vip_is_never_refused_while_batch_is_pushed_to_three_times_its_capacity():
    result = anyio.run(functools.partial(run_once, CellsBenchConfig(duration_s=3.0), with_cells=True))
    vip, batch = result["classes"]["vip"], result["classes"]["batch"]
    assert vip["sent"] > 0 and vip["refused"] == 0 and vip["completed"] == vip["sent"] and not vip["errors"]
    assert batch["refused"] > 0  # batch gets 429s (its queue limit) ...
    assert batch["completed"] + batch["refused"] == batch["sent"] and not batch["errors"]  # ... or is served
    server = result["server_classes"]
    assert server["vip"]["cells"].keys() <= {"vip", "bulk"}  # vip at home (or on an idle bulk node)
    assert set(server["batch"]["cells"]) == {"bulk"}  # batch never borrows the vip cell
    assert server["batch"]["requests_refused"] == batch["refused"]


def test_the_table_shows_each_run_and_class_against_its_slo():
    """`zoo bench cells` (without --json) prints the table, here from the saved result of 2026-12-01."""
    saved = Path(__file__).resolve().parents[2] / "bench" / "results" / "2026-12-01-cells.json"
    report = json.loads(saved.read_text())
    lines = format_cells_table(report).splitlines()
    by_run_class = {(" ".join(w[:-9]), w[-9]): w[-8:] for w in (line.split() for line in lines[3:7])}
    # load, sent, done, 429, TTFT p50, TTFT p99, SLO, held
    assert by_run_class[("cells", "vip")] == ["0.4x", "16", "16", "0", "103", "162", "1000", "yes"]
    assert by_run_class[("one pool", "vip")][-1] == "NO" and by_run_class[("one pool", "vip")][3] == "3"
    assert by_run_class[("cells", "batch")][:4] == ["3x", "114", "63", "51"]
    assert lines[-1] == "VIP TTFT one pool / cells: p50 5.84x, p99 7.86x"
