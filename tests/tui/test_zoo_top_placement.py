"""`zoo top`'s node detail shows where the node is (its hello's host and rack), "not said" when it told none."""

from __future__ import annotations

import anyio
import msgspec
import pytest

from tui.node_detail import NodeDetailScreen
from tui.zoo_top import ZooTopApp

FED_BY_HAND = 1e9  # snapshots are applied by the test itself: never stale

pytestmark = pytest.mark.anyio


async def _facts(app, pilot, row_presses) -> str:
    await pilot.press(*row_presses, "enter")
    with anyio.fail_after(10):
        while not isinstance(app.screen, NodeDetailScreen):
            await pilot.pause(0.02)
    facts = str(app.screen.query_one("#detail-facts").render())
    await pilot.press("escape")
    with anyio.fail_after(10):
        while isinstance(app.screen, NodeDetailScreen):
            await pilot.pause(0.02)
    return facts


async def test_node_detail_shows_host_and_rack(make_stats):
    stats = make_stats(1)
    nodes = [msgspec.structs.replace(n, host="box-7", rack="r12") if n.node_id == "h100-0" else n for n in stats.nodes]
    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=(200, 48)) as pilot:
        app.apply_stats(msgspec.structs.replace(stats, nodes=nodes))
        await pilot.pause()
        assert "host box-7   rack r12" in await _facts(app, pilot, ("down",))  # second row: h100-0
        assert "host not said   rack none" in await _facts(app, pilot, ("up",))  # first row: a100-0, none said
