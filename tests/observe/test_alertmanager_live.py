"""deploy/prometheus/alertmanager.yml in a real Alertmanager (0.25, Debian's binary), its receivers pointed at a
webhook sink in the test: an alert of each severity reaches its receiver (critical the pager, warning the chat, info
the tickets), and each inhibition rule mutes what it should and only that (the overload mode by the forecast of the
same control plane, not another's; the capacity refusals by a model with no routable node; every other alert by the
control plane down, which itself stays); and what `zoo top --alertmanager` reads from it."""

from __future__ import annotations

import datetime
import time

import anyio
import httpx
import pytest

from tests.observe.alert_pipeline import WebhookSink, running_alertmanager

CP = {"job": "zoo-controlplane", "instance": "cp:8000"}
DEADLINE_S = 60.0


@pytest.fixture
def sink():
    webhook = WebhookSink()
    try:
        yield webhook
    finally:
        webhook.close()


def _post(base: str, alertname: str, severity: str, **labels: str) -> None:
    now = datetime.datetime.now(datetime.UTC).isoformat()
    alert = {"labels": {"alertname": alertname, "severity": severity, **labels}, "startsAt": now}
    httpx.post(f"{base}/api/v2/alerts", json=[alert], timeout=5).raise_for_status()


def _until(what: str, check):
    deadline = time.monotonic() + DEADLINE_S
    while not (result := check()):
        if time.monotonic() > deadline:
            pytest.fail(f"never: {what}")
        time.sleep(0.1)
    return result


def _state(base: str, alertname: str, **labels: str) -> str:
    """The alert's state in the Alertmanager: active, or suppressed (inhibited)."""
    matchers = [f'alertname="{alertname}"', *(f'{k}="{v}"' for k, v in labels.items())]
    alerts = httpx.get(f"{base}/api/v2/alerts", params={"filter": matchers}, timeout=5).json()
    (alert,) = alerts
    return alert["status"]["state"]


def test_each_severity_reaches_its_receiver_and_the_inhibitions_mute_their_targets(tmp_path, sink):
    with running_alertmanager(tmp_path, sink) as am:
        _post(am, "ZooRequestsFailing", "critical")
        _post(am, "ZooNodeSuspect", "warning", node="a", model="m", gpu_type="L4", cell="west", state="suspect", **CP)
        _post(am, "ZooRouterOverloadMode", "info", **CP)
        for receiver, alertname in (("pager", "ZooRequestsFailing"), ("chat", "ZooNodeSuspect"),
                                    ("tickets", "ZooRouterOverloadMode")):  # fmt: skip
            _until(f"{alertname} at {receiver}", lambda r=receiver, a=alertname: any(
                x["labels"]["alertname"] == a for x in sink.alerts(r)))  # fmt: skip
        assert {x["labels"]["alertname"] for x in sink.alerts("pager")} == {"ZooRequestsFailing"}
        assert {x["labels"]["alertname"] for x in sink.alerts("chat")} == {"ZooNodeSuspect"}
        assert {x["labels"]["alertname"] for x in sink.alerts("tickets")} == {"ZooRouterOverloadMode"}

        # the forecast of the same control plane mutes its overload mode; another control plane's stays
        _post(am, "ZooRouterOverloadMode", "info", job="zoo-controlplane", instance="other:8000")
        _post(am, "ZooSloForecastLate", "warning", **CP)
        _until(
            "the overload mode muted", lambda: _state(am, "ZooRouterOverloadMode", instance="cp:8000") == "suppressed"
        )
        assert _state(am, "ZooRouterOverloadMode", instance="other:8000") == "active"

        _post(am, "ZooRequestsRefusedForCapacity", "warning")
        _until("the refusals active", lambda: _state(am, "ZooRequestsRefusedForCapacity") == "active")
        _post(am, "ZooNoRoutableNode", "critical", model="m")
        _until("the refusals muted", lambda: _state(am, "ZooRequestsRefusedForCapacity") == "suppressed")
        assert _state(am, "ZooNoRoutableNode") == "active"

        _post(am, "ZooControlPlaneDown", "critical", **CP)
        for alertname, labels in (("ZooNodeSuspect", {}), ("ZooRequestsFailing", {}), ("ZooNoRoutableNode", {}),
                                  ("ZooRouterOverloadMode", {"instance": "other:8000"})):  # fmt: skip
            _until(f"{alertname} muted", lambda a=alertname, k=labels: _state(am, a, **k) == "suppressed")
        assert _state(am, "ZooControlPlaneDown") == "active"
        _until("the control plane's page", lambda: any(
            x["labels"]["alertname"] == "ZooControlPlaneDown" for x in sink.alerts("pager")))  # fmt: skip


@pytest.mark.anyio
async def test_zoo_top_reads_the_active_fleet_alerts_from_a_real_alertmanager(tmp_path, sink):
    """observe/alertmanager_alerts.py against the real API: the fleet's alerts only, critical first, an inhibited
    one left out (its cause shown), a silenced one left out."""
    from observe.alertmanager_alerts import fetch_alerts

    with running_alertmanager(tmp_path, sink) as am:
        _post(am, "ZooNodeSuspect", "warning", node="a", model="m")
        _post(am, "NodeFilesystemFull", "critical", instance="host:9100")  # not the fleet's
        _post(am, "ZooRequestsRefusedForCapacity", "warning")
        _post(am, "ZooNoRoutableNode", "critical", model="m")  # inhibits the refusals
        _post(am, "ZooGcPausesLong", "info", instance="a:9100")
        silence = {
            "matchers": [{"name": "alertname", "value": "ZooGcPausesLong", "isRegex": False, "isEqual": True}],
            "startsAt": datetime.datetime.now(datetime.UTC).isoformat(),
            "endsAt": (datetime.datetime.now(datetime.UTC) + datetime.timedelta(hours=1)).isoformat(),
            "createdBy": "test", "comment": "known",
        }  # fmt: skip
        httpx.post(f"{am}/api/v2/silences", json=silence, timeout=5).raise_for_status()
        async with httpx.AsyncClient() as http:
            deadline = time.monotonic() + DEADLINE_S
            while True:
                names = [a.name for a in (await fetch_alerts(http, am)).alerts]
                if names == ["ZooNoRoutableNode", "ZooNodeSuspect"] or time.monotonic() > deadline:
                    break
                await anyio.sleep(0.1)
            assert names == ["ZooNoRoutableNode", "ZooNodeSuspect"]
            reply = await fetch_alerts(http, am)
            assert reply.num_malformed == 0 and reply.counts() == {"critical": 1, "warning": 1}
            assert reply.alerts[1].labels == {"node": "a", "model": "m"}
