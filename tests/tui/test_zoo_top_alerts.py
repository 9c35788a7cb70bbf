"""`zoo top --alertmanager URL`: the fleet's active alerts under the rates, asked every few seconds through the
callable given (a recorder here; observe/alertmanager_alerts.py against a real Alertmanager:
tests/observe/test_alertmanager_live.py): the count by severity, then the first five, critical first, the rest
counted; none; an Alertmanager that does not answer said as such, then the alerts again once it does; no line at all
without --alertmanager."""

from __future__ import annotations

import anyio
import pytest
from textual.widgets import Static

from observe.alertmanager_alerts import ActiveAlert, AlertmanagerError, AlertsReply
from tui.cli import add_top_args
from tui.zoo_top import ZooTopApp

pytestmark = pytest.mark.anyio

FED_BY_HAND = 1e9


def _alerts(*severities: str) -> AlertsReply:
    return AlertsReply([
        ActiveAlert(f"ZooAlert{i}", severity, f"summary {i}", f"2026-12-07T10:0{i}:00Z", {"node": f"n{i}"})
        for i, severity in enumerate(severities)
    ], num_malformed=0)  # fmt: skip


def _text(app: ZooTopApp) -> str:
    return str(app.query_one("#alerts", Static).render())


async def _until(pilot, predicate, timeout_s: float = 10.0) -> None:
    with anyio.fail_after(timeout_s):
        while not predicate():
            await pilot.pause(0.02)


async def test_the_active_alerts_show_critical_first_and_the_rest_counted():
    replies = [_alerts("critical", "critical", "warning", "warning", "warning", "info", "info")]

    async def alerts() -> AlertsReply:
        return replies[-1]

    app = ZooTopApp(None, stale_after_s=FED_BY_HAND, alerts=alerts, alerts_every_s=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        await _until(pilot, lambda: "active" in _text(app))
        lines = _text(app).splitlines()
        assert lines[0] == "alerts: 7 active (2 critical, 3 warning, 2 info)"
        assert lines[1] == "  critical ZooAlert0 (node=n0): summary 0"
        assert len(lines) == 1 + 5 + 1 and lines[-1] == "  ... 2 more"
        assert app.query_one("#alerts").has_class("critical")
        replies.append(_alerts())  # all resolved
        await _until(pilot, lambda: _text(app) == "alerts: none active")
        assert not app.query_one("#alerts").has_class("critical")


async def test_an_alertmanager_that_does_not_answer_is_said_and_then_recovers():
    answers: list[AlertsReply | Exception] = [AlertmanagerError("http://am:9093: HTTP 502")]

    async def alerts() -> AlertsReply:
        if isinstance(answers[-1], Exception):
            raise answers[-1]
        return answers[-1]

    app = ZooTopApp(None, stale_after_s=FED_BY_HAND, alerts=alerts, alerts_every_s=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        await _until(pilot, lambda: "did not answer" in _text(app))
        assert _text(app) == "alerts: the Alertmanager did not answer: http://am:9093: HTTP 502"
        assert app.query_one("#alerts").has_class("error")
        answers.append(AlertsReply([], num_malformed=2))
        await _until(pilot, lambda: _text(app) == "alerts: none active (2 entries unreadable)")
        assert not app.query_one("#alerts").has_class("error")


async def test_without_an_alertmanager_there_is_no_alerts_line():
    app = ZooTopApp(None, stale_after_s=FED_BY_HAND)
    async with app.run_test(size=(160, 48)) as pilot:
        await pilot.pause()
        widget = app.query_one("#alerts", Static)
        assert widget.has_class("absent") and widget.styles.display == "none"


def test_the_flag_takes_an_http_url_only():
    import argparse

    parser = argparse.ArgumentParser()
    add_top_args(parser)
    assert parser.parse_args(["--alertmanager", "http://127.0.0.1:9093"]).alertmanager == "http://127.0.0.1:9093"
    assert parser.parse_args([]).alertmanager is None
    for bad in ("127.0.0.1:9093", "ftp://am", "http://", "http://am:port"):
        with pytest.raises(SystemExit):
            parser.parse_args(["--alertmanager", bad])


async def test_the_alerts_go_on_while_a_node_detail_is_open(make_stats):
    """A poll that ends while another screen is shown updates the line all the same."""
    from tui.node_detail import NodeDetailScreen

    replies = [_alerts("warning")]

    async def alerts() -> AlertsReply:
        return replies[-1]

    app = ZooTopApp(None, stale_after_s=FED_BY_HAND, alerts=alerts, alerts_every_s=0.05)
    async with app.run_test(size=(160, 48)) as pilot:
        app.apply_stats(make_stats(1))
        await _until(pilot, lambda: "1 active" in _text(app))
        await pilot.press("enter")
        await _until(pilot, lambda: isinstance(app.screen, NodeDetailScreen))
        replies.append(_alerts("critical", "warning"))
        await _until(pilot, lambda: "2 active" in _text(app))
        assert isinstance(app.screen, NodeDetailScreen) and app._alerts_line.has_class("critical")
