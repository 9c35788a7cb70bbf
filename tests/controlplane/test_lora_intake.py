"""LoRA adapters at the control plane: the table (names, checks, 400/404), and the intake resolving an
adapter name to its base model, LoRA-capable nodes, the node that holds it, and its own prefix hashes."""

from __future__ import annotations

import pytest

from backends.sim.engine import SimTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.lora_table import LoraTable, LoraTableError
from controlplane.registry import ClusterRegistry
from controlplane.request_intake import Placement, place_request
from controlplane.router.block_hashes import prompt_block_hashes
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.sampling_params import SamplingParams
from transport.messages import ClientGenerate, ErrorCode, ErrorReply

PROMPT = list(range(10, 50))  # two full blocks of 16


class _FirstById:
    name = "first"

    def choose(self, request, snapshot):
        self.offered = sorted(v.node_id for v in snapshot.nodes)
        return self.offered[0] if self.offered else None


def _place(registry, loras, model, policy=None, exclude=()):
    msg = ClientGenerate(request_id="r", model=model, prompt_token_ids=PROMPT, sampling=SamplingParams(max_tokens=2))
    return place_request(
        msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry,
        policy=policy or _FirstById(), admission=AdmissionControl(AdmissionConfig()), router=RouterConfig(),
        exclude=exclude, loras=loras,
    )  # fmt: skip


def test_table_names_checks_and_statuses():
    def check(path):
        if "bad" in path:
            raise ValueError("rank 64 exceeds the maximum LoRA rank 16")

    table = LoraTable(check)
    entry = table.add("sql", "/adapters/sql", "m")
    assert table.get("sql") is entry and entry.lora.lora_id > 0
    for name, path, message in [
        ("sql", "/adapters/other", "has already been loaded"),
        ("m", "/adapters/x", "is the name of a base model"),
        ("x", "/adapters/bad", "cannot load LoRA adapter 'x': rank 64 exceeds"),
        ("", "/adapters/x", "lora_name must be a non-empty string"),
        ("x", "", "lora_path must be a non-empty string"),
    ]:
        with pytest.raises(LoraTableError, match=message) as info:
            table.add(name, path, "m", served_models=["m"])
        assert info.value.status == 400
    with pytest.raises(LoraTableError, match="cannot be found") as info:
        table.remove("nope")
    assert info.value.status == 404
    table.remove("sql")
    assert len(table) == 0


def test_an_adapter_runs_on_its_base_model_on_lora_nodes_only(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))  # base model only
    registry.join(make_hello("b", max_loras=4))
    loras = LoraTable()
    lora = loras.add("sql", "/adapters/sql", "m").lora
    placed = _place(registry, loras, "sql")
    assert isinstance(placed, Placement)
    assert placed.node_id == "b" and placed.lora == lora
    assert placed.route.model == "m" and placed.route.lora_name == "sql"
    # the prefix-cache keys are the adapter's own: a base request's blocks are never taken for it
    assert placed.route.block_hashes == prompt_block_hashes(PROMPT, 16, lora.lora_id)
    assert placed.route.block_hashes != prompt_block_hashes(PROMPT, 16)
    base = _place(registry, loras, "m")
    assert base.node_id == "a" and base.lora is None and base.route.lora_name is None


def test_unknown_adapter_and_no_lora_node_are_refused(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))
    loras = LoraTable()
    loras.add("sql", "/adapters/sql", None)  # on the default model
    refused = _place(registry, loras, "poetry")
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.UNKNOWN_MODEL and refused.param == "model"
    refused = _place(registry, loras, "sql")
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.NO_NODE
    assert "serves LoRA adapters" in refused.message


def test_routing_prefers_the_node_holding_the_adapter(make_hello, make_report):
    registry = ClusterRegistry(ManualClock(), 5.0)
    for node_id in "abc":
        registry.join(make_hello(node_id, max_loras=2))
    registry.report(make_report("c", lora_resident=["sql"]))
    loras = LoraTable()
    loras.add("sql", "/adapters/sql", "m")
    loras.add("chat", "/adapters/chat", "m")
    policy = _FirstById()
    assert _place(registry, loras, "sql", policy).node_id == "c" and policy.offered == ["c"]
    assert _place(registry, loras, "chat", policy).node_id == "a"  # resident nowhere: every LoRA node
    # the holder queues work: the policy weighs every node again
    registry.report(make_report("c", lora_resident=["sql"], num_waiting=3))
    assert _place(registry, loras, "sql", policy).node_id == "a" and policy.offered == ["a", "b", "c"]
    # a resumed request excluded from its node still finds another
    registry.report(make_report("c", lora_resident=["sql"]))
    assert _place(registry, loras, "sql", policy, exclude=("c",)).node_id == "a"


def test_lora_requests_keep_the_registry_change_mark_so_tables_stay_incremental(make_hello, make_report):
    registry = ClusterRegistry(ManualClock())
    for k in range(12):
        registry.join(make_hello(f"n{k:02d}", max_loras=2 if k % 3 else 0))
    loras = LoraTable(lambda path: None)
    loras.add("sql", "/adapters/sql", "m")

    class _Recording(_FirstById):
        def choose(self, request, snapshot):
            self.changes = snapshot.changes
            return super().choose(request, snapshot)

    policy = _Recording()
    assert isinstance(_place(registry, loras, "sql", policy), Placement)
    full = registry.snapshot(model="m").changes
    # the subgroup of LoRA-capable nodes, marked where the registry stands: a table can follow it incrementally
    assert policy.changes == full.subgroup("max_loras>0") and policy.changes.group != full.group
    assert policy.offered == [f"n{k:02d}" for k in range(12) if k % 3]
