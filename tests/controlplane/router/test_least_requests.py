from __future__ import annotations

from controlplane.router.policies import make_policy


def test_fewest_outstanding_wins_ties_by_node_id(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("least_requests")
    snap = make_snapshot(
        make_node_view("c", num_inflight=1),
        make_node_view("b", num_inflight=1),
        make_node_view("a", num_inflight=3),
    )
    assert policy.choose(make_route_request(), snap) == "b"


def test_falls_back_to_the_report(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("least_requests")
    snap = make_snapshot(
        make_node_view("a", num_inflight=0, num_running=5, num_waiting=2),  # routed by someone else
        make_node_view("b", num_inflight=3),
    )
    assert policy.choose(make_route_request(), snap) == "b"


def test_skips_unfit_nodes_and_answers_none(make_node_view, make_snapshot, make_route_request):
    policy = make_policy("least_requests")
    snap = make_snapshot(make_node_view("idle", max_model_len=64), make_node_view("busy", num_inflight=9))
    assert policy.choose(make_route_request(num_prompt_tokens=100), snap) == "busy"
    assert policy.choose(make_route_request(num_prompt_tokens=20), snap) == "idle"
    assert policy.choose(make_route_request(num_prompt_tokens=9000), snap) is None
    assert policy.choose(make_route_request(), make_snapshot()) is None
