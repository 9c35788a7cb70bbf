"""The gateway's API keys on the control plane's /metrics (controlplane/gateway/api_keys.py's ApiKeyRing).

    zoo:api_keys                          gauge: keys the gateway accepts now
    zoo:api_key_refusals_total{reason}    counter: requests refused with 401, "missing_api_key" or "invalid_api_key"
    zoo:api_key_reloads_total{outcome}    counter: SIGHUP re-reads of --api-keys (zoo/keys_reload.py), "ok" or
                                          "refused" (the file unreadable, empty or wrong: the keys kept as they were)

A burst of invalid keys is a client misconfigured or someone guessing; a refused reload is a key rotation that did
not happen. Registered beside the gateway's other metrics when it checks keys (zoo/serve.py).
"""

from __future__ import annotations

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from controlplane.gateway.api_keys import ApiKeyRing
from observe import metrics_names as m


def api_key_metrics(ring: ApiKeyRing):
    def collect():
        yield GaugeMetricFamily(m.API_KEYS, "API keys the gateway accepts now", value=len(ring.keys.digests))
        refusals = CounterMetricFamily(
            m.API_KEY_REFUSALS, "Requests refused for their API key, by reason", labels=["reason"]
        )
        for reason, n in sorted(ring.refused.items()):
            refusals.add_metric([reason], n)
        yield refusals
        reloads = CounterMetricFamily(
            m.API_KEY_RELOADS, "Reloads of the API key file (SIGHUP), by outcome", labels=["outcome"]
        )
        for outcome, n in sorted(ring.reloads.items()):
            reloads.add_metric([outcome], n)
        yield reloads

    return collect
