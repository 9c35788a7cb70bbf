"""`zoo top` shows each verifier's drafter (and its measured acceptance) in the table, the predicted TPOTs in
the detail view, and the live migrations with the KV they moved and the share of placements forecast late in
the header line."""

from __future__ import annotations

import anyio
import msgspec
import pytest
from textual.widgets import DataTable, Static

from tui.node_detail import NodeDetailScreen
from tui.zoo_top import ZooTopApp

pytestmark = pytest.mark.anyio


def _with_pair(
    stats,
    kv_bytes: int,
    migrations: int,
    late_share: float = 0.0,
    overload: bool | None = None,
    moved: int | None = None,
):
    pair = dict(spec_drafter="l4-0", spec_acceptance_rate=0.78, spec_tpot_plain_s=0.010, spec_tpot_paired_s=0.006)
    nodes = [msgspec.structs.replace(n, **pair) if n.node_id == "h100-0" else n for n in stats.nodes]
    return msgspec.structs.replace(
        stats, nodes=nodes, migrations_total={"drain:ok": migrations, "rebalance:failed": 1},
        kv_migrated_bytes_total=kv_bytes, slo_forecast_late_share=late_share, overload_mode=overload,
        tpot_lost_redirects_total=moved,
    )  # fmt: skip


async def test_drafter_column_detail_and_migrations(make_stats):
    app = ZooTopApp(None)
    async with app.run_test(size=(220, 48)) as pilot:
        app.apply_stats(_with_pair(make_stats(1), 1_000_000, 1))
        app.apply_stats(_with_pair(make_stats(2), 3_000_000, 3, 0.25, overload=False))  # 0.5 s later
        await pilot.pause()
        table = app.query_one("#nodes", DataTable)
        cells = {str(table.get_cell(row, "node")): str(table.get_cell(row, "drafter")) for row in table.rows}
        assert cells["h100-0"] == "l4-0 78%" and cells["a100-0"] == "-"
        rates = str(app.query_one("#rates", Static).render())
        assert "migrations 4 (3 ok, 4.0/s)" in rates and "KV moved 3.0 MB (4.0 MB/s)" in rates
        assert "forecast late 25%" in rates  # the latest snapshot's SLO forecast (controlplane/slo_forecast.py)
        assert "OVERLOAD MODE" not in rates
        app.apply_stats(_with_pair(make_stats(3), 3_000_000, 3, 0.75, overload=True))  # hardware_aware's, on
        await pilot.pause()
        assert "forecast late 75% (OVERLOAD MODE)" in str(app.query_one("#rates", Static).render())
        assert "TPOT lost causes moved" not in str(app.query_one("#rates", Static).render())  # the rule off
        app.apply_stats(_with_pair(make_stats(4), 3_000_000, 3, 0.75, overload=False, moved=12))  # goodput first, on
        await pilot.pause()
        assert "forecast late 75%   TPOT lost causes moved 12" in str(app.query_one("#rates", Static).render())
        await pilot.press("down", "enter")  # second row: h100-0
        with anyio.fail_after(10):
            while not isinstance(app.screen, NodeDetailScreen):
                await pilot.pause(0.02)
        facts = str(app.screen.query_one("#detail-facts").render())
        assert "drafter l4-0 78%   predicted TPOT plain 10.0 ms, paired 6.0 ms" in facts
