"""The fleet's alerts as an Alertmanager holds them, for `zoo top --alertmanager URL`.

    fetch_alerts(http, url) ── GET /api/v2/alerts ──► parse_alerts(payload) ──► [ActiveAlert], critical first

Only Silicon Zoo's own alerts (named Zoo..., deploy/prometheus/silicon_zoo_rules.yml), and only those an operator is
being told of: active, neither silenced nor inhibited (deploy/prometheus/alertmanager.yml's inhibitions mute the
consequences of a known cause, so the cause is what shows). ``parse_alerts`` is sans-IO; a reply of another shape is
an ``AlertmanagerError`` that says what it was, and an entry without the fields an alert has is left out (counted),
so a wrong URL or a proxy's error page reads as such on the dashboard, never as "no alert".
"""

from __future__ import annotations

from dataclasses import dataclass, field

import httpx

SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}  # the rules' severities, most urgent first
ALERTS_PATH = "/api/v2/alerts"
ZOO_ALERTS = 'alertname=~"Zoo.+"'
MAX_REPLY_BYTES = 32 * 2**20  # ~10,000 alerts with their labels and annotations: past it, not read


class AlertmanagerError(Exception):
    """The Alertmanager could not be asked, or answered something that is not its list of alerts."""


@dataclass(frozen=True, slots=True)
class ActiveAlert:
    name: str
    severity: str
    summary: str
    starts_at: str  # RFC 3339, as the Alertmanager says it
    labels: dict[str, str] = field(default_factory=dict)  # the others: node, model, class, ...

    def line(self) -> str:
        where = ", ".join(f"{k}={self.labels[k]}" for k in ("model", "node", "class") if k in self.labels)
        return f"{self.severity:<8} {self.name}" + (f" ({where})" if where else "") + f": {self.summary}"


@dataclass(frozen=True, slots=True)
class AlertsReply:
    alerts: list[ActiveAlert]
    num_malformed: int = 0  # entries left out: not an object, or no alertname

    def counts(self) -> dict[str, int]:
        """Alerts by severity, in SEVERITY_ORDER (a severity the rules do not use last)."""
        out: dict[str, int] = {}
        for alert in self.alerts:
            out[alert.severity] = out.get(alert.severity, 0) + 1
        return dict(sorted(out.items(), key=lambda kv: SEVERITY_ORDER.get(kv[0], len(SEVERITY_ORDER))))


def parse_alerts(payload: object) -> AlertsReply:
    """The Alertmanager's API v2 alert list as ActiveAlerts: Silicon Zoo's, active only, critical first, then the
    oldest first."""
    if not isinstance(payload, list):
        raise AlertmanagerError(f"expected the Alertmanager's list of alerts, got {type(payload).__name__}")
    alerts, malformed = [], 0
    for item in payload:
        labels = item.get("labels") if isinstance(item, dict) else None
        name = labels.get("alertname") if isinstance(labels, dict) else None
        if not isinstance(name, str) or not all(isinstance(v, str) for v in labels.values()):
            malformed += 1  # the Alertmanager's labels are strings, always
            continue
        status = item.get("status")
        state = status.get("state", "active") if isinstance(status, dict) else "active"
        if not name.startswith("Zoo") or state != "active":
            continue
        annotations = item.get("annotations") if isinstance(item.get("annotations"), dict) else {}
        summary, starts_at = annotations.get("summary"), item.get("startsAt")
        rest = {k: v for k, v in labels.items() if k not in ("alertname", "severity")}
        alerts.append(
            ActiveAlert(
                name=name,
                severity=labels.get("severity", ""),
                summary=summary if isinstance(summary, str) else "",
                starts_at=starts_at if isinstance(starts_at, str) else "",
                labels=rest,
            )
        )
    alerts.sort(key=lambda a: (SEVERITY_ORDER.get(a.severity, len(SEVERITY_ORDER)), a.starts_at, a.name))
    return AlertsReply(alerts, malformed)


async def fetch_alerts(http: httpx.AsyncClient, url: str, timeout_s: float = 5.0) -> AlertsReply:
    """Ask the Alertmanager at ``url`` (its base URL, e.g. http://alertmanager:9093) for the fleet's active alerts."""
    params = {"active": "true", "silenced": "false", "inhibited": "false", "filter": ZOO_ALERTS}
    try:
        reply = await http.get(url.rstrip("/") + ALERTS_PATH, params=params, timeout=timeout_s)
    except httpx.HTTPError as e:
        raise AlertmanagerError(f"{url}: {type(e).__name__}: {e}") from e
    if reply.status_code != 200:
        raise AlertmanagerError(f"{url}: HTTP {reply.status_code}")
    if len(reply.content) > MAX_REPLY_BYTES:
        raise AlertmanagerError(f"{url}: a reply of {len(reply.content):,} bytes, over {MAX_REPLY_BYTES:,}")
    try:
        payload = reply.json()
    except (ValueError, RecursionError) as e:  # RecursionError: JSON nested too deep for the parser
        raise AlertmanagerError(f"{url}: the reply is not JSON") from e
    return parse_alerts(payload)
