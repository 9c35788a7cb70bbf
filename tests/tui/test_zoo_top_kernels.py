"""`zoo top` shows each node's decode roofline fraction in the table and its kernels and serving digest in the detail
view."""

from __future__ import annotations

import anyio
import msgspec
import pytest
from textual.widgets import DataTable

from tui.node_detail import NodeDetailScreen
from tui.zoo_top import ZooTopApp

# snapshots are applied by the test itself: the app must never call them stale, however slow the machine
FED_BY_HAND = 1e9

pytestmark = pytest.mark.anyio


def _with_kernels(stats):
    nodes = [
        msgspec.structs.replace(
            n,
            kernels=f"flash_sdpa kv=auto graphs=on ({n.node_id})",
            decode_roofline_fraction=0.42,
            config_digest="3f2a9c1e55aa0b17",
            profiling="recording",
        )
        if n.node_id == "h100-0"
        else n
        for n in stats.nodes
    ]
    return msgspec.structs.replace(stats, nodes=nodes)


async def test_roofline_column_and_kernels_in_the_detail_view(make_stats):
    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=(200, 48)) as pilot:
        app.apply_stats(_with_kernels(make_stats(1)))
        await pilot.pause()
        table = app.query_one("#nodes", DataTable)
        cells = {str(table.get_cell(row, "node")): str(table.get_cell(row, "roofline")) for row in table.rows}
        assert cells["h100-0"] == "42" and cells["a100-0"] == "-"  # "-": not measured
        await pilot.press("down", "enter")  # second row: h100-0
        with anyio.fail_after(10):
            while not isinstance(app.screen, NodeDetailScreen):
                await pilot.pause(0.02)
        facts = str(app.screen.query_one("#detail-facts").render())
        assert "kernels flash_sdpa kv=auto graphs=on (h100-0)" in facts
        assert "decode roofline 42%" in facts
        assert "config 3f2a9c1e" in facts  # its serving digest (nodes alike share it), as its fingerprint shows it
        assert "profiler recording" in facts  # a trace growing there (POST /start_profile)
