"""RequestPath.migrated without sockets: a request whose KV reached the target resumes there; one whose transfer
failed (the target or the link died mid-transfer) resumes elsewhere by re-prefill; nothing is lost."""

from __future__ import annotations

from backends.fake import ByteTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.cells import CellsConfig, engine_priority, parse_cells
from controlplane.fleet_ledger import FleetLedger
from controlplane.lora_table import LoraTable
from controlplane.registry import ClusterRegistry
from controlplane.request_path import RequestPath
from controlplane.router.policies import make_policy
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.sampling_params import SamplingParams
from transport.messages import ClientGenerate, GenerateRequest, TokenChunk

PROMPT_IDS = ByteTokenizer().encode("hi")


class _Consumer:
    def __init__(self) -> None:
        self.items: list = []

    def deliver(self, msg) -> None:
        self.items.append(msg)


def _path(make_hello, node_ids=("a", "b", "c"), *, cells=None, loras=None, traffic_class="default", model=None):
    registry = ClusterRegistry(ManualClock(), heartbeat_timeout_s=0.8)
    for node_id in node_ids:
        registry.join(make_hello(node_id, max_loras=2 if loras is not None else 0))
    sent: list[tuple[object, str]] = []
    path = RequestPath(
        registry=registry,
        policy=make_policy("round_robin"),
        admission=AdmissionControl(AdmissionConfig()),
        tokenizer=ByteTokenizer(),
        router=RouterConfig(policy="round_robin", cells=cells if cells is not None else CellsConfig()),
        fleet=FleetLedger(1000),
        send_to_node=lambda msg, node_id: sent.append((msg, node_id)),
        model_names=registry.model_names,
        max_resumes=3,
        loras=loras,
    )
    consumer = _Consumer()
    sampling = SamplingParams(temperature=0.0, max_tokens=5)
    msg = ClientGenerate(request_id="r", prompt="hi", sampling=sampling, traffic_class=traffic_class, model=model)
    assert path.submit(msg, consumer, arrival_ns=1) is None
    source = sent[-1][1]
    chunk = TokenChunk(request_id="r", token_ids=[10, 11], text="ab", num_prompt_tokens=2, num_output_tokens=2)
    assert path.relay(source, chunk, recv_ns=2)
    return path, registry, sent, consumer, source


def _generates(sent) -> list[tuple[GenerateRequest, str]]:
    return [(m, n) for m, n in sent if isinstance(m, GenerateRequest)]


def test_kv_on_the_target_resumes_the_request_there(make_hello):
    path, registry, sent, consumer, source = _path(make_hello)
    target = next(n for n in ("c", "b", "a") if n != source)
    assert path.migrated(source, "r", target, ok=True, why="")
    resumed, node_id = _generates(sent)[-1]
    assert node_id == target and resumed.prompt_token_ids == [*PROMPT_IDS, 10, 11]
    assert resumed.num_resumed_tokens == 2  # the two streamed: output, for its penalties
    assert resumed.sampling.max_tokens == 3
    assert registry.inflight_request_ids(target) == ["r"] and registry.inflight_request_ids(source) == []
    assert path.counters["migrated"] == 1
    later = TokenChunk(request_id="r", token_ids=[12], text="c", num_prompt_tokens=4, num_output_tokens=1)
    assert path.relay(target, later, recv_ns=3) and not path.relay(source, later, recv_ns=3)
    assert [c.num_output_tokens for c in consumer.items] == [2, 3]  # one stream, counted on


def test_a_failed_transfer_resumes_elsewhere_by_re_prefill(make_hello):
    path, registry, sent, _, source = _path(make_hello)
    target = next(n for n in ("a", "b", "c") if n != source)
    registry.leave(target, "died mid-transfer")
    assert path.migrated(source, "r", target, ok=False, why="timeout")
    resumed, node_id = _generates(sent)[-1]
    assert node_id not in (source, target) and resumed.prompt_token_ids == [*PROMPT_IDS, 10, 11]
    assert "migrated" not in path.counters and path.counters["resumed"] == 1 and path.counters["failed"] == 0


def test_kv_on_a_target_that_is_gone_falls_back_to_re_prefill(make_hello):
    path, registry, sent, _, source = _path(make_hello)
    target = next(n for n in ("a", "b", "c") if n != source)
    registry.leave(target, "gone")
    assert path.migrated(source, "r", target, ok=True, why="")
    _, node_id = _generates(sent)[-1]
    assert node_id not in (source, target) and path.counters["resumed"] == 1


def test_a_request_not_on_that_node_is_left_alone(make_hello):
    path, _, sent, _, source = _path(make_hello)
    other = next(n for n in ("a", "b", "c") if n != source)
    num_sent = len(sent)
    assert not path.migrated(other, "r", source, ok=True, why="") and not path.migrated(source, "x", other, True, "")
    assert len(sent) == num_sent


def test_a_failed_transfer_with_nowhere_else_to_go_returns_to_the_source(make_hello):
    path, registry, sent, consumer, source = _path(make_hello, node_ids=("a", "b"))
    target = "b" if source == "a" else "a"
    registry.drain(source)  # `zoo drain`: the source is routed nothing new
    registry.leave(target, "died mid-transfer")
    assert path.migrated(source, "r", target, ok=False, why="timeout")
    resumed, node_id = _generates(sent)[-1]
    assert node_id == source and resumed.prompt_token_ids == [*PROMPT_IDS, 10, 11]
    last = TokenChunk(request_id="r", token_ids=[12, 13, 14], text="cde", num_prompt_tokens=4, num_output_tokens=3,
                      finished=True, finish_reason="length")  # fmt: skip
    assert path.relay(source, last, recv_ns=3)
    assert [c.num_output_tokens for c in consumer.items] == [2, 5] and path.counters["failed"] == 0


def test_a_request_returned_to_its_source_keeps_its_class_priority_and_its_adapter(make_hello):
    """The return path builds its GenerateRequest itself (no placement): it must still carry the class's
    engine priority (a VIP request must not come back as batch, swappable by anyone) and the LoRA adapter."""
    classes = [{"name": "vip", "cell": "default", "priority": 2}, {"name": "batch"}]
    cells = parse_cells({"cells": [{"name": "default"}], "traffic_classes": classes})
    loras = LoraTable()
    lora = loras.add("sql", "/adapters/sql", "m").lora
    path, registry, sent, _, source = _path(
        make_hello, ("a", "b"), cells=cells, loras=loras, traffic_class="vip", model="sql"
    )
    (first, _), *_ = _generates(sent)
    assert (first.priority, first.lora_name) == (engine_priority(2), "sql")
    target = "b" if source == "a" else "a"
    registry.drain(source)
    registry.leave(target, "died mid-transfer")
    assert path.migrated(source, "r", target, ok=False, why="timeout")
    returned, node_id = _generates(sent)[-1]
    assert node_id == source and returned.prompt_token_ids == [*PROMPT_IDS, 10, 11]
    assert returned.num_resumed_tokens == 2
    assert (returned.priority, returned.lora_name, returned.lora_path) == (engine_priority(2), lora.name, lora.path)
