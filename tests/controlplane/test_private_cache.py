"""A tenant with ``cache=private`` (its API key line): its requests are salted with a salt of its own (vLLM's
``cache_salt``, engine/prefix_key.py), which no client can forge, so the same prompt from anyone else hashes to
other blocks, at the router as at the node."""

from __future__ import annotations

import pytest

from backends.sim.engine import SimTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.registry import ClusterRegistry
from controlplane.request_intake import Placement, place_request
from controlplane.router.router_config import RouterConfig
from controlplane.tenants import RESERVED_SALT_PREFIX, TenantLimiter, parse_key_tenants
from engine.clock import ManualClock
from engine.sampling_params import SamplingParams
from transport.messages import ClientGenerate, ErrorCode, ErrorReply

KEYS = """
zk-bank  tenant=bank cache=private
zk-shop  tenant=shop
"""
PROMPT = list(range(1, 65))


class _First:
    name = "first"

    def choose(self, request, snapshot):
        return snapshot.nodes[0].node_id if snapshot.nodes else None


def _place(make_hello, make_report, tenants: TenantLimiter, tenant: str, salt: str | None = None):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("n0"))
    registry.report(make_report("n0"))
    msg = ClientGenerate(
        request_id="r", prompt_token_ids=PROMPT, sampling=SamplingParams(max_tokens=2, cache_salt=salt), tenant=tenant
    )
    placed = place_request(
        msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry, policy=_First(),
        router=RouterConfig(), admission=AdmissionControl(AdmissionConfig()), tenants=tenants,
    )  # fmt: skip
    return placed, msg


def test_the_key_file_says_which_tenants_keep_a_private_cache():
    tenant_of, specs = parse_key_tenants(KEYS)
    by_name = {spec.name: spec for spec in specs}
    assert tenant_of == {"zk-bank": "bank", "zk-shop": "shop"}
    assert by_name["bank"].private_cache and not by_name["shop"].private_cache
    with pytest.raises(ValueError, match="line 1: cache must be shared or private"):
        parse_key_tenants("zk-x tenant=x cache=secret")


def test_a_private_tenants_prompt_hashes_to_blocks_nobody_else_has(make_hello, make_report):
    tenants = TenantLimiter(parse_key_tenants(KEYS)[1])
    bank, bank_msg = _place(make_hello, make_report, tenants, "bank")
    shop, shop_msg = _place(make_hello, make_report, tenants, "shop")
    again, _ = _place(make_hello, make_report, tenants, "bank")
    assert isinstance(bank, Placement) and isinstance(shop, Placement)
    assert bank_msg.sampling.cache_salt.startswith(RESERVED_SALT_PREFIX)  # what its GenerateRequest carries
    assert shop_msg.sampling.cache_salt is None  # a shared tenant: as it asked
    assert not set(bank.route.block_hashes) & set(shop.route.block_hashes)
    assert again.route.block_hashes == bank.route.block_hashes  # the tenant's own requests share its cache
    salted, _ = _place(make_hello, make_report, tenants, "bank", salt="per-user-7")
    assert not set(salted.route.block_hashes) & set(bank.route.block_hashes)  # its own salts still divide it


def test_no_client_can_forge_a_private_tenants_salt(make_hello, make_report):
    tenants = TenantLimiter(parse_key_tenants(KEYS)[1])
    _, bank_msg = _place(make_hello, make_report, tenants, "bank")
    refused, _ = _place(make_hello, make_report, tenants, "shop", salt=bank_msg.sampling.cache_salt)
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.INVALID_REQUEST
    assert refused.param == "cache_salt"
