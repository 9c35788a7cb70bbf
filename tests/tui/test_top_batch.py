"""``zoo top --batch`` (tui/top_batch.py): snapshots from a real stats stream (a StatsPublisher on loopback) printed
as the dashboard's text without the TUI, or as JSON lines; no stream is a clear exit 1, not a hang."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import anyio
import pytest

from observe.stats_stream import StatsPublisher
from tui.fleet_view import FleetView
from tui.top_batch import describe_fleet, run_batch


class _Observer:
    """What StatsPublisher reads: a fleet snapshot per call (the test's four-node fleet, numbered)."""

    def __init__(self, make_stats) -> None:
        self.make_stats = make_stats

    def fleet_stats(self, seq: int):
        return self.make_stats(seq + 1)


def test_the_text_is_the_dashboards_status_table_and_figures(make_stats):
    view = FleetView()
    view.update(make_stats(1))
    first = describe_fleet(view, "tcp://cp:5557").splitlines()
    assert first[0].startswith("control plane tcp://cp:5557 · policy hardware_aware · 4/4 nodes up · eBPF: attached")
    assert first[1] == "rates: after a second snapshot"
    header = first[2].split()
    assert header[:3] == ["Node", "GPU", "Cell"]
    assert [line.split()[0] for line in first[3:7]] == ["a100-0", "h100-0", "l4-0", "t4-0"]  # by node, as the TUI
    assert any(line.startswith("router→node hop [eBPF]: p50 ") for line in first)
    view.update(make_stats(2))
    second = describe_fleet(view, "tcp://cp:5557").splitlines()
    assert second[1].startswith("requests/s 80.0 ")  # 40 more routed in 0.5 s of the publisher's clock
    assert second[2].startswith("east: 2/2 up")


@pytest.mark.anyio
async def test_batch_prints_n_snapshots_from_a_live_stream(make_stats):
    out = io.StringIO()
    async with anyio.create_task_group() as tg:
        endpoint = await tg.start(StatsPublisher(_Observer(make_stats), "tcp://127.0.0.1:0", interval_s=0.05).run)
        assert await run_batch(endpoint, 2, out=out, timeout_s=20) == 0
        as_json = io.StringIO()
        assert await run_batch(endpoint, 3, as_json=True, out=as_json, timeout_s=20) == 0
        tg.cancel_scope.cancel()
    blocks = out.getvalue().split("\n\n")
    assert len(blocks) == 2 and all(b.startswith(f"control plane {endpoint}") for b in blocks)
    assert "rates: after a second snapshot" in blocks[0] and "requests/s" in blocks[1]
    lines = [json.loads(line) for line in as_json.getvalue().splitlines()]
    assert len(lines) == 3 and [n["node_id"] for n in lines[0]["nodes"]] == ["h100-0", "a100-0", "l4-0", "t4-0"]
    assert lines[0]["seq"] < lines[1]["seq"] < lines[2]["seq"]


def test_no_stream_is_exit_1_saying_so():
    argv = [sys.executable, "-m", "zoo", "top", "--batch", "--control", "tcp://127.0.0.1:1", "--timeout-s", "0.3"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and "no snapshot from tcp://127.0.0.1:1 within 0.3 s" in done.stderr
    refused = subprocess.run([*argv[:4], "--json"], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and "--json needs --batch" in refused.stderr
