"""RequestPath without sockets: placing, relaying, and resuming a request on another node when its node is
lost, unreachable or refuses it (the client sees one stream), on a manual clock."""

from __future__ import annotations

import pytest

from backends.fake import ByteTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.fleet_ledger import FleetLedger
from controlplane.registry import ClusterRegistry, NodeState
from controlplane.request_intake import resumed_request
from controlplane.request_path import RequestPath
from controlplane.router.policies import make_policy
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.sampling_params import SamplingParams
from transport.messages import CancelRequest, ClientGenerate, ErrorCode, ErrorReply, GenerateRequest, TokenChunk

PROMPT = "hi"
PROMPT_IDS = ByteTokenizer().encode(PROMPT)


class _Consumer:
    def __init__(self) -> None:
        self.items: list[TokenChunk | ErrorReply] = []

    def deliver(self, msg) -> None:
        self.items.append(msg)


class _FirstNodePolicy:
    """Always the first node of the snapshot; records every hook."""

    name = "first"

    def __init__(self) -> None:
        self.calls: list[tuple[str, str]] = []

    def choose(self, request, snapshot):
        return snapshot.nodes[0].node_id if snapshot.nodes else None

    def on_routed(self, request, node_id):
        self.calls.append(("routed", node_id))

    def on_first_token(self, request_id, node_id):
        self.calls.append(("first_token", node_id))

    def on_finished(self, request_id, node_id):
        self.calls.append(("finished", node_id))

    def on_node_removed(self, node_id):
        self.calls.append(("removed", node_id))


class _Fleet:
    def __init__(self, make_hello, node_ids=("a", "b"), *, policy=None, max_resumes: int = 3) -> None:
        self.clock = ManualClock()
        self.registry = ClusterRegistry(self.clock, heartbeat_timeout_s=0.8)
        for node_id in node_ids:
            self.registry.join(make_hello(node_id))
        self.policy = policy or make_policy("round_robin")
        self.sent: list[tuple[object, str]] = []
        self.path = RequestPath(
            registry=self.registry,
            policy=self.policy,
            admission=AdmissionControl(AdmissionConfig()),
            tokenizer=ByteTokenizer(),
            router=RouterConfig(policy="round_robin"),
            fleet=FleetLedger(1000),
            send_to_node=lambda msg, node_id: self.sent.append((msg, node_id)),
            model_names=self.registry.model_names,
            max_resumes=max_resumes,
        )

    def submit(self, request_id: str = "r", max_tokens: int = 5) -> tuple[_Consumer, str]:
        consumer = _Consumer()
        sampling = SamplingParams(temperature=0.0, max_tokens=max_tokens)
        msg = ClientGenerate(request_id=request_id, prompt=PROMPT, sampling=sampling)
        assert self.path.submit(msg, consumer, arrival_ns=123) is None
        request, node_id = self.sent[-1]
        assert isinstance(request, GenerateRequest)
        return consumer, node_id

    def chunk(self, node_id: str, token_ids: list[int], n_prompt: int, n_out: int, finished=False, rid="r") -> bool:
        chunk = TokenChunk(
            request_id=rid,
            token_ids=token_ids,
            text="x" * len(token_ids),
            finished=finished,
            finish_reason="length" if finished else None,
            num_prompt_tokens=n_prompt,
            num_output_tokens=n_out,
        )
        return self.path.relay(node_id, chunk, recv_ns=1)

    def lose(self, node_id: str) -> None:
        self.path.on_node_lost(self.registry.leave(node_id, "gone"))

    def requests_to(self, node_id: str) -> list[GenerateRequest]:
        return [m for m, n in self.sent if n == node_id and isinstance(m, GenerateRequest)]


def test_a_request_on_a_lost_node_resumes_elsewhere_and_its_stream_continues(make_hello):
    fleet = _Fleet(make_hello)
    consumer, first = fleet.submit(max_tokens=5)
    other = "b" if first == "a" else "a"
    assert fleet.chunk(first, [10], 2, 1) and fleet.chunk(first, [11], 2, 2)
    fleet.lose(first)

    (resumed,) = fleet.requests_to(other)
    assert resumed.request_id == "r" and resumed.arrival_ns == 123
    assert resumed.prompt_token_ids == [*PROMPT_IDS, 10, 11]  # prompt + the tokens already streamed
    assert resumed.num_resumed_tokens == 2  # which the node is told are output (its penalties count them)
    assert resumed.sampling.max_tokens == 3 and resumed.sampling.temperature == 0.0
    assert not fleet.chunk(first, [99], 2, 3)  # a late chunk from the lost node is not relayed
    assert fleet.registry.inflight_request_ids(other) == ["r"]

    assert fleet.chunk(other, [12], 4, 1)  # the new node counts its own prompt (4) and output (from 1)
    assert fleet.chunk(other, [13, 14], 4, 3, finished=True)
    chunks = consumer.items
    assert [c.token_ids for c in chunks] == [[10], [11], [12], [13, 14]]
    assert [c.num_output_tokens for c in chunks] == [1, 2, 3, 5]  # one stream, counted on
    assert {c.num_prompt_tokens for c in chunks} == {2}  # the original prompt
    assert [c.node_id for c in chunks] == [first, first, other, other]
    assert chunks[-1].finished
    counters = fleet.path.counters
    assert (counters["routed"], counters["resumed"], counters["completed"], counters["failed"]) == (1, 1, 1, 0)
    assert fleet.registry.inflight_request_ids(other) == [] and len(fleet.path.table) == 0


def test_a_request_with_nowhere_to_go_fails_with_node_failed(make_hello):
    fleet = _Fleet(make_hello, ["a"])
    consumer, _ = fleet.submit()
    fleet.chunk("a", [10], 2, 1)
    fleet.lose("a")
    error = consumer.items[-1]
    assert isinstance(error, ErrorReply) and error.code is ErrorCode.NODE_FAILED
    assert "left the cluster (gone)" in error.message and "could not resume elsewhere" in error.message
    assert fleet.path.counters["failed"] == 1 and fleet.path.counters["resumed"] == 0


def test_resumes_are_bounded_per_request(make_hello):
    fleet = _Fleet(make_hello, ["a", "b", "c"], policy=_FirstNodePolicy(), max_resumes=1)
    consumer, first = fleet.submit()
    assert first == "a"
    fleet.lose("a")
    assert fleet.requests_to("b")
    fleet.lose("b")  # "c" could take it, but it already resumed once
    assert not fleet.requests_to("c")
    assert consumer.items[-1].code is ErrorCode.NODE_FAILED and "max_resumes" in consumer.items[-1].message


def test_a_failed_send_marks_the_node_suspect_and_the_request_goes_elsewhere(make_hello, make_report):
    fleet = _Fleet(make_hello, policy=_FirstNodePolicy())
    consumer, _ = fleet.submit()
    (request,) = fleet.requests_to("a")
    fleet.path.on_undeliverable(request, "a", "peer not connected")
    assert fleet.registry.state("a") is NodeState.SUSPECT
    (again,) = fleet.requests_to("b")
    assert again.prompt_token_ids == PROMPT_IDS and again.sampling.max_tokens == 5  # no token had come
    assert again.num_resumed_tokens == 0
    assert fleet.registry.inflight_request_ids("a") == [] and fleet.registry.inflight_request_ids("b") == ["r"]
    fleet.submit("r2")
    assert fleet.sent[-1][1] == "b"  # nothing new goes to a suspect node
    fleet.registry.report(make_report("a"))  # until it proves alive
    fleet.submit("r3")
    assert fleet.sent[-1][1] == "a"
    assert consumer.items == []  # the client saw nothing of it


def test_a_node_refusing_at_send_time_passes_the_request_on(make_hello):
    fleet = _Fleet(make_hello, policy=_FirstNodePolicy())
    consumer, _ = fleet.submit()
    refusal = ErrorReply(request_id="r", code=ErrorCode.OVERLOADED, message="node queue full", retry_after_s=1.0)
    assert fleet.path.on_node_error("a", refusal)
    assert fleet.requests_to("b")  # "a" is still up, but not chosen again for this request
    assert fleet.registry.state("a") is NodeState.UP
    # any other error from the node serving it fails the request
    error = ErrorReply(request_id="r", code=ErrorCode.INVALID_REQUEST, message="bad prompt")
    assert not fleet.path.on_node_error("a", error)  # not served there any more
    assert fleet.path.on_node_error("b", error)
    assert consumer.items[-1].code is ErrorCode.INVALID_REQUEST


def test_nothing_new_is_routed_to_a_draining_node(make_hello):
    fleet = _Fleet(make_hello)
    fleet.registry.drain("a")
    for i in range(3):
        fleet.submit(f"r{i}")
    assert [node_id for _, node_id in fleet.sent] == ["b", "b", "b"]


def test_the_policy_hears_each_node_a_request_was_on_once(make_hello):
    policy = _FirstNodePolicy()
    fleet = _Fleet(make_hello, policy=policy)
    fleet.submit()
    fleet.chunk("a", [10], 2, 1)
    fleet.chunk("a", [11], 2, 2)
    fleet.path.on_undeliverable(GenerateRequest(request_id="r", prompt_token_ids=[], sampling=SamplingParams(),
                                                arrival_ns=0, routed_ns=0), "a", "x")  # fmt: skip
    assert policy.calls == [("routed", "a"), ("first_token", "a")]  # a stale send: it was not on its way to "a"
    fleet.lose("a")
    fleet.chunk("b", [12], 4, 1)
    fleet.chunk("b", [13], 4, 2)
    fleet.chunk("b", [14], 4, 3, finished=True)
    assert policy.calls == [
        ("routed", "a"),
        ("first_token", "a"),
        ("finished", "a"),
        ("routed", "b"),
        ("first_token", "b"),
        ("finished", "b"),
    ]


def test_cancelling_a_resumed_request_stops_it_on_its_new_node(make_hello):
    fleet = _Fleet(make_hello, policy=_FirstNodePolicy())
    fleet.submit()
    fleet.lose("a")
    assert fleet.path.cancel("r")
    assert isinstance(fleet.sent[-1][0], CancelRequest) and fleet.sent[-1][1] == "b"
    assert fleet.registry.inflight_request_ids("b") == []


@pytest.mark.parametrize("num_streamed", [0, 4])
def test_a_resumed_prompt_must_still_fit_the_context(make_hello, num_streamed):
    fleet = _Fleet(make_hello, policy=_FirstNodePolicy())
    fleet.registry.join(make_hello("c", max_model_len=len(PROMPT_IDS) + 3))
    fleet.registry.leave("b")
    consumer, _ = fleet.submit(max_tokens=10)
    for i in range(num_streamed):
        fleet.chunk("a", [20 + i], 2, i + 1)
    fleet.lose("a")
    if num_streamed == 0:
        assert fleet.requests_to("c")
    else:  # prompt + 4 streamed tokens no longer fit c's context
        assert consumer.items[-1].code is ErrorCode.NODE_FAILED and "context" in consumer.items[-1].message


def test_a_resumed_request_asks_for_prompt_logprobs_only_if_no_chunk_carried_them():
    msg = ClientGenerate(request_id="r", prompt="x", sampling=SamplingParams(max_tokens=8, prompt_logprobs=2))
    before_any = resumed_request(msg, "m", [1, 2, 3], [])
    after_some = resumed_request(msg, "m", [1, 2, 3], [4, 5])
    assert before_any.sampling.prompt_logprobs == 2 and before_any.prompt_token_ids == [1, 2, 3]
    assert after_some.sampling.prompt_logprobs is None and after_some.sampling.max_tokens == 6


def test_a_refusal_for_want_of_a_node_is_counted_once_its_wait_ends_refused_not_while_it_is_held(make_hello):
    """A request its caller holds for a node (controlplane/cold_start.py: ``submit``'s ``held``): its refusal for
    want of a node is handed to the caller uncounted, then counted once (by code and class) if its wait ends refused,
    or as a cancel if its client left; other refusals, and a draining control plane's, are counted at once."""
    fleet = _Fleet(make_hello, node_ids=())  # no node: every request is refused for want of one
    path, held = fleet.path, []
    msg = ClientGenerate(request_id="r", prompt=PROMPT, sampling=SamplingParams(max_tokens=2))
    for _ in range(3):  # refused at each try while it waits: none of them counted
        reply = path.submit(msg, _Consumer(), arrival_ns=123, held=held.append)
        assert reply is not None and reply.code is ErrorCode.NO_NODE
    assert [(h.msg, h.reply.code, h.arrival_ns) for h in held] == [(msg, ErrorCode.NO_NODE, 123)] * 3
    assert path.counters["refused"] == path.refused[ErrorCode.NO_NODE] == 0 and path.classes.summary() == {}
    path.settle_held(held[-1], refused=True)  # its wait ended: the last refusal goes to its client
    assert path.counters["refused"] == path.refused[ErrorCode.NO_NODE] == 1
    assert path.classes.summary()["default"]["requests_refused"] == 1
    path.settle_held(held[0], refused=False)  # another's client left while it waited: a cancel, not a refusal
    assert path.counters["cancelled"] == 1 and path.counters["refused"] == 1
    bad = ClientGenerate(request_id="", prompt=PROMPT, sampling=SamplingParams(max_tokens=2))
    assert path.submit(bad, _Consumer(), arrival_ns=1, held=held.append).code is ErrorCode.INVALID_REQUEST
    path.draining = True
    assert path.submit(msg, _Consumer(), arrival_ns=1, held=held.append).code is ErrorCode.NO_NODE
    assert len(held) == 3 and path.counters["refused"] == 3  # neither was for want of a node: counted at once
    assert path.refused[ErrorCode.INVALID_REQUEST] == 1 and path.refused[ErrorCode.NO_NODE] == 2


def test_a_held_request_tried_again_is_no_new_arrival_and_its_pools_full_queues_hold_it_too(make_hello):
    """``submit``'s ``again`` (a held request's try after its first, controlplane/cold_start.py): its pool counted it
    at its first refusal, so its placement is no new arrival of the pool (the node's decisions still count it); a
    refusal for want of capacity (every queue full: OVERLOADED) is handed to ``held`` uncounted, and is no arrival."""
    fleet = _Fleet(make_hello, node_ids=("a",))
    path, held = fleet.path, []
    arrivals = path.fleet.arrivals_by_pool()
    msg = ClientGenerate(request_id="r", prompt=PROMPT, sampling=SamplingParams(max_tokens=2))
    assert path.submit(msg, _Consumer(), arrival_ns=1, held=held.append, again=True) is None
    assert path.fleet.arrivals_by_pool() == arrivals and path.fleet.decisions["a"] == 1
    path.admission = AdmissionControl(AdmissionConfig(max_queue_global=0))  # every queue full from now on
    again = ClientGenerate(request_id="s", prompt=PROMPT, sampling=SamplingParams(max_tokens=2))
    assert path.submit(again, _Consumer(), arrival_ns=1, held=held.append, again=True).code is ErrorCode.OVERLOADED
    assert [h.reply.code for h in held] == [ErrorCode.OVERLOADED] and path.counters["refused"] == 0
    assert path.fleet.arrivals_by_pool() == arrivals  # not an arrival again
    first = ClientGenerate(request_id="t", prompt=PROMPT, sampling=SamplingParams(max_tokens=2))
    assert path.submit(first, _Consumer(), arrival_ns=1, held=held.append).code is ErrorCode.OVERLOADED
    assert len(held) == 1 and path.counters["refused"] == 1  # a first try's full queues: refused (429) at once
    assert sum(path.fleet.arrivals_by_pool().values()) == sum(arrivals.values()) + 1
