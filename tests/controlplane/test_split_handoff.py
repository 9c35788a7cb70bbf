"""The control plane's split policy (controlplane/split_handoff.py) without processes: roles from hellos, the
hand-off asked at the first token, the landing placed on the decode node."""

from __future__ import annotations

from controlplane.router.router_config import RouterConfig
from controlplane.split_handoff import SplitHandoffPolicy, make_control_plane_policy


class _Registry:
    def __init__(self, hellos):
        self.hellos = hellos

    def __contains__(self, node_id):
        return node_id in self.hellos

    def hello(self, node_id):
        return self.hellos[node_id]


class _Migrations:
    def __init__(self, accept: bool):
        self.accept = accept
        self.asked = []

    def hand_off(self, request_id, source, target):
        self.asked.append((request_id, source, target))
        return self.accept


def _policy(make_hello, accept=True):
    policy = make_control_plane_policy(RouterConfig(policy="pd_split", default_model_params_b=8.0))
    assert isinstance(policy, SplitHandoffPolicy)
    hellos = {
        "p": make_hello("p", gpu="h100-sxm", role="prefill"),
        "d": make_hello("d", gpu="l4", role="decode"),
        "x": make_hello("x", gpu="l4"),  # an older agent: no role said, "both"
    }
    migrations = _Migrations(accept)
    policy.attach(_Registry(hellos), migrations)
    return policy, migrations


def test_prefill_then_hand_off_then_land_on_the_decode_node(
    make_hello, make_node_view, make_snapshot, make_route_request
):
    policy, migrations = _policy(make_hello)
    views = (make_node_view("p", "h100-sxm"), make_node_view("d", "l4"))
    request = make_route_request(num_prompt_tokens=1000, max_tokens=50, request_id="r1")
    assert policy.choose(request, make_snapshot(*views)) == "p"
    assert policy.kv_bytes_per_token == 4096 // 16  # from the hello's KV geometry
    policy.on_routed(request, "p")
    policy.on_first_token("r1", "p")
    assert migrations.asked == [("r1", "p", "d")] and policy.num_handoffs_asked == 1
    policy.on_finished("r1", "p")  # detached from p for the move
    # RequestPath.migrated places it again with only the target in the snapshot: the landing goes there
    landing = make_route_request(num_prompt_tokens=1001, max_tokens=49, request_id="r1")
    assert policy.choose(landing, make_snapshot(views[1])) == "d"
    policy.on_routed(landing, "d")
    policy.on_first_token("r1", "d")
    assert len(migrations.asked) == 1  # no second move


def test_a_refused_hand_off_decodes_where_it_prefilled(make_hello, make_node_view, make_snapshot, make_route_request):
    policy, migrations = _policy(make_hello, accept=False)
    views = (make_node_view("p", "h100-sxm"), make_node_view("d", "l4"))
    request = make_route_request(num_prompt_tokens=1000, max_tokens=50, request_id="r1")
    assert policy.choose(request, make_snapshot(*views)) == "p"
    policy.on_routed(request, "p")
    policy.on_first_token("r1", "p")
    assert migrations.asked == [("r1", "p", "d")] and policy.num_handoffs_asked == 0
    assert policy.decode_target("r1") is None and policy._pending == {"d": 0}


def test_roles_come_from_hellos_and_unknown_nodes_are_both(make_hello, make_node_view):
    policy, _ = _policy(make_hello)
    assert [policy.role(make_node_view(n)) for n in ("p", "d", "x", "new")] == ["prefill", "decode", "both", "both"]
    assert make_control_plane_policy(RouterConfig(policy="round_robin")).name == "round_robin"
