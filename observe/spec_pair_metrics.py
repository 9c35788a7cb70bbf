"""The control plane's speculative-pair metrics, from ``stats()["spec_pairs"]`` (controlplane/spec_pairing.py).

zoo:spec_pair_info{verifier, drafter} 1                  pairs the control plane made
zoo:spec_pair_acceptance_rate{verifier, drafter}         measured by the verifier since it paired
zoo:spec_pair_predicted_tpot_seconds{verifier, mode}     the cost model's TPOT, plain vs paired
zoo:spec_pairs_total{event}                              pairs made and broken
"""

from __future__ import annotations

from collections.abc import Iterable

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from observe import metrics_names as m


def spec_pair_metrics(stats: dict) -> Iterable[Metric]:
    pairs = stats.get("spec_pairs")
    if not pairs:
        return
    info = GaugeMetricFamily(m.SPEC_PAIR_INFO, "Speculative pairs: this verifier drafts with this drafter node.",
                             labels=["verifier", "drafter"])  # fmt: skip
    acceptance = GaugeMetricFamily(m.SPEC_PAIR_ACCEPTANCE, "Draft acceptance rate the verifier measured since it "
                                   "paired.", labels=["verifier", "drafter"])  # fmt: skip
    for verifier, drafter in sorted(pairs["pairs"].items()):
        info.add_metric([verifier, drafter], 1.0)
        if verifier in pairs["acceptance"]:
            acceptance.add_metric([verifier, drafter], pairs["acceptance"][verifier])
    tpot = GaugeMetricFamily(m.SPEC_PAIR_PREDICTED_TPOT, "Predicted TPOT of a verifier without and with its best "
                             "drafter.", labels=["verifier", "mode"])  # fmt: skip
    for verifier, p in sorted(pairs["predictions"].items()):
        tpot.add_metric([verifier, "plain"], p["tpot_plain_s"])
        tpot.add_metric([verifier, "paired"], p["tpot_paired_s"])
    events = CounterMetricFamily(m.SPEC_PAIRS, "Speculative pairs made and broken.", labels=["event"])
    events.add_metric(["paired"], pairs["num_pairs_total"])
    events.add_metric(["unpaired"], pairs["num_unpairs_total"])
    yield from (info, acceptance, tpot, events)
