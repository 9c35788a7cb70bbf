"""`zoo bench fuzz`: its cases are deterministic and cover every mutation; a small campaign against a real
control plane (child processes) ends with 0 crashes and the control plane's own rejection counters."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from bench.fuzz import FuzzConfig, fuzz_campaign
from bench.fuzz_cases import WIRE_MUTATIONS, WireCases
from bench.fuzz_http_cases import HTTP_MUTATIONS, HttpCases


def _wire(seed: int, port: str, n: int) -> list:
    cases = WireCases(random.Random(seed), port, frozenset({"fuzz-node"}))
    return [cases.next() for _ in range(n)]


def test_the_same_seed_gives_the_same_cases():
    assert _wire(7, "clients", 300) == _wire(7, "clients", 300)
    assert _wire(7, "clients", 300) != _wire(8, "clients", 300)
    a, b = HttpCases(random.Random(3)), HttpCases(random.Random(3))
    assert [a.next() for _ in range(200)] == [b.next() for _ in range(200)]


@pytest.mark.parametrize("port", ["clients", "agents"])
def test_wire_cases_cover_every_mutation_and_never_claim_a_forbidden_node(port):
    cases = _wire(1, port, 3_000)
    kinds = Counter(kind for kind, _ in cases)
    assert set(kinds) == set(WIRE_MUTATIONS)
    for _, frames in cases:
        assert all(isinstance(f, bytes) for f in frames)
    hellos = WireCases(random.Random(2), port, frozenset({"fuzz-node"}))
    for _ in range(2_000):
        _, msg = hellos.base()
        assert getattr(msg, "node_id", None) != "fuzz-node"


def test_http_cases_cover_every_mutation_and_every_generation_route():
    cases = HttpCases(random.Random(5))
    drawn = [cases.next() for _ in range(2_000)]
    assert {case.kind for case in drawn} == set(HTTP_MUTATIONS)
    routes = {"/v1/completions", "/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens", "/v1/responses"}
    routes.add("/v1/embeddings")
    assert routes <= {case.path for case in drawn if case.kind in ("valid", "tools")}


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_small_campaign_has_no_crash(anyio_backend):
    config = FuzzConfig(wire_cases=1_000, http_cases=200, wire_batch=500, http_batch=100, http_concurrency=4)
    report = await fuzz_campaign(config, say=lambda *a: None)
    assert report["crashes"] == 0 and report["exited"] == []
    assert report["wire"]["cases"] == 1_000 and report["wire"]["liveness_checks"] == 2
    assert report["http"]["cases"] == 200 and report["http"]["liveness_checks"] == 2
    assert report["http"]["internal_errors"] == []
    counters = report["controlplane_counters"]
    assert counters["malformed_messages"]["clients"]["malformed"] > 0
    assert counters["malformed_messages"]["agents"]["malformed"] > 0
    assert sum(report["wire"]["replies_by_port"]["clients"].values()) > 0
    # every request was traced by both processes (trace headers valid, malformed or absent) and exported
    assert report["trace_exports_received"] > 0
