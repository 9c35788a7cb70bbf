"""A request with OpenAI's predicted output at the control plane (controlplane/router/prediction_affinity.py): the
nodes that speculate (their hello says so) are offered to the policy alone while one of them is idle; otherwise,
and for every other request, all are; the subset keeps the registry's change mark."""

from __future__ import annotations

from backends.sim.engine import SimTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.registry import ClusterRegistry
from controlplane.request_intake import Placement, place_request
from controlplane.router.prediction_affinity import SPECULATING, prefer_speculating
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.sampling_params import SamplingParams
from transport.messages import ClientGenerate

PROMPT = list(range(10, 50))


class _FirstById:
    name = "first"

    def choose(self, request, snapshot):
        self.offered = sorted(v.node_id for v in snapshot.nodes)
        self.changes = snapshot.changes
        return self.offered[0] if self.offered else None


def _place(registry, policy, prediction=(), exclude=()):
    sampling = SamplingParams(max_tokens=4, prediction_token_ids=tuple(prediction))
    msg = ClientGenerate(request_id="r", model="m", prompt_token_ids=PROMPT, sampling=sampling)
    return place_request(
        msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry, policy=policy,
        admission=AdmissionControl(AdmissionConfig()), router=RouterConfig(), exclude=exclude,
    )  # fmt: skip


def test_a_predicted_output_goes_where_a_node_speculates_while_one_is_idle(make_hello, make_report):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))
    registry.join(make_hello("b", speculative="ngram"))
    registry.join(make_hello("c", speculative="model"))
    policy = _FirstById()
    placed = _place(registry, policy, prediction=[7, 8, 9])
    assert isinstance(placed, Placement) and placed.node_id == "b" and policy.offered == ["b", "c"]
    full = registry.snapshot(model="m").changes
    assert policy.changes == full.subgroup(SPECULATING)  # a hello fact: the policy's tables stay incremental
    assert _place(registry, policy).node_id == "a" and policy.offered == ["a", "b", "c"]  # no prediction: all
    registry.report(make_report("b", num_waiting=2))
    assert _place(registry, policy, prediction=[7]).node_id == "b" and policy.offered == ["b", "c"]  # c is idle
    registry.report(make_report("c", num_waiting=1))  # every speculating node queues: the policy weighs all
    assert _place(registry, policy, prediction=[7]).node_id == "a" and policy.offered == ["a", "b", "c"]
    registry.report(make_report("c"))
    assert _place(registry, policy, prediction=[7], exclude=("c",)).node_id == "a"  # b queues, c is excluded
    assert policy.offered == ["a", "b"] and policy.changes is None


def test_a_fleet_without_speculating_nodes_offers_them_all(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    for node_id in "ab":
        registry.join(make_hello(node_id))
    policy = _FirstById()
    assert _place(registry, policy, prediction=[1, 2]).node_id == "a" and policy.offered == ["a", "b"]
    snapshot = registry.snapshot(model="m")
    assert prefer_speculating(snapshot) is snapshot
