"""Model aliases (controlplane/model_aliases.py): the table's checks, the flag, and the intake resolving an alias
before it routes: to the target's nodes, under the target's name; an alias of an unserved model refused by name."""

from __future__ import annotations

import argparse

import pytest

from backends.sim.engine import SimTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.control_plane_config import ControlPlaneConfig
from controlplane.lora_table import LoraTable, LoraTableError
from controlplane.model_aliases import check_model_aliases, parse_model_alias, resolve_model, served_aliases
from controlplane.registry import ClusterRegistry
from controlplane.request_intake import Placement, place_request
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.sampling_params import SamplingParams
from transport.messages import ClientGenerate, ErrorCode, ErrorReply
from zoo.cli import build_parser, main
from zoo.serve import controlplane_from_args, model_aliases_from_args
from zoo.up_config import load_up_config


class _Offered:
    name = "offered"

    def choose(self, request, snapshot):
        self.offered = sorted(v.node_id for v in snapshot.nodes)
        return self.offered[0] if self.offered else None


def _registry(make_hello) -> ClusterRegistry:
    """Two models: node a serves "small", node b serves "big"."""
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a", model="small"))
    registry.join(make_hello("b", model="big"))
    return registry


def _place(registry, model, aliases, policy, loras=None):
    msg = ClientGenerate(request_id="r", model=model, prompt_token_ids=[5, 6, 7], sampling=SamplingParams(max_tokens=2))
    return place_request(
        msg, model_names=["small", "big"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry,
        policy=policy, admission=AdmissionControl(AdmissionConfig()), router=RouterConfig(), aliases=aliases,
        loras=loras,
    )  # fmt: skip


def test_an_alias_routes_to_its_models_nodes_under_the_models_name(make_hello):
    registry, policy = _registry(make_hello), _Offered()
    placed = _place(registry, "gpt-4o", {"gpt-4o": "big", "gpt-4o-mini": "small"}, policy)
    assert isinstance(placed, Placement)
    assert policy.offered == ["b"] and placed.node_id == "b" and placed.route.model == "big"
    placed = _place(registry, "gpt-4o-mini", {"gpt-4o": "big", "gpt-4o-mini": "small"}, policy)
    assert policy.offered == ["a"] and placed.route.model == "small"
    placed = _place(registry, "big", {"gpt-4o": "big"}, policy)  # the model's own name still works
    assert placed.route.model == "big"


def test_an_alias_of_an_unserved_model_is_refused_naming_both(make_hello):
    refused = _place(_registry(make_hello), "gpt-4o", {"gpt-4o": "gone"}, _Offered())
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.UNKNOWN_MODEL and refused.param == "model"
    assert "'gone' is not served ('gpt-4o' is an alias of 'gone')" in refused.message
    refused = _place(_registry(make_hello), "nope", {"gpt-4o": "big"}, _Offered())  # not an alias: as before
    assert refused.code is ErrorCode.UNKNOWN_MODEL and "alias" not in refused.message


def test_an_alias_may_name_a_lora_adapter(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a", model="small", max_loras=2))
    loras = LoraTable()
    loras.add("sql", "/adapters/sql", "small")
    placed = _place(registry, "sql-bot", {"sql-bot": "sql"}, _Offered(), loras=loras)
    assert isinstance(placed, Placement) and placed.lora is not None and placed.lora.name == "sql"
    assert placed.route.model == "small" and placed.route.lora_name == "sql"


def test_the_table_refuses_chains_self_names_and_empty_names():
    check_model_aliases({"a": "m", "b": "m"})  # two names for one model
    for aliases, message in [
        ({"a": "a"}, "names itself"),
        ({"a": "b", "b": "m"}, "names another alias, 'b'"),
        ({"a": "b", "b": "a"}, "names another alias"),
        ({"": "m"}, "the alias must be a name"),
        ({"a": " "}, "the target must be a name"),
        ({"a" * 300: "m"}, "1 to 256 characters"),
    ]:
        with pytest.raises(ValueError, match=message):
            check_model_aliases(aliases)
    with pytest.raises(ValueError, match="names itself"):
        ControlPlaneConfig(model_aliases={"m": "m"})


def test_resolve_and_the_listed_aliases():
    aliases = {"a": "m", "b": "gone", "c": "sql"}
    assert [resolve_model(aliases, name) for name in ("a", "m", "x", None, "")] == ["m", "m", "x", None, ""]
    assert served_aliases(aliases, ["m", "sql"]) == [("a", "m"), ("c", "sql")]


def test_the_flag_parses_refuses_a_malformed_pair_and_a_conflict():
    assert parse_model_alias(" gpt-4o = SmolLM2 ") == ("gpt-4o", "SmolLM2")
    for text in ("gpt-4o", "=m", "a=", "a= "):
        with pytest.raises(argparse.ArgumentTypeError, match="ALIAS=MODEL"):
            parse_model_alias(text)
    args = argparse.Namespace(model_alias=[("a", "m"), ("b", "m"), ("a", "m")])
    assert model_aliases_from_args(args) == {"a": "m", "b": "m"}  # the same pair twice is the same alias
    with pytest.raises(ValueError, match="given twice"):
        model_aliases_from_args(argparse.Namespace(model_alias=[("a", "m"), ("a", "n")]))
    with pytest.raises(ValueError, match="names another alias"):
        model_aliases_from_args(argparse.Namespace(model_alias=[("a", "b"), ("b", "m")]))


def test_an_adapter_cannot_take_an_aliass_name():
    with pytest.raises(LoraTableError, match="a base model or a model alias") as info:
        LoraTable().add("gpt-4o", "/adapters/x", "m", served_models=["m", "gpt-4o"])
    assert info.value.status == 400


def test_zoo_controlplane_takes_the_flag_and_zoo_toml_a_list(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("zoo.serve.configure_logging_from_args", lambda *a: None)  # the process keeps its logging
    config = tmp_path / "zoo.toml"
    config.write_text('[controlplane]\nmodel_alias = ["gpt-4o=m", "gpt-4o-mini=m"]\n')
    argv = load_up_config(config).controlplane_argv()
    cp = controlplane_from_args(build_parser().parse_args([*argv, "--fake-tokenizer"]))
    assert cp.model_aliases == {"gpt-4o": "m", "gpt-4o-mini": "m"} and cp.path.aliases is cp.model_aliases
    chain = ["controlplane", "--fake-tokenizer", "--model-alias", "a=b", "--model-alias", "b=m"]
    assert main(chain) == 2  # `zoo: error: ...` before anything is served, no traceback
    assert "model alias 'a' names another alias, 'b'" in capsys.readouterr().err
