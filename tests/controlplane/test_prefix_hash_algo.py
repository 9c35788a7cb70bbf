"""The prefix-cache hash algorithm end to end: the engine names its blocks by CacheConfig.prefix_hash_algo, the
node says it in its hello, the registry refuses one it does not know, and the intake names a prompt's blocks the
nodes' way (so the router's prefix index and the nodes' caches agree on every name)."""

from __future__ import annotations

import argparse

import pytest

from backends.sim.engine import SimTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.registry import ClusterRegistry
from controlplane.request_intake import Placement, place_request
from controlplane.router.block_hashes import prompt_block_hashes
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.config import CacheConfig
from engine.kv.block_manager import KVCacheManager
from engine.request import Request
from engine.sampling_params import SamplingParams
from transport.messages import ClientGenerate, KVInfo
from zoo.engine_args import add_engine_args, engine_config_from_args

PROMPT = list(range(10, 60))  # three full blocks of 16


class _First:
    name = "first"

    def choose(self, request, snapshot):
        return snapshot.nodes[0].node_id if snapshot.nodes else None


def _place(registry):
    msg = ClientGenerate(request_id="r", model="m", prompt_token_ids=PROMPT, sampling=SamplingParams(max_tokens=2))
    return place_request(
        msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry,
        policy=_First(), admission=AdmissionControl(AdmissionConfig()), router=RouterConfig(),
    )  # fmt: skip


@pytest.mark.parametrize("algo", ["sha256", "xxhash"])
def test_the_intake_names_a_prompt_the_nodes_way(make_hello, algo):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a", kv=KVInfo(1024, 0, 16, 4096, prefix_hash_algo=algo)))
    placed = _place(registry)
    assert isinstance(placed, Placement)
    assert placed.route.block_hashes == prompt_block_hashes(PROMPT, 16, algo=algo)
    other = "sha256" if algo == "xxhash" else "xxhash"
    assert placed.route.block_hashes != prompt_block_hashes(PROMPT, 16, algo=other)


def test_the_registry_refuses_an_unknown_algorithm_by_name(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    with pytest.raises(ValueError, match=r"prefix_hash_algo must be one of.*'md5'"):
        registry.join(make_hello("a", kv=KVInfo(1024, 0, 16, 4096, prefix_hash_algo="md5")))
    assert not registry.snapshot().nodes


def test_cache_config_refuses_an_unknown_algorithm():
    with pytest.raises(ValueError, match="'blake3'"):
        CacheConfig(prefix_hash_algo="blake3")


@pytest.mark.parametrize("algo", ["sha256", "xxhash"])
def test_an_engine_hits_its_prefix_cache_under_either_algorithm(algo):
    manager = KVCacheManager.from_config(CacheConfig(num_device_blocks=16, num_host_blocks=0, prefix_hash_algo=algo))
    assert manager.hash_algo == algo
    first = Request("r1", list(PROMPT), SamplingParams(max_tokens=4), 0.0)
    manager.allocate_slots(first, len(PROMPT))
    first.num_computed_tokens = len(PROMPT)
    manager.cache_computed_blocks(first)
    second = Request("r2", [*PROMPT[:40], 999], SamplingParams(max_tokens=4), 0.0)
    hit = manager.get_computed_blocks(second)
    assert hit.num_tokens == 32  # the two full blocks the prompts share, named the same way both times


def test_the_cli_flag_reaches_the_cache_config_and_refuses_other_names():
    p = argparse.ArgumentParser()
    add_engine_args(p)
    assert engine_config_from_args(p.parse_args([])).cache.prefix_hash_algo == "sha256"
    assert engine_config_from_args(p.parse_args(["--prefix-hash-algo", "xxhash"])).cache.prefix_hash_algo == "xxhash"
    with pytest.raises(SystemExit):
        p.parse_args(["--prefix-hash-algo", "md5"])


def test_a_huge_name_in_a_hello_is_refused_with_a_bounded_error(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    with pytest.raises(ValueError, match="prefix_hash_algo") as info:
        registry.join(make_hello("a", kv=KVInfo(1024, 0, 16, 4096, prefix_hash_algo="x" * 10_000_000)))
    assert len(str(info.value)) < 300 and not registry.snapshot().nodes
    with pytest.raises(ValueError, match="must be one of") as info:
        CacheConfig(prefix_hash_algo="y" * 10_000_000)
    assert len(str(info.value)) < 300
