"""Request intake: admission refusing the chosen node's queue falls through to the policy's next-best node."""

from __future__ import annotations

import msgspec
import pytest

from backends.fake import ByteTokenizer
from backends.sim.engine import SimTokenizer
from controlplane.admission import AdmissionConfig, AdmissionControl
from controlplane.registry import ClusterRegistry
from controlplane.request_intake import MAX_CHOICES, place_request, tokenize
from controlplane.router.router_config import RouterConfig
from engine.clock import ManualClock
from engine.prompt import PromptError
from engine.sampling_params import SamplingParams
from engine.structured_output import StructuredOutput
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolSpec
from transport.messages import ClientGenerate, ErrorCode, ErrorReply


class _PrefersAlphabetically:
    """Chooses the first node by id among those it is offered; counts its calls."""

    name = "alphabetical"

    def __init__(self) -> None:
        self.num_calls = 0

    def choose(self, request, snapshot):
        self.num_calls += 1
        ids = sorted(n.node_id for n in snapshot.nodes)
        return ids[0] if ids else None


def _place(registry, admission, policy):
    msg = ClientGenerate(request_id="r", prompt_token_ids=[10, 11, 12], sampling=SamplingParams(max_tokens=2))
    return place_request(
        msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry,
        policy=policy, admission=admission, router=RouterConfig(),
    )  # fmt: skip


def test_a_full_node_queue_sends_the_request_to_the_next_best_node(make_hello, make_report):
    registry = ClusterRegistry(ManualClock(), 5.0)
    for node_id in "abc":
        registry.join(make_hello(node_id))
    registry.report(make_report("a", num_waiting=5))  # a's queue is full (limit 2)
    admission = AdmissionControl(AdmissionConfig(max_queue_per_node=2, max_queue_global=100))
    assert _place(registry, admission, _PrefersAlphabetically()).node_id == "b"


def test_a_refusal_everywhere_is_a_429_after_a_bounded_number_of_choices(make_hello, make_report):
    registry = ClusterRegistry(ManualClock(), 5.0)
    for i in range(MAX_CHOICES + 2):
        registry.join(make_hello(f"n{i}"))
        registry.report(make_report(f"n{i}", num_waiting=5))
    admission = AdmissionControl(AdmissionConfig(max_queue_per_node=2, max_queue_global=1000))
    policy = _PrefersAlphabetically()
    refused = _place(registry, admission, policy)
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.OVERLOADED
    assert policy.num_calls == MAX_CHOICES


def test_a_full_cluster_is_refused_without_trying_other_nodes(make_hello, make_report):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))
    registry.join(make_hello("b"))
    registry.report(make_report("a", num_waiting=5))
    admission = AdmissionControl(AdmissionConfig(max_queue_per_node=100, max_queue_global=5))
    policy = _PrefersAlphabetically()
    refused = _place(registry, admission, policy)
    assert isinstance(refused, ErrorReply) and "cluster" in refused.message and policy.num_calls == 1


def test_a_logit_bias_id_past_the_vocabulary_is_refused_naming_the_field(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))
    admission = AdmissionControl(AdmissionConfig(max_queue_per_node=10, max_queue_global=100))
    policy = _PrefersAlphabetically()

    def place(logit_bias):
        sampling = SamplingParams(max_tokens=2, logit_bias=logit_bias)
        msg = ClientGenerate(request_id="r", prompt_token_ids=[10, 11], sampling=sampling)
        return place_request(
            msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry,
            policy=policy, admission=admission, router=RouterConfig(),
        )  # fmt: skip

    refused = place({5: 1.0, 1000: -3.0})  # the vocabulary is 1,000 ids
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.INVALID_REQUEST
    assert refused.param == "logit_bias" and "1000" in refused.message and policy.num_calls == 0
    assert place({999: -3.0}).node_id == "a"
    msg = ClientGenerate(
        request_id="s", prompt_token_ids=[10], sampling=SamplingParams(max_tokens=2, allowed_token_ids=[3, 1000])
    )
    refused = place_request(
        msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry, policy=policy,
        admission=admission, router=RouterConfig(),
    )  # fmt: skip
    assert isinstance(refused, ErrorReply) and refused.param == "allowed_token_ids" and policy.num_calls == 1


def test_bad_words_are_tokenized_once_at_the_intake_and_ids_past_the_vocabulary_refused(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))
    admission = AdmissionControl(AdmissionConfig(max_queue_per_node=10, max_queue_global=100))
    tokenizer = ByteTokenizer()

    def place(msg):
        return place_request(
            msg, model_names=["m"], inflight=set(), tokenizer=tokenizer, registry=registry,
            policy=_PrefersAlphabetically(), admission=admission, router=RouterConfig(),
        )  # fmt: skip

    msg = ClientGenerate(request_id="r", prompt_token_ids=[10, 11], sampling=SamplingParams(bad_words=("no",)))
    assert place(msg).node_id == "a" and msg.sampling.bad_words_token_ids == ((113, 114), (35, 113, 114))
    ids = SamplingParams(bad_words_token_ids=((5,), (400,)))  # the vocabulary: 259 ids
    refused = place(ClientGenerate(request_id="q", prompt_token_ids=[10, 11], sampling=ids))
    assert isinstance(refused, ErrorReply) and refused.param == "bad_words_token_ids" and "400" in refused.message
    # a predicted output likewise (OpenAI's prediction): its tokens as the output would spell them
    msg = ClientGenerate(request_id="p", prompt_token_ids=[10, 11], sampling=SamplingParams(prediction="ok"))
    assert place(msg).node_id == "a" and msg.sampling.prediction_token_ids == tuple(tokenizer.encode("ok", False))
    assert msg.sampling.prediction is None  # the node reads the ids: the text does not travel again
    ids = SamplingParams(prediction_token_ids=(5, 400))
    refused = place(ClientGenerate(request_id="o", prompt_token_ids=[10, 11], sampling=ids))
    assert isinstance(refused, ErrorReply) and refused.param == "prediction_token_ids" and "400" in refused.message
    # a thinking budget's delimiters (engine/thinking_budget.py), so the node forces the end of the thinking
    msg = ClientGenerate(request_id="t", prompt_token_ids=[10, 11], sampling=SamplingParams(thinking_token_budget=9))
    assert place(msg).node_id == "a" and msg.sampling.think_end_token_ids == tuple(tokenizer.encode("</think>", False))
    ids = SamplingParams(thinking_token_budget=9, think_end_token_ids=(5, 400))
    refused = place(ClientGenerate(request_id="u", prompt_token_ids=[10, 11], sampling=ids))
    assert isinstance(refused, ErrorReply) and refused.param == "think_end_token_ids" and "400" in refused.message


def test_a_constraint_that_does_not_compile_is_refused_before_routing(make_hello):
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))
    admission = AdmissionControl(AdmissionConfig(max_queue_per_node=10, max_queue_global=100))
    policy = _PrefersAlphabetically()

    def place(**spec):
        sampling = SamplingParams(max_tokens=2, structured_outputs=StructuredOutput(**spec))
        msg = ClientGenerate(request_id="r", prompt_token_ids=[10, 11], sampling=sampling)
        return place_request(
            msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry,
            policy=policy, admission=admission, router=RouterConfig(),
        )  # fmt: skip

    for spec, words in (
        ({"json": "{not json"}, "JSON schema"),
        ({"json": '{"type": "frobnicate"}'}, "JSON schema"),
        ({"json": "[1, 2]"}, "JSON schema"),
        ({"regex": "[a-"}, "regex"),
        ({"grammar": "start: undefined_rule"}, "grammar"),
    ):
        refused = place(**spec)
        assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.INVALID_REQUEST, spec
        assert refused.param == "structured_outputs" and words in refused.message, refused.message
    assert policy.num_calls == 0
    for spec in ({"json": '{"type": "object"}'}, {"regex": "[a-z]+"}, {"choice": ("x", "y")}, {"json_object": True}):
        assert place(**spec).node_id == "a"


def test_a_chat_with_tools_is_rendered_with_them_and_bad_tools_are_refused():
    tokenizer = ByteTokenizer()
    messages = [ChatMessage("user", "Weather?")]
    tools = [ToolSpec("get_weather", "now", '{"type":"object"}')]
    prompt = tokenizer.decode(tokenize(tokenizer, ClientGenerate(request_id="r", messages=messages, tools=tools)))
    assert '<tools>\n{"type":"function","function":{"name":"get_weather"' in prompt and prompt.endswith(
        "user: Weather?\nassistant: "
    )
    refusals = [
        (ClientGenerate(request_id="r", prompt="hi", tools=tools), "tools"),
        (ClientGenerate(request_id="r", messages=messages, tools=[ToolSpec("no spaces allowed")]), "tools"),
        (ClientGenerate(request_id="r", messages=messages, tools=[ToolSpec("f", parameters='{"a":' * 5000)]), "tools"),
    ]
    for msg, param in refusals:
        with pytest.raises(PromptError) as refused:
            tokenize(tokenizer, msg)
        assert refused.value.param == param


def test_truncate_prompt_tokens_keeps_the_last_tokens_of_a_prompt_or_a_chat():
    tokenizer = ByteTokenizer()
    keep3 = SamplingParams(truncate_prompt_tokens=3)
    ids = tokenize(tokenizer, ClientGenerate(request_id="r", prompt="hello world", sampling=keep3))
    assert tokenizer.decode(ids) == "rld"
    chat = ClientGenerate(request_id="r", messages=[ChatMessage("user", "hi")], sampling=keep3)
    assert tokenizer.decode(tokenize(tokenizer, chat)) == "t: "  # the end of "user: hi\nassistant: "
    long_enough = SamplingParams(truncate_prompt_tokens=100)
    assert tokenize(tokenizer, ClientGenerate(request_id="r", prompt_token_ids=[5, 6], sampling=long_enough)) == [5, 6]


def test_a_template_refusing_the_messages_is_the_clients_error_and_the_intake_serves_on(make_hello):
    class Refusing(SimTokenizer):
        def apply_chat_template(self, messages, add_generation_prompt=True, tools=None):
            raise ValueError("the chat template rejected the messages: roles must alternate")

    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))
    msg = ClientGenerate(request_id="r", messages=[ChatMessage("user", "x")], sampling=SamplingParams(max_tokens=2))
    refused = place_request(
        msg, model_names=["m"], inflight=set(), tokenizer=Refusing(1000, 2), registry=registry,
        policy=_PrefersAlphabetically(), admission=AdmissionControl(AdmissionConfig()), router=RouterConfig(),
    )  # fmt: skip
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.INVALID_REQUEST
    assert refused.param == "messages" and "alternate" in refused.message


def test_chat_options_render_a_prefilled_reply_and_refusals_name_the_field(make_hello):
    tokenizer = ByteTokenizer()
    prefilled = [ChatMessage("user", "hi"), ChatMessage("assistant", "Hello th")]
    cont = ChatTemplateOptions(add_generation_prompt=False, continue_final_message=True)
    chat = ClientGenerate(request_id="r", messages=prefilled, chat=cont, sampling=SamplingParams(max_tokens=2))
    assert tokenizer.decode(tokenize(tokenizer, chat)) == "user: hi\nassistant: Hello th"
    both = msgspec.structs.replace(chat, chat=ChatTemplateOptions(continue_final_message=True))
    with pytest.raises(PromptError) as refused:
        tokenize(tokenizer, both)
    assert refused.value.param == "continue_final_message"
    with pytest.raises(PromptError) as refused:  # options of a chat, on a plain prompt
        tokenize(tokenizer, ClientGenerate(request_id="r", prompt="hi", chat=cont))
    assert refused.value.param == "chat"
    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a"))
    refused = place_request(
        both, model_names=["m"], inflight=set(), tokenizer=tokenizer, registry=registry,
        policy=_PrefersAlphabetically(), admission=AdmissionControl(AdmissionConfig()), router=RouterConfig(),
    )  # fmt: skip
    assert isinstance(refused, ErrorReply) and refused.code is ErrorCode.INVALID_REQUEST
    assert refused.param == "continue_final_message"


def test_only_refusals_for_want_of_capacity_are_told_as_the_pools_unserved_demand(make_hello, make_report):
    """The capacity plan's arrivals count the requests a pool refused for want of capacity (every queue full, the
    cluster full, no live node of the pool), with the pool; a bad request, an unknown model and a tenant over its
    quota are not demand that more nodes would serve."""
    from controlplane.tenants import TenantLimiter, TenantSpec

    registry = ClusterRegistry(ManualClock(), 5.0)
    registry.join(make_hello("a", cell="fast"))
    registry.report(make_report("a", num_waiting=5))
    told: list[tuple[str, str]] = []

    def place(admission, model="", tenant="", logit_bias=None, tenants=None, router=None):
        sampling = SamplingParams(max_tokens=2, logit_bias=logit_bias or {})
        msg = ClientGenerate(request_id="r", prompt_token_ids=[10, 11], sampling=sampling, model=model, tenant=tenant)
        return place_request(
            msg, model_names=["m"], inflight=set(), tokenizer=SimTokenizer(1000, 2), registry=registry,
            policy=_PrefersAlphabetically(), admission=admission, router=router or RouterConfig(), tenants=tenants,
            on_unserved=lambda model, cell: told.append((model, cell)),
        )  # fmt: skip

    full_queues = AdmissionControl(AdmissionConfig(max_queue_per_node=2, max_queue_global=1000))
    full_cluster = AdmissionControl(AdmissionConfig(max_queue_per_node=100, max_queue_global=5))
    roomy = AdmissionControl(AdmissionConfig(max_queue_per_node=100, max_queue_global=1000))
    assert place(full_queues).code is ErrorCode.OVERLOADED
    assert place(full_cluster).code is ErrorCode.OVERLOADED
    assert told == [("m", None), ("m", None)]  # a request of no cell: the model's pool, in any cell
    assert place(full_queues, logit_bias={1000: 1.0}).code is ErrorCode.INVALID_REQUEST
    assert place(roomy, model="other").code is ErrorCode.UNKNOWN_MODEL
    quota = TenantLimiter([TenantSpec("t", requests_per_min=1)])
    assert place(roomy, tenant="t", tenants=quota).node_id == "a"
    assert place(roomy, tenant="t", tenants=quota).code is ErrorCode.OVERLOADED  # its quota, not the pool's
    assert place(roomy).node_id == "a" and len(told) == 2
    registry.leave("a")
    assert place(roomy).code is ErrorCode.NO_NODE
    assert told[2:] == [("m", None)]
    registry.join(make_hello("b", cell="fast"))
    registry.report(make_report("b", num_waiting=5))
    assert (
        place(full_queues, router=RouterConfig(cells_by_traffic_class={"default": "fast"})).code is ErrorCode.OVERLOADED
    )
    assert told[3:] == [("m", "fast")]  # its class's cell
