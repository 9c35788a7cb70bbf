"""A router reload (controlplane/router_reload.py): new knobs on a running control plane without a restart. The
knobs file as zoo controlplane reads it (JSON, a zoo.toml's [controlplane.router]) and every way it can be wrong;
hardware_aware rebuilt under the new settings with what it learnt carried over and the old instance detached from
the registry (the control plane reloading it: tests/observe/test_router_reload_exported.py)."""

from __future__ import annotations

import pytest

from controlplane.registry import ClusterRegistry
from controlplane.router.policies.hardware_aware import HardwareAwarePolicy
from controlplane.router.router_config import RouterConfig
from controlplane.router_reload import MAX_KNOBS_FILE_BYTES, read_knobs_file
from engine.clock import ManualClock

GPUS = ("h100-sxm", "a100-80gb", "l4", "t4")


# -- the knobs file -------------------------------------------------------------------------------


def test_a_knobs_file_is_a_json_object_or_a_toml_router_table(tmp_path):
    as_json = tmp_path / "knobs.json"
    as_json.write_text('{"slo_ttft_s": 2, "slo_tpot_lost_to_doomed": true}')
    assert read_knobs_file(as_json) == {"slo_ttft_s": 2.0, "slo_tpot_lost_to_doomed": True}
    zoo_toml = tmp_path / "zoo.toml"  # a whole zoo.toml: its [controlplane.router] table
    zoo_toml.write_text('[controlplane]\npolicy = "hardware_aware"\n[controlplane.router]\nslo_tpot_s = 0.05\n'
                        '[[agents]]\nnode_id = "a"\n')  # fmt: skip
    assert read_knobs_file(zoo_toml) == {"slo_tpot_s": 0.05}
    no_table = tmp_path / "plain.toml"
    no_table.write_text('[controlplane]\npolicy = "hardware_aware"\n')
    assert read_knobs_file(no_table) == {}  # every knob at its default
    agents_only = tmp_path / "agents.toml"  # a zoo.toml of agents alone: no knobs, its sections not taken for any
    agents_only.write_text('[[agents]]\nnode_id = "a"\n[[cells]]\nname = "c"\n')
    assert read_knobs_file(agents_only) == {}


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("k.json", "{not json", "is not JSON"),
        ("k.json", '{"policy": "llm_d"}', "not a settable RouterConfig field: 'policy'"),
        ("k.json", '{"slo_tpot_s": -1}', "slo_tpot_s must be > 0"),
        ("k.json", "[" * 100_000 + "]" * 100_000, "is not JSON"),  # deep: refused, not a RecursionError
        ("k.json", b"\xff\xfe{}", "not UTF-8 text"),
        ("k.toml", "x = [" * 50_000, "invalid TOML"),
        ("k.toml", '[controlplane]\nrouter = "fast"\n', "must be tables"),
        ("k.toml", "tpot_weight = 0.3\n", "tpot_weight: router knobs go under \\[controlplane.router\\]"),
        ("k.toml", "[controlplane.router]\nslo_ttft_s = 1979-05-27\n", "Expected `float`"),
    ],
)
def test_a_bad_knobs_file_is_a_clear_error_naming_it(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    with pytest.raises(ValueError, match=message) as e:
        read_knobs_file(path)
    assert str(path) in str(e.value)


def test_a_missing_or_huge_knobs_file_is_refused(tmp_path):
    with pytest.raises(ValueError, match="cannot read it"):
        read_knobs_file(tmp_path / "none.json")
    huge = tmp_path / "huge.json"
    huge.write_text('{"tpot_weight": 0.3' + " " * MAX_KNOBS_FILE_BYTES + "}")
    with pytest.raises(ValueError, match="more than a knobs file's"):
        read_knobs_file(huge)


# -- hardware_aware, reconfigured -------------------------------------------------------------------


def _registry(make_hello, num_nodes: int = 8) -> ClusterRegistry:
    registry = ClusterRegistry(ManualClock())
    for k in range(num_nodes):
        registry.join(make_hello(f"n{k}", gpu=GPUS[k % len(GPUS)]))
    return registry


def test_reconfigured_decides_as_a_new_policy_would_and_keeps_what_it_learnt(make_hello, make_route_request):
    registry = _registry(make_hello)
    old = HardwareAwarePolicy(RouterConfig(slo_tpot_lost_to_doomed=True))
    prompt = make_route_request(num_prompt_tokens=800, block_hashes=(11, 12, 13), request_id="r0")
    node = old.choose(prompt, registry.snapshot(model="m"))
    old.on_routed(prompt, node)
    registry.on_routed(node, "r0", 800)
    old.tpot_lost.moved = 5
    log = registry.snapshot(model="m").changes.log
    assert len(log._watchers) == 1
    config = RouterConfig(slo_ttft_s=0.2, slo_tpot_s=0.05, slo_tpot_lost_to_doomed=True, overload_window_s=5.0)
    new = old.reconfigured(config)
    assert new.config is config and new is not old
    assert new._index is old._index and new._index.match((11, 12, 13)) == {node: 3}  # the prefix index carried
    assert new.tpot_lost.moved == 5  # a counter on /metrics: it does not fall back to 0
    assert new.overload is not old.overload  # another window: a detector of its own
    assert len(log._watchers) == 0  # the old one no longer derives rows as the registry logs views
    fresh = HardwareAwarePolicy(config)
    for k in range(40):  # no prefix shared: the same choices as a policy started under the new settings
        request = make_route_request(num_prompt_tokens=100 + 97 * k, max_tokens=8 + 40 * k, request_id=f"q{k}")
        snapshot = registry.snapshot(model="m")
        chosen = new.choose(request, snapshot)
        assert chosen == fresh.choose(request, snapshot)
        registry.on_routed(chosen, request.request_id, request.num_prompt_tokens)
    assert len(log._watchers) == 2  # new and fresh, each once
    same = new.reconfigured(RouterConfig(slo_ttft_s=0.3, overload_window_s=5.0, prefix_max_blocks_per_node=2))
    assert same.overload is new.overload  # the same overload settings: its window and hold go on
    assert same._index is old._index and same._index.max_blocks_per_node == 2  # its new bound, met at next insert
    same.on_routed(make_route_request(block_hashes=(21, 22, 23), request_id="r9"), node)
    assert same._index.num_blocks(node) == 2


def test_our_other_policies_reload_in_place(make_hello, make_route_request):
    """round_robin and least_requests read no knob: they go on as they are; prefix_aware takes its new thresholds
    and keeps its prefix index under the new bound."""
    from controlplane.router.policies import make_policy

    for name in ("round_robin", "least_requests"):
        policy = make_policy(name, RouterConfig(policy=name))
        assert policy.reconfigured(RouterConfig(policy=name, slo_ttft_s=2.0)) is policy
    registry = _registry(make_hello)
    policy = make_policy("prefix_aware", RouterConfig(policy="prefix_aware"))
    request = make_route_request(block_hashes=(1, 2, 3), request_id="r0")
    node = policy.choose(request, registry.snapshot(model="m"))
    policy.on_routed(request, node)
    config = RouterConfig(policy="prefix_aware", prefix_load_penalty_blocks=7.0, prefix_max_blocks_per_node=2)
    assert policy.reconfigured(config) is policy and policy.config is config
    assert policy.index.match((1, 2, 3)) == {node: 3}
    policy.on_routed(make_route_request(block_hashes=(4, 5, 6), request_id="r1"), node)
    assert policy.index.num_blocks(node) == 2
