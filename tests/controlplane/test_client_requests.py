"""A ZeroMQ client's requests (controlplane/client_requests.py): a long prompt tokenized in a worker thread, then
submitted with tokenize's ids; meanwhile it is in flight for its client (a ping knows it, a second request with its id
is refused, a cancel drops it), and a shutdown refuses it."""

from __future__ import annotations

import threading

import anyio
import pytest

from controlplane.capacity_plan import CapacityPlanConfig, CapacityPlanner, PlanNode
from controlplane.client_requests import SHUTTING_DOWN, ClientRequests
from controlplane.cold_start import ColdStart
from controlplane.offload_tokenize import TokenizeWorkers
from controlplane.request_intake import tokenize
from controlplane.request_path import HeldRefusal
from engine.prompt import PromptError
from engine.sampling_params import SamplingParams
from tests.controlplane.test_cold_start import Fleet
from transport.chat_wire import ChatMessage, ChatTemplateOptions
from transport.dispatch import Incoming
from transport.messages import CancelRequest, ClientGenerate, ErrorCode, ErrorReply, Ping, Pong

pytestmark = pytest.mark.anyio
LONG = "word " * 200  # 1,000 characters: long for min_chars=500
PEER, OTHER = b"client-a", b"client-b"
BOTH = ChatTemplateOptions(add_generation_prompt=True, continue_final_message=True)  # a chat tokenize refuses


class GatedTokenizer:
    """The real tokenizer; its GIL-releasing encode waits for ``gate`` and records the thread it ran on."""

    def __init__(self, tokenizer) -> None:
        self.inner, self.gate, self.threads = tokenizer, threading.Event(), []
        self.vocab_size, self.eos_token_id = tokenizer.vocab_size, tokenizer.eos_token_id

    def encode(self, text, add_special_tokens=False):
        return self.inner.encode(text, add_special_tokens)

    def encode_unlocked(self, text, add_special_tokens=False):
        self.threads.append(threading.get_ident())
        assert self.gate.wait(10)
        return self.inner.encode_unlocked(text, add_special_tokens)


class Harness:
    def __init__(self, tokenizer, max_pending: int = 8, max_threads: int = 2, cold_start=None) -> None:
        self.sent: list[tuple[object, bytes]] = []
        self.submitted: list[tuple[str, bytes, int, object]] = []
        self.refusals: list[ErrorReply] = []
        self.cancelled: list[str] = []
        self.table: dict = {}
        self.refuse_with: ErrorReply | None = None
        self.counted: list[ErrorReply] = []  # refusals the path counted (a held one's once its wait ended refused)
        self.again: list[bool] = []  # each submit's ``again``: a held request's try after its first
        self.requests = ClientRequests(
            workers=TokenizeWorkers(tokenizer, max_threads),
            min_chars=500,
            max_pending=max_pending,
            link=self,
            submit=self.submit,
            cancel=self.cancelled.append,
            count_refusal=self.refusals.append,
            table=self.table,
            notify=lambda: None,
            started_ns=7,
            cold_start=cold_start,
            model_names=lambda: ["m"],
        )

    def send_nowait(self, msg, peer) -> None:
        self.sent.append((msg, peer))

    def submit(self, msg, consumer, arrival_ns, token_ids=None, held=None, again=False):
        """RequestPath.submit's rule: a refusal for want of a node goes to ``held`` when given, uncounted (at a try
        again, one for full queues too: OVERLOADED here)."""
        self.submitted.append((msg.request_id, consumer.peer, arrival_ns, token_ids))
        self.again.append(again)
        wanting = (ErrorCode.NO_NODE, ErrorCode.OVERLOADED) if again else (ErrorCode.NO_NODE,)
        if self.refuse_with is not None and held is not None and self.refuse_with.code in wanting:
            held(HeldRefusal(msg, self.refuse_with, arrival_ns))
        elif self.refuse_with is not None:
            self.counted.append(self.refuse_with)
        return self.refuse_with

    def generate(self, request_id: str, peer: bytes = PEER, recv_ns: int = 100, **fields) -> None:
        msg = ClientGenerate(request_id=request_id, sampling=SamplingParams(max_tokens=2), **fields)
        self.requests.on_generate(Incoming(peer, msg, [], recv_ns))

    def cancel(self, request_id: str, peer: bytes = PEER) -> None:
        self.requests.on_cancel(Incoming(peer, CancelRequest(request_id=request_id), [], 0))

    def ping(self, request_ids: list[str], peer: bytes = PEER) -> Pong:
        self.requests.on_ping(Incoming(peer, Ping(request_id="p", request_ids=request_ids), [], 0))
        pong, to = self.sent.pop()
        assert to == peer
        return pong


async def wait_for(predicate) -> None:
    with anyio.fail_after(10):
        while not predicate():
            await anyio.sleep(0.005)


async def test_a_long_prompt_is_tokenized_in_a_thread_and_submitted_with_the_loops_ids(smollm2_checkpoint):
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    h = Harness(tokenizer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("short", prompt="Hi")  # submitted at once, tokenized by the path (no ids given)
        h.generate("long", prompt=LONG, recv_ns=123)
        assert h.submitted == [("short", PEER, 100, None)] and set(h.requests.pending) == {"long"}
        assert h.ping(["long", "short", "gone"]).unknown_request_ids == ["short", "gone"]  # short: not in the table
        tokenizer.gate.set()
        await wait_for(lambda: len(h.submitted) == 2)
        tg.cancel_scope.cancel()
    rid, peer, arrival_ns, ids = h.submitted[1]
    msg = ClientGenerate(request_id="long", prompt=LONG, sampling=SamplingParams(max_tokens=2))
    assert (rid, peer, arrival_ns) == ("long", PEER, 123)  # its arrival: when its message came, tokenizing counted
    assert ids == tokenize(smollm2_checkpoint.tokenizer, msg)
    assert tokenizer.threads and threading.get_ident() not in tokenizer.threads  # not on the loop's thread
    assert h.requests.pending == {} and h.requests.num_offloaded == 1


async def test_a_cancel_while_tokenizing_drops_the_request_and_only_its_client_may_cancel(smollm2_checkpoint):
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    h = Harness(tokenizer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("long", prompt=LONG)
        h.cancel("long", peer=OTHER)  # another client's cancel: ignored
        assert "long" in h.requests.pending
        assert h.ping(["long"], peer=OTHER).unknown_request_ids == ["long"]  # not its request
        h.cancel("long")
        assert h.requests.pending == {}
        h.generate("again", prompt=LONG)  # a later one is served: the worker goes on
        tokenizer.gate.set()
        await wait_for(lambda: len(h.submitted) == 1)
        tg.cancel_scope.cancel()
    assert [s[0] for s in h.submitted] == ["again"] and h.sent == [] and h.cancelled == []


async def test_a_second_request_with_a_pending_id_is_refused_as_in_flight(smollm2_checkpoint):
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    h = Harness(tokenizer)
    h.generate("long", prompt=LONG)
    h.generate("long", prompt="Hi", peer=OTHER)
    ((reply, peer),) = h.sent
    assert peer == OTHER and reply.code == ErrorCode.INVALID_REQUEST and "already in flight" in reply.message
    assert h.refusals == [reply] and h.submitted == []


async def test_a_refusal_after_tokenizing_goes_to_the_client(smollm2_checkpoint):
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    tokenizer.gate.set()
    h = Harness(tokenizer)
    h.refuse_with = ErrorReply(request_id="long", code=ErrorCode.NO_NODE, message="no node is serving")
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("long", messages=[ChatMessage("user", LONG)], chat=BOTH)
        await wait_for(lambda: h.sent)
        tg.cancel_scope.cancel()
    assert h.sent == [(h.refuse_with, PEER)]
    refused = h.submitted[0][3]  # tokenize's PromptError goes to submit, which refuses with its field
    assert isinstance(refused, PromptError) and refused.param == "continue_final_message"


async def test_a_shutdown_refuses_the_pending_requests(smollm2_checkpoint):
    h = Harness(GatedTokenizer(smollm2_checkpoint.tokenizer))
    h.generate("long", prompt=LONG)
    h.requests.shut_down()
    ((reply, peer),) = h.sent
    assert peer == PEER and reply.request_id == "long"
    assert reply.code == ErrorCode.NODE_FAILED and reply.message == SHUTTING_DOWN
    assert h.requests.pending == {}


async def test_beyond_max_pending_a_long_prompt_is_tokenized_on_the_loop(smollm2_checkpoint):
    h = Harness(GatedTokenizer(smollm2_checkpoint.tokenizer), max_pending=1)
    h.generate("first", prompt=LONG)
    h.generate("second", prompt=LONG)
    assert set(h.requests.pending) == {"first"}
    assert h.submitted == [("second", PEER, 100, None)]  # submitted now: the path tokenizes it


async def test_token_ids_and_an_empty_id_are_not_offloaded(smollm2_checkpoint):
    h = Harness(GatedTokenizer(smollm2_checkpoint.tokenizer))
    h.generate("ids", prompt_token_ids=[1] * 1000)
    h.generate("", prompt=LONG)  # refused by the path (an empty id), never pending
    assert h.requests.pending == {} and [s[0] for s in h.submitted] == ["ids", ""]


async def test_a_cancelled_request_is_not_tokenized_and_still_holds_its_place_until_its_turn(smollm2_checkpoint):
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    h = Harness(tokenizer, max_pending=2, max_threads=1)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("first", prompt=LONG)
        await wait_for(lambda: tokenizer.threads)  # tokenizing, held at the gate
        h.generate("second", prompt=LONG)  # waits for the one thread
        h.cancel("second")
        h.generate("third", prompt=LONG)  # the cancelled one still counts: the bound is reached, so on the loop
        assert h.submitted == [("third", PEER, 100, None)]
        tokenizer.gate.set()
        await wait_for(lambda: len(h.submitted) == 2)
        await wait_for(lambda: h.requests._num_jobs == 0)
        tg.cancel_scope.cancel()
    assert h.submitted[1][0] == "first" and len(tokenizer.threads) == 1  # "second" was never tokenized


async def test_a_tokenizer_that_fails_refuses_that_request_and_the_worker_goes_on(smollm2_checkpoint):
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    tokenizer.gate.set()
    inner = tokenizer.encode_unlocked

    def encode_unlocked(text, add_special_tokens=False):
        if text.startswith("boom"):
            raise RuntimeError("a tokenizer's bug")
        return inner(text, add_special_tokens)

    tokenizer.encode_unlocked = encode_unlocked
    h = Harness(tokenizer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("bad", prompt="boom" + LONG)
        await wait_for(lambda: h.sent)
        h.generate("good", prompt=LONG)
        await wait_for(lambda: h.submitted)
        tg.cancel_scope.cancel()
    ((reply, peer),) = h.sent
    assert peer == PEER and reply.request_id == "bad" and reply.code == ErrorCode.INTERNAL
    assert [s[0] for s in h.submitted] == ["good"] and h.requests.pending == {}


async def test_a_request_with_a_constraint_is_prepared_in_a_thread_its_grammar_compiled_there(
    smollm2_checkpoint, monkeypatch
):
    """A short prompt with structured outputs goes the off-loop way too: its constraint compiles in the worker thread
    (~20 ms for a 34 kB schema), so the intake's check on the loop finds it compiled; a bad one is left to it."""
    import controlplane.offload_tokenize as offload
    from engine.structured_output import StructuredOutput, StructuredOutputError

    compiled: list[tuple[int, str]] = []

    def recording_check(spec) -> None:
        compiled.append((threading.get_ident(), spec.json))
        if spec.json == "{bad":
            raise StructuredOutputError("does not compile")

    monkeypatch.setattr(offload, "check_grammar", recording_check)
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    tokenizer.gate.set()
    h = Harness(tokenizer)
    schema = StructuredOutput(json='{"type": "object"}')
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        for rid, spec in (("good", schema), ("bad", StructuredOutput(json="{bad"))):
            msg = ClientGenerate(
                request_id=rid, prompt="Hi", sampling=SamplingParams(max_tokens=2, structured_outputs=spec)
            )
            h.requests.on_generate(Incoming(PEER, msg, [], 100))
        assert set(h.requests.pending) == {"good", "bad"}  # not submitted on the loop
        h.generate("plain", prompt="Hi")  # no constraint, short: at once
        await wait_for(lambda: len(h.submitted) == 3)
        tg.cancel_scope.cancel()
    assert h.submitted[0][0] == "plain"
    assert {s[0] for s in h.submitted[1:]} == {"good", "bad"}  # the bad one too: the intake refuses it, naming why
    hi = ClientGenerate(request_id="x", prompt="Hi", sampling=SamplingParams(max_tokens=2))
    assert all(ids == tokenize(smollm2_checkpoint.tokenizer, hi) for _, _, _, ids in h.submitted[1:])
    assert {json for _, json in compiled} == {'{"type": "object"}', "{bad"}
    assert threading.get_ident() not in {thread for thread, _ in compiled}  # compiled off the loop's thread


class ZeroFleet(Fleet):
    """Model "m" held at zero nodes by a capacity plan (min_nodes 0, its node gone); nodes that join; a ColdStart over
    them (its wait_until re-checked at each change)."""

    def __init__(self, wait_s: float = 300.0) -> None:
        super().__init__()
        self.planner = CapacityPlanner(CapacityPlanConfig(default_min_nodes=0, cold_start_wait_s=wait_s))
        self.planner.plan(0.0, [PlanNode("n0", "m", "default", "L4", 0.24, 0.0, 0, 0, 0.0)], 1.0)
        self.planner.plan(1.0, [], 1.0)  # its node gone: held at zero
        self.path = type("Path", (), {"aliases": {}, "draining": False, "settle_held": self.settle_held})()
        self.settled: list[tuple[str, bool]] = []  # held requests' waits that ended unserved: (id, refused)
        self.cold = ColdStart(self.planner, self, self.path, self.wait_until)

    def snapshot(self, model: str):
        return type("Snapshot", (), {"nodes": [type("View", (), {"node_id": n})() for n in sorted(self.nodes)]})()

    def settle_held(self, held: HeldRefusal, refused: bool) -> None:
        self.settled.append((held.msg.request_id, refused))

    def poke(self) -> None:
        """Something changed (a cancel, a drain): the waits check again."""
        self._changed.set()
        self._changed = anyio.Event()


def zero_harness(tokenizer, wait_s: float = 300.0, **kwargs) -> tuple[ZeroFleet, Harness]:
    """A fleet holding "m" at zero nodes, and a client's requests refused for want of a node until told otherwise."""
    fleet = ZeroFleet(wait_s)
    h = Harness(tokenizer, cold_start=fleet.cold, **kwargs)
    h.refuse_with = NO_NODE
    return fleet, h


NO_NODE = ErrorReply(request_id="r", code=ErrorCode.NO_NODE, message="no live node serves 'm' in cell None")


async def test_a_request_refused_for_want_of_a_node_of_a_pool_at_zero_waits_pending_until_one_joins(
    smollm2_checkpoint,
):
    """Cold start over ZeroMQ (controlplane/cold_start.py): refused for want of a node of a model the plan holds at
    zero, a request is pending (its client's ping knows it; the plan counts it waiting), submitted again at each join
    of its model (a node of another cell: refused again, waits again), and served once one takes it."""
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    tokenizer.gate.set()
    fleet, h = zero_harness(tokenizer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("r", prompt="Hi", recv_ns=55)
        await wait_for(lambda: fleet.planner.waiting == {"m": 1})
        assert h.sent == [] and set(h.requests.pending) == {"r"} and len(h.submitted) == 1
        assert h.ping(["r"]).unknown_request_ids == []
        fleet.join("other-cell")
        await wait_for(lambda: len(h.submitted) == 2)
        await wait_for(lambda: fleet.planner.waiting == {"m": 1})  # refused again: waits again
        assert set(h.requests.pending) == {"r"} and h.sent == []
        h.refuse_with = None
        fleet.join("l4-0")
        await wait_for(lambda: len(h.submitted) == 3)
        await wait_for(lambda: h.requests._num_jobs == 0)
        tg.cancel_scope.cancel()
    assert h.sent == [] and h.requests.pending == {} and fleet.planner.waiting == {}
    assert h.counted == [] and fleet.settled == []  # served in the end: its two refusals were never counted
    rid, peer, arrival_ns, ids = h.submitted[2]
    assert (rid, peer, arrival_ns) == ("r", PEER, 55)  # its arrival: the wait counts in its queue wait and TTFT
    assert ids == tokenize(smollm2_checkpoint.tokenizer, ClientGenerate(request_id="r", prompt="Hi"))


async def test_a_held_request_is_cancelled_by_its_client_and_refused_past_its_wait_or_at_a_drain(smollm2_checkpoint):
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    tokenizer.gate.set()
    fleet, h = zero_harness(tokenizer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("cancelled")
        await wait_for(lambda: fleet.planner.waiting == {"m": 1})
        h.cancel("cancelled", peer=OTHER)  # another client's cancel: ignored
        assert "cancelled" in h.requests.pending
        h.cancel("cancelled")
        fleet.poke()
        await wait_for(lambda: h.requests._num_jobs == 0)
        assert h.sent == [] and fleet.planner.waiting == {} and len(h.submitted) == 1  # dropped, never sent again
        h.generate("drained")
        await wait_for(lambda: fleet.planner.waiting == {"m": 1})
        fleet.path.draining = True
        fleet.poke()
        await wait_for(lambda: h.sent)
        assert h.sent == [(NO_NODE, PEER)] and h.requests.pending == {}  # the refusal stands
        h.generate("while draining")  # not held at all
        assert h.sent[-1] == (NO_NODE, PEER) and len(h.sent) == 2 and h.requests.pending == {}
        tg.cancel_scope.cancel()
    # counted once its wait ended: a cancel (its client's), the refusals its client got
    assert h.counted == [] and fleet.settled == [("cancelled", False), ("drained", True), ("while draining", True)]
    fleet, h = zero_harness(tokenizer, wait_s=0.05)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("late")
        with anyio.fail_after(300):  # the wait's limit is what ends it
            await wait_for(lambda: h.sent)
        tg.cancel_scope.cancel()
    assert h.sent == [(NO_NODE, PEER)] and h.requests.pending == {} and len(h.submitted) == 1
    assert h.counted == [] and fleet.settled == [("late", True)]


async def test_only_a_refusal_for_want_of_a_node_of_a_pool_at_zero_is_held_and_at_most_max_pending(smollm2_checkpoint):
    fleet, h = zero_harness(GatedTokenizer(smollm2_checkpoint.tokenizer), max_pending=1)
    h.refuse_with = ErrorReply(request_id="r", code=ErrorCode.OVERLOADED, message="every queue is full")
    h.generate("overloaded")
    assert h.sent == [(h.refuse_with, PEER)]  # not for want of a node: refused at once
    h.refuse_with = NO_NODE
    h.generate("other model", model="other")  # a model the plan does not hold at zero
    h.generate("held")
    h.generate("beyond max_pending")
    assert [rid for rid in h.requests.pending] == ["held"]
    assert h.sent[1:] == [(NO_NODE, PEER), (NO_NODE, PEER)] and len(h.submitted) == 4
    h.generate("", prompt="Hi")  # no id to hold it by
    assert len(h.sent) == 4
    # each refused one counted once: at once where it could not be held, else once its hold was turned down
    assert [r.code for r in h.counted] == [ErrorCode.OVERLOADED, ErrorCode.NO_NODE, ErrorCode.NO_NODE]
    assert fleet.settled == [("other model", True)]


async def test_a_held_request_whose_pools_queues_are_full_after_a_join_tries_again_until_one_has_room(
    smollm2_checkpoint, monkeypatch
):
    """Over ZeroMQ as over HTTP (controlplane/cold_start.py): once a node joined, a held request refused for the pool's
    full queues waits on, tried again each HELD_RETRY_S, tokenized once; its tries after the first are ``again``."""
    monkeypatch.setattr("controlplane.client_requests.HELD_RETRY_S", 0.01)
    tokenizer = GatedTokenizer(smollm2_checkpoint.tokenizer)
    tokenizer.gate.set()
    fleet, h = zero_harness(tokenizer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(h.requests.serve)
        h.generate("r", prompt="Hi")
        await wait_for(lambda: fleet.planner.waiting == {"m": 1})
        h.refuse_with = ErrorReply(request_id="r", code=ErrorCode.OVERLOADED, message="every queue is full")
        fleet.join("l4-0")
        await wait_for(lambda: len(h.submitted) >= 4)  # tried again on its own, no other node joining
        assert set(h.requests.pending) == {"r"} and h.sent == []
        h.refuse_with = None
        await wait_for(lambda: h.requests._num_jobs == 0)
        tg.cancel_scope.cancel()
    assert h.again[0] is False and all(h.again[1:]) and h.sent == [] and h.counted == [] and fleet.settled == []
    assert len(tokenizer.threads) == 1  # tokenized once, for every try
