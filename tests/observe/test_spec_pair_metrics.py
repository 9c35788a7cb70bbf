"""The control plane's speculative-pair figures: zoo:spec_pair_info{verifier,drafter}, the predicted TPOTs and
acceptance on /metrics, and the same in FleetStats (per node) with the migrations and KV bytes moved."""

from __future__ import annotations

from types import SimpleNamespace

from observe.spec_pair_metrics import spec_pair_metrics
from observe.stats_stream import FleetObserver

PAIRS = {
    "pairs": {"h100": "l4"},
    "active": {"h100": "l4"},
    "acceptance": {"h100": 0.8},
    "predictions": {"h100": {"tpot_plain_s": 0.010, "tpot_paired_s": 0.006, "num_spec_tokens": 3, "alpha": 0.8}},
    "refusals": {},
    "num_pairs_total": 2,
    "num_unpairs_total": 1,
}


def _samples(stats: dict) -> dict[tuple, float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in spec_pair_metrics(stats) for s in f.samples}


def test_pair_metrics():
    got = _samples({"spec_pairs": PAIRS})
    assert got[("zoo:spec_pair_info", (("drafter", "l4"), ("verifier", "h100")))] == 1.0
    assert got[("zoo:spec_pair_acceptance_rate", (("drafter", "l4"), ("verifier", "h100")))] == 0.8
    assert got[("zoo:spec_pair_predicted_tpot_seconds", (("mode", "paired"), ("verifier", "h100")))] == 0.006
    assert got[("zoo:spec_pair_predicted_tpot_seconds", (("mode", "plain"), ("verifier", "h100")))] == 0.010
    assert got[("zoo:spec_pairs_total", (("event", "unpaired"),))] == 1
    assert _samples({}) == {}  # a control plane without pairing says nothing


def _row(alive: bool = True) -> dict:
    return {"alive": alive, "gpu_type": "H100", "cell": "c", "model": "m", "power_score": 1.0, "num_running": 0,
            "num_waiting": 0, "num_swapped": 0, "kv_usage": 0.0, "num_inflight": 0, "ttft_ms_p50": None,
            "ttft_ms_p99": None, "tpot_ms_p50": None, "tpot_ms_p99": None, "requests_served": 0,
            "requests_failed": 0}  # fmt: skip


def test_fleet_stats_carry_pairs_migrations_and_kv_bytes():
    stats = {
        "policy": "p", "nodes": {"h100": _row(), "l4": _row()}, "requests": {"inflight": 0}, "refused": {},
        "rejected_messages": {}, "migrations": {"drain:ok": 2}, "spec_pairs": PAIRS,
        "tokenizing": {"waiting": 3, "tokenized_total": 9},
    }  # fmt: skip
    moves = SimpleNamespace(kv_bytes_total=4096)
    cp = SimpleNamespace(stats=lambda: stats, take_events=list, hellos={}, kv_moves=moves)
    fleet = FleetObserver(cp).fleet_stats(0)
    by_id = {n.node_id: n for n in fleet.nodes}
    assert by_id["h100"].spec_drafter == "l4" and by_id["h100"].spec_acceptance_rate == 0.8
    assert (by_id["h100"].spec_tpot_plain_s, by_id["h100"].spec_tpot_paired_s) == (0.010, 0.006)
    assert by_id["l4"].spec_drafter == "" and by_id["l4"].spec_tpot_paired_s is None
    assert fleet.migrations_total == {"drain:ok": 2} and fleet.kv_migrated_bytes_total == 4096
    assert fleet.num_tokenizing == 3  # zoo top: "in flight N (3 tokenizing)"
