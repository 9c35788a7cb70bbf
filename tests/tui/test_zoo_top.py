"""`zoo top` driven headless with Textual's pilot: table, sorting, filtering, a node leaving, the detail
view, an SVG snapshot, and a stats publisher that restarts under it."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest
import zmq
import zmq.asyncio

from transport.codec import encode
from tui.node_detail import NodeDetailScreen
from tui.zoo_top import ZooTopApp

# snapshots are applied by the test itself: the app must never call them stale, however slow the machine
FED_BY_HAND = 1e9

pytestmark = pytest.mark.anyio

SIZE = (160, 48)
REPO_ROOT = Path(__file__).resolve().parents[2]


def _column(app: ZooTopApp, key: str) -> list[str]:
    from textual.widgets import DataTable

    table = app.query_one("#nodes", DataTable)
    return [str(table.get_cell(row, key)) for row in table.rows]


async def _until(pilot, predicate, timeout_s: float = 10.0) -> None:
    """Let the app run until ``predicate()`` holds (a timeout fails the test)."""
    with anyio.fail_after(timeout_s):
        while not predicate():
            await pilot.pause(0.02)


async def test_table_sorting_and_filtering(make_stats):
    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=SIZE) as pilot:
        app.apply_stats(make_stats(1))
        app.apply_stats(make_stats(2))
        await pilot.pause()
        assert _column(app, "node") == ["a100-0", "h100-0", "l4-0", "t4-0"]  # by node id
        assert not app.waiting and "4/4 nodes up" in str(app.query_one("#status").render())
        assert app.view.rates.requests_per_s == pytest.approx(80.0)  # 40 routed per 0.5 s of publisher clock
        await pilot.press("s", "s", "s")  # node → GPU → cell → power (strongest first)
        assert app.view.sort_column.key == "power"
        assert _column(app, "node") == ["h100-0", "a100-0", "l4-0", "t4-0"]
        await pilot.press("r")
        assert _column(app, "node") == ["t4-0", "l4-0", "a100-0", "h100-0"]
        await pilot.press("c")  # first cell: east
        assert app.view.cell_filter == "east" and set(_column(app, "node")) == {"h100-0", "a100-0"}
        await pilot.press("c")  # west
        assert set(_column(app, "node")) == {"l4-0", "t4-0"}
        await pilot.press("g")  # first GPU type (L4) within west
        assert _column(app, "node") == ["l4-0"]
        await pilot.press("x")
        assert len(_column(app, "node")) == 4


async def test_a_node_that_leaves_shows_dead_then_disappears(make_stats):
    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=SIZE) as pilot:
        app.apply_stats(make_stats(1))
        app.apply_stats(make_stats(2, dead=("l4-0",)))
        await pilot.pause()
        states = dict(zip(_column(app, "node"), _column(app, "state"), strict=True))
        assert states["l4-0"] == "dead" and states["h100-0"] == "up"
        assert "3/4 nodes up" in str(app.query_one("#status").render())
        app.apply_stats(make_stats(3, gone=("l4-0",)))
        await pilot.pause()
        assert "l4-0" not in _column(app, "node") and len(_column(app, "node")) == 3


async def test_detail_view_of_a_node_names_its_figures_and_sources(make_stats):
    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=SIZE) as pilot:
        app.apply_stats(make_stats(1))
        await pilot.pause()
        await pilot.press("down", "enter")  # second row: h100-0
        await _until(pilot, lambda: isinstance(app.screen, NodeDetailScreen))
        screen = app.screen
        assert screen.node_id == "h100-0"
        assert "h100-0 · up · H100 · cell east" in str(screen.query_one("#detail-title").render())
        from textual.widgets import DataTable

        figures = screen.query_one("#detail-figures", DataTable)
        rows = [tuple(str(c) for c in figures.get_row(key))[:2] for key in figures.rows]
        assert ("router_to_node_hop", "app") in rows and ("router_to_node_hop", "eBPF") in rows
        app.apply_stats(make_stats(2, gone=("h100-0",)))  # it leaves while we look at it
        await pilot.pause()
        assert "gone from the fleet" in str(screen.query_one("#detail-title").render())
        await pilot.press("escape")
        await _until(pilot, lambda: not isinstance(app.screen, NodeDetailScreen))


async def test_sources_are_labelled_and_an_svg_snapshot_is_saved(make_stats, tmp_path):
    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=SIZE) as pilot:
        app.apply_stats(make_stats(1, ebpf=False))
        await pilot.pause()
        titles = [str(w.render()) for w in app.query(".series-title")]
        assert any("router→node hop [app] p50" in t for t in titles)
        assert any("router→node hop [eBPF] not attached" in t for t in titles)
        assert "eBPF: not attached" in str(app.query_one("#status").render())
        for seq in range(2, 12):
            app.apply_stats(make_stats(seq))
        await pilot.pause()
        assert "eBPF: attached" in str(app.query_one("#status").render())
        titles = [str(w.render()) for w in app.query(".series-title")]
        assert any("router→node hop [eBPF] p50" in t for t in titles)
        assert not any("not attached" in t for t in titles)
        svg = app.export_screenshot(title="zoo top")
    (tmp_path / "zoo-top.svg").write_text(svg)
    assert svg.lstrip().startswith("<svg") and svg.rstrip().endswith("</svg>")
    for node_id in ("h100-0", "a100-0", "l4-0", "t4-0"):
        assert node_id in svg
    for text in ("TTFT", "eBPF", "requests/s"):
        assert text in svg
    if os.environ.get("ZOO_UPDATE_SCREENSHOTS"):  # `make screenshots` refreshes the README's image
        (REPO_ROOT / "docs" / "img").mkdir(parents=True, exist_ok=True)
        (REPO_ROOT / "docs" / "img" / "zoo-top.svg").write_text(svg)


class _Publisher:
    """A PUB socket on ``endpoint`` that sends ``stats_fn(seq)`` every 20 ms until stopped."""

    def __init__(self, endpoint: str, stats_fn) -> None:
        self.endpoint = endpoint
        self.stats_fn = stats_fn

    async def run(self, *, task_status=anyio.TASK_STATUS_IGNORED) -> None:
        ctx = zmq.asyncio.Context()
        sock = ctx.socket(zmq.PUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.bind(self.endpoint)
        task_status.started()
        try:
            seq = 0
            while True:
                await sock.send_multipart(encode(self.stats_fn(seq)))
                seq += 1
                await anyio.sleep(0.02)
        finally:
            sock.close(linger=0)
            ctx.term()


async def test_survives_a_publisher_restart(make_stats, tmp_path):
    endpoint = f"ipc://{tmp_path}/stats.ipc"
    app = ZooTopApp(endpoint, stale_after_s=0.3)
    async with app.run_test(size=SIZE) as pilot:
        assert app.waiting  # nothing published yet
        async with anyio.create_task_group() as tg:
            await tg.start(_Publisher(endpoint, lambda seq: make_stats(seq + 1, started_ns=1)).run)
            await _until(pilot, lambda: not app.waiting and len(_column(app, "node")) == 4)
            tg.cancel_scope.cancel()
        await _until(pilot, lambda: app.waiting)
        assert "waiting for control plane" in str(app.query_one("#status").render())
        assert len(_column(app, "node")) == 4  # the last snapshot stays on screen
        async with anyio.create_task_group() as tg:  # the control plane comes back, one node fewer
            await tg.start(_Publisher(endpoint, lambda seq: make_stats(seq + 1, started_ns=2, gone=("t4-0",))).run)
            await _until(pilot, lambda: not app.waiting and len(_column(app, "node")) == 3)
            tg.cancel_scope.cancel()
        assert app.view.num_restarts == 1


async def test_the_status_line_names_the_router_knobs_set(make_stats):
    """The policy, then the RouterConfig fields the operator set (FleetStats.router_knobs), cut with a count."""
    import msgspec

    from tui.fleet_view import describe_router

    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=(200, 48)) as pilot:
        app.apply_stats(make_stats(1))
        await pilot.pause()
        assert "policy hardware_aware · 4/4 nodes up" in str(app.query_one("#status").render())
        knobs = {"slo_tpot_lost_to_doomed": True, "slo_tpot_s": 0.05}
        app.apply_stats(msgspec.structs.replace(make_stats(2), router_knobs=knobs))
        await pilot.pause()
        status = str(app.query_one("#status").render())
        assert "policy hardware_aware (slo_tpot_lost_to_doomed=true, slo_tpot_s=0.05) · 4/4 nodes up" in status
    many = msgspec.structs.replace(make_stats(3), router_knobs={f"knob_{i:02d}": 0.5 for i in range(20)})
    assert describe_router(many, width=40) == "hardware_aware (knob_00=0.5, knob_01=0.5, knob_02=0.5, …+17 more)"
    huge = msgspec.structs.replace(make_stats(4), router_knobs={"model_params_b": {f"m{i}": 8.0 for i in range(999)}})
    assert len(describe_router(huge, width=40)) < 60  # one long value is cut, not the whole line
    reloaded = msgspec.structs.replace(
        make_stats(5), router_knobs={"slo_ttft_s": 2.0}, router_reloads={"ok": 2, "refused": 1}
    )
    assert describe_router(reloaded) == "hardware_aware (slo_ttft_s=2.0), reloaded 2×, 1 refused"
    none_yet = msgspec.structs.replace(make_stats(6), router_reloads={"ok": 0, "refused": 0})
    assert describe_router(none_yet) == "hardware_aware"  # no reload yet: nothing said of them


async def test_the_status_line_says_when_the_control_plane_drains(make_stats):
    import msgspec

    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=(200, 48)) as pilot:
        app.apply_stats(make_stats(1))
        await pilot.pause()
        assert "DRAINING" not in str(app.query_one("#status").render())
        app.apply_stats(msgspec.structs.replace(make_stats(2), draining=True))
        await pilot.pause()
        assert "DRAINING (shutting down: new requests refused)" in str(app.query_one("#status").render())
