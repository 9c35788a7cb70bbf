"""The fleet's alerts read from an Alertmanager (observe/alertmanager_alerts.py): its API v2 list parsed into active
Silicon Zoo alerts, critical first, then the oldest; another shape an error that says what it was; an entry without
an alertname left out and counted; the request's filters (active, not silenced, not inhibited, Zoo...); a reply
nested too deep or too large an error, never a crash of the dashboard. Against a real Alertmanager:
tests/observe/test_alertmanager_live.py."""

from __future__ import annotations

import httpx
import pytest

from observe.alertmanager_alerts import MAX_REPLY_BYTES, AlertmanagerError, fetch_alerts, parse_alerts


def _alert(name: str, severity: str, starts: str, state: str = "active", **labels: str) -> dict:
    return {
        "labels": {"alertname": name, "severity": severity, **labels},
        "annotations": {"summary": f"{name} summary", "runbook_url": "docs/ALERTS.md"},
        "startsAt": starts,
        "status": {"state": state, "inhibitedBy": [], "silencedBy": []},
    }


def test_active_zoo_alerts_critical_first_then_oldest():
    reply = parse_alerts([
        _alert("ZooNodeSuspect", "warning", "2026-12-07T10:00:00Z", node="a", model="m"),
        _alert("ZooRequestsFailing", "critical", "2026-12-07T11:00:00Z"),
        _alert("ZooRouterOverloadMode", "info", "2026-12-07T09:00:00Z"),
        _alert("ZooNoRoutableNode", "critical", "2026-12-07T10:30:00Z", model="m"),
        _alert("ZooKvCacheThrashing", "warning", "2026-12-07T08:00:00Z", state="suppressed"),  # inhibited
        _alert("NodeFilesystemFull", "critical", "2026-12-07T08:00:00Z"),  # not the fleet's
        {"labels": {"severity": "critical"}},  # no alertname
        "not an alert",
        {"labels": {"alertname": "ZooDeep", "node": [[[["x"]]]]}},  # a label that is not a string
        {"labels": {"alertname": "ZooOdd", "severity": "warning"}, "annotations": {"summary": 3}, "startsAt": None},
    ])  # fmt: skip
    assert [a.name for a in reply.alerts] == [
        "ZooNoRoutableNode", "ZooRequestsFailing", "ZooOdd", "ZooNodeSuspect", "ZooRouterOverloadMode",
    ]  # fmt: skip
    assert reply.num_malformed == 3
    assert reply.counts() == {"critical": 2, "warning": 2, "info": 1}
    odd = reply.alerts[2]
    assert (odd.summary, odd.starts_at) == ("", "")  # fields of the wrong type read as absent
    suspect = reply.alerts[3]
    assert suspect.labels == {"node": "a", "model": "m"} and suspect.summary == "ZooNodeSuspect summary"
    assert suspect.line() == "warning  ZooNodeSuspect (model=m, node=a): ZooNodeSuspect summary"
    assert parse_alerts([]).alerts == [] and parse_alerts([]).counts() == {}


@pytest.mark.parametrize("payload", [{"status": "error"}, "x", None, 3])
def test_a_reply_of_another_shape_is_an_error_not_no_alert(payload):
    with pytest.raises(AlertmanagerError, match="expected the Alertmanager's list of alerts"):
        parse_alerts(payload)


@pytest.mark.anyio
async def test_the_request_asks_for_the_fleets_active_alerts_only():
    asked: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        asked.append(request)
        if request.url.host == "down":
            raise httpx.ConnectError("refused")
        if request.url.host == "proxy":
            return httpx.Response(502, text="<html>bad gateway</html>")
        if request.url.host == "html":
            return httpx.Response(200, text="<html>login</html>")
        if request.url.host == "deep":
            return httpx.Response(200, text="[" * 100_000 + "]" * 100_000)
        if request.url.host == "huge":
            return httpx.Response(200, text="[" + " " * (MAX_REPLY_BYTES + 1) + "]")
        return httpx.Response(200, json=[_alert("ZooNodeSuspect", "warning", "2026-12-07T10:00:00Z")])

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        reply = await fetch_alerts(http, "http://am:9093/")
        assert [a.name for a in reply.alerts] == ["ZooNodeSuspect"]
        params = asked[0].url.params
        assert asked[0].url.path == "/api/v2/alerts"
        assert (params["active"], params["silenced"], params["inhibited"]) == ("true", "false", "false")
        assert params["filter"] == 'alertname=~"Zoo.+"'
        for host, message in (("down", "ConnectError"), ("proxy", "HTTP 502"), ("html", "not JSON"),
                              ("deep", "not JSON"), ("huge", "bytes, over")):  # fmt: skip
            with pytest.raises(AlertmanagerError, match=message):
                await fetch_alerts(http, f"http://{host}:9093")
