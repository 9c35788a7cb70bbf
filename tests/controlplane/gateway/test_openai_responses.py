"""OpenAI's Responses API (``POST /v1/responses``, gateway/openai_responses.py): the official ``openai`` package
against the gateway on loopback, over a scripted frontend: text whole and streamed (every event in order), an
incomplete response, tools (named, "required", "auto", streamed), text.format, a conversation continued with
``previous_response_id`` and with function_call items, the stored response read and deleted, owners kept apart,
the store's bounds, and errors in OpenAI's shape."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import msgspec
import openai
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.response_store import ResponseStore
from transport.chat_wire import ChatMessage, ToolCall
from transport.messages import ErrorCode

MODEL = "smol"
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather now in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
}


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def test_a_response_whole_and_what_reaches_the_frontend(client, frontend):
    reply = client.responses.create(
        model=MODEL, input="Hi?", instructions="Be brief.", max_output_tokens=7, temperature=0.2, top_p=0.9
    )
    assert reply.id.startswith("resp_") and reply.object == "response" and reply.status == "completed"
    assert reply.output_text == "Hello, world" and reply.model == MODEL
    (item,) = reply.output
    assert (item.type, item.role, item.status) == ("message", "assistant", "completed")
    assert (reply.usage.input_tokens, reply.usage.output_tokens, reply.usage.total_tokens) == (5, 3, 8)
    assert (reply.instructions, reply.max_output_tokens, reply.temperature, reply.store) == ("Be brief.", 7, 0.2, True)
    (call,) = frontend.calls
    assert call["messages"] == [ChatMessage("system", "Be brief."), ChatMessage("user", "Hi?")]
    sampling = call["sampling"]
    assert (sampling.max_tokens, sampling.temperature, sampling.top_p) == (7, 0.2, 0.9)


def test_a_response_cut_by_max_output_tokens_is_incomplete(client, frontend, script):
    frontend.chunks = script("a", "b", finish_reason="length")
    reply = client.responses.create(model=MODEL, input="Hi?", max_output_tokens=2)
    assert reply.status == "incomplete" and reply.incomplete_details.reason == "max_output_tokens"
    assert reply.output_text == "ab"


def test_a_streamed_response_sends_every_event_in_order(client, frontend):
    stream = client.responses.create(model=MODEL, input="Hi?", stream=True)
    events = list(stream)
    kinds = [e.type for e in events]
    assert kinds == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        *["response.output_text.delta"] * 3,
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hello, world"
    done = events[-1].response
    assert done.output_text == "Hello, world" and done.usage.output_tokens == 3
    item_ids = {e.item_id for e in events if hasattr(e, "item_id")}
    assert item_ids == {done.output[0].id}  # the streamed item is the completed response's


def test_the_sdk_stream_helper_gathers_the_final_response(client):
    with client.responses.stream(model=MODEL, input="Hi?") as stream:
        text = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert text == final.output_text == "Hello, world"


def test_a_named_tool_and_required(client, frontend, script):
    frontend.chunks = script('{"city": ', '"Paris"}')
    named = {"type": "function", "name": "get_weather"}
    reply = client.responses.create(model=MODEL, input="Weather?", tools=[WEATHER], tool_choice=named)
    (item,) = reply.output
    assert (item.type, item.name, item.arguments) == ("function_call", "get_weather", '{"city": "Paris"}')
    assert item.call_id.startswith("call_") and item.id.startswith("fc_")
    assert frontend.calls[-1]["tools"][0].name == "get_weather"
    assert frontend.calls[-1]["sampling"].structured_outputs is not None
    frontend.chunks = script('[{"name": "get_weather", "parameters": {"city": "Rome"}}]')
    reply = client.responses.create(model=MODEL, input="Weather?", tools=[WEATHER], tool_choice="required")
    assert [(i.type, i.arguments) for i in reply.output] == [("function_call", '{"city": "Rome"}')]


def test_auto_tools_give_text_then_a_call_and_stream_so(client, frontend, script):
    frontend.chunks = script(
        'Looking. <tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}\n</tool_call>'
    )
    reply = client.responses.create(model=MODEL, input="Weather?", tools=[WEATHER])
    assert [i.type for i in reply.output] == ["message", "function_call"]
    assert reply.output_text == "Looking. " and msgspec.json.decode(reply.output[1].arguments) == {"city": "Oslo"}
    assert frontend.calls[-1]["sampling"].structured_outputs is None
    events = list(client.responses.create(model=MODEL, input="Weather?", tools=[WEATHER], stream=True))
    kinds = [e.type for e in events]
    assert kinds.count("response.output_item.added") == kinds.count("response.output_item.done") == 2
    args_done = next(e for e in events if e.type == "response.function_call_arguments.done")
    assert args_done.name == "get_weather" and msgspec.json.decode(args_done.arguments) == {"city": "Oslo"}
    assert [i.type for i in events[-1].response.output] == ["message", "function_call"]


def test_a_streamed_named_call_streams_its_arguments(client, frontend, script):
    frontend.chunks = script('{"city"', ': "Pa', 'ris"}')
    named = {"type": "function", "name": "get_weather"}
    events = list(client.responses.create(model=MODEL, input="W?", tools=[WEATHER], tool_choice=named, stream=True))
    deltas = [e.delta for e in events if e.type == "response.function_call_arguments.delta"]
    assert deltas == ['{"city"', ': "Pa', 'ris"}']
    assert events[-1].response.output[0].arguments == '{"city": "Paris"}'


def test_text_format_json_schema(client, frontend):
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    fmt = {"format": {"type": "json_schema", "name": "thing", "schema": schema, "strict": True}}
    reply = client.responses.create(model=MODEL, input="Hi?", text=fmt)
    spec = frontend.calls[-1]["sampling"].structured_outputs
    assert msgspec.json.decode(spec.json) == schema and reply.text.format.type == "json_schema"
    client.responses.create(model=MODEL, input="Hi?", text={"format": {"type": "json_object"}})
    assert frontend.calls[-1]["sampling"].structured_outputs.json_object


def test_a_conversation_goes_on_from_a_stored_response(client, frontend, script):
    frontend.chunks = script('{"city": "Paris"}')
    named = {"type": "function", "name": "get_weather"}
    first = client.responses.create(
        model=MODEL, input="Weather in Paris?", instructions="Be brief.", tools=[WEATHER], tool_choice=named
    )
    call = first.output[0]
    frontend.chunks = script("Sunny")
    second = client.responses.create(
        model=MODEL,
        previous_response_id=first.id,
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}],
        tools=[WEATHER],
    )
    assert second.previous_response_id == first.id and second.output_text == "Sunny"
    assert frontend.calls[-1]["messages"] == [  # the first's instructions are not carried over (OpenAI's rule)
        ChatMessage("user", "Weather in Paris?"),
        ChatMessage("assistant", "", tool_calls=(ToolCall(call.call_id, "get_weather", '{"city": "Paris"}'),)),
        ChatMessage("tool", "18 C", tool_call_id=call.call_id),
    ]
    third = client.responses.create(model=MODEL, previous_response_id=second.id, input="And tomorrow?")
    assert frontend.calls[-1]["messages"][-2:] == [
        ChatMessage("assistant", "Sunny"),
        ChatMessage("user", "And tomorrow?"),
    ]
    assert client.responses.retrieve(third.id).output_text == third.output_text
    client.responses.delete(third.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(third.id)
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        client.responses.create(model=MODEL, previous_response_id=third.id, input="?")


def test_input_items_become_the_conversation(client, frontend):
    items = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user",
         "content": [{"type": "input_text", "text": "Weather"}, {"type": "input_text", "text": "?"}]},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call", "call_id": "c2", "name": "get_weather", "arguments": '{"city":"Rome"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "5 C"},
        {"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "20 C"}]},
    ]  # fmt: skip
    client.responses.create(model=MODEL, input=items, tools=[WEATHER], store=False)
    calls = (ToolCall("c1", "get_weather", '{"city":"Oslo"}'), ToolCall("c2", "get_weather", '{"city":"Rome"}'))
    assert frontend.calls[-1]["messages"] == [
        ChatMessage("system", "Be brief."),
        ChatMessage("user", "Weather?"),
        ChatMessage("assistant", "", tool_calls=calls),
        ChatMessage("tool", "5 C", tool_call_id="c1"),
        ChatMessage("tool", "20 C", tool_call_id="c2"),
    ]


def test_input_items_list_the_requests_own_input_as_a_cursor_page(client, frontend, script):
    items = [
        {"role": "user", "content": "Weather in Oslo?"},
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "c1", "output": "5 C"},
    ]
    first = client.responses.create(model=MODEL, input=items, instructions="Be brief.", tools=[WEATHER])
    listed = client.responses.input_items.list(first.id, order="asc")
    assert [i.type for i in listed.data] == ["message", "function_call", "function_call_output"]
    assert listed.data[0].content[0].text == "Weather in Oslo?" and listed.data[1].call_id == "c1"
    assert listed.data[2].output == "5 C" and not listed.has_more  # the instructions are not an input item
    newest_first = client.responses.input_items.list(first.id)  # OpenAI's default order: desc
    assert [i.id for i in newest_first.data] == [i.id for i in reversed(listed.data)]
    paged = client.responses.input_items.list(first.id, order="asc", limit=1)
    assert paged.has_more and [i.id for i in paged] == [i.id for i in listed.data]  # the SDK follows ``after``
    second = client.responses.create(model=MODEL, previous_response_id=first.id, input="And Rome?")
    (only,) = client.responses.input_items.list(second.id).data  # its own input, not the conversation before it
    assert only.content[0].text == "And Rome?"
    for query in ({"limit": 0}, {"limit": "x"}, {"order": "up"}, {"after": "msg_nope"}):
        with pytest.raises(openai.BadRequestError):
            client.responses.input_items.list(first.id, **query)
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list("resp_nope")


def test_store_false_keeps_nothing(client):
    reply = client.responses.create(model=MODEL, input="Hi?", store=False)
    assert reply.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(reply.id)


@pytest.mark.anyio
async def test_a_stored_response_is_its_owners_only(frontend):
    keys = ApiKeyConfig(frozenset({"sk-a", "sk-b", "sk-c"}), tenant_of={"sk-c": "acme"})
    app = create_app(frontend, api_keys=keys)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        a, b, c_ = ({"authorization": f"Bearer {k}"} for k in ("sk-a", "sk-b", "sk-c"))
        made = (await c.post("/v1/responses", json={"input": "Hi?"}, headers=a)).json()
        assert (await c.get(f"/v1/responses/{made['id']}", headers=a)).json()["id"] == made["id"]
        for other in (b, c_):
            assert (await c.get(f"/v1/responses/{made['id']}", headers=other)).status_code == 404
            assert (await c.get(f"/v1/responses/{made['id']}/input_items", headers=other)).status_code == 404
            assert (await c.delete(f"/v1/responses/{made['id']}", headers=other)).status_code == 404
            body = {"input": "?", "previous_response_id": made["id"]}
            assert (await c.post("/v1/responses", json=body, headers=other)).status_code == 400
        assert (await c.delete(f"/v1/responses/{made['id']}", headers=a)).json()["deleted"] is True


def test_the_store_keeps_within_its_bounds():
    store = ResponseStore(max_responses=2, max_bytes=2000)
    say = (ChatMessage("user", "x" * 100),)
    for i in range(3):
        assert store.put(None, {"id": f"r{i}"}, say)
    assert [store.get(None, f"r{i}") is not None for i in range(3)] == [False, True, True]
    assert store.num_evicted == 1 and len(store) == 2
    assert store.get(None, "r1") is not None  # r1 used last: r2 goes next
    assert store.put(None, {"id": "r3"}, say) and store.get(None, "r2") is None
    assert not store.put(None, {"id": "big"}, (ChatMessage("user", "x" * 5000),))  # alone over max_bytes
    store.put(None, {"id": "r4"}, (ChatMessage("user", "y" * 1800),))  # within bytes only by dropping the others
    assert len(store) == 1 and store.num_bytes <= store.max_bytes and store.get(None, "r4") is not None
    assert not ResponseStore(0, 100).put(None, {"id": "r"}, say)


def test_a_full_store_evicts_the_flooding_owners_responses_first():
    store = ResponseStore(max_responses=8, max_bytes=1_000_000, max_share=0.25)  # an owner's share: 2
    say = (ChatMessage("user", "x"),)
    for i in range(2):
        store.put("quiet", {"id": f"q{i}"}, say)
    for i in range(10):  # past the bound, the loud owner (over its share) loses its own least recently used
        store.put("loud", {"id": f"l{i}"}, say)
    assert all(store.get("quiet", f"q{i}") is not None for i in range(2))  # its previous_response_id still works
    assert [store.get("loud", f"l{i}") is not None for i in range(10)] == [False] * 4 + [True] * 6
    assert store.num_evicted == 4 and len(store) == 8
    big = (ChatMessage("user", "y" * 300_000),)
    by_bytes = ResponseStore(max_responses=100, max_bytes=1_000_000, max_share=0.5)
    by_bytes.put("quiet", {"id": "q"}, big)
    for i in range(3):  # the bytes bound: the owner holding more than half of it loses its own
        by_bytes.put("loud", {"id": f"l{i}"}, big)
    assert by_bytes.get("quiet", "q") is not None and by_bytes.get("loud", "l0") is None


def _body(**fields) -> dict:
    return {"model": MODEL, "input": "Hi?", **fields}


@pytest.mark.parametrize(
    ("body", "status", "param"),
    [
        ({"model": MODEL}, 400, "input"),
        (_body(input=[]), 400, "input"),
        (_body(input=[{"role": "robot", "content": "x"}]), 400, "input[0].role"),
        (
            _body(input=[{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]),
            400,
            "input[0].content[0]",
        ),
        (_body(input=[{"type": "function_call", "name": "f"}]), 400, "input[0]"),
        (_body(input=[{"type": "computer_call", "action": {}}]), 400, "input[0].type"),  # (reasoning is taken)
        (_body(max_output_tokens=0), 400, "max_output_tokens"),
        (_body(temperature=-1), 400, "temperature"),
        (_body(tool_choice="required"), 400, "tool_choice"),
        (_body(tools=[WEATHER], tool_choice={"type": "function", "name": "nope"}), 400, "tool_choice"),
        (_body(tools=[{"type": "web_search"}]), 400, "tools[0]"),
        (_body(tools=[{**WEATHER, "name": "bad name"}]), 400, "tools"),
        (_body(tools=[WEATHER], tool_choice="required", text={"format": {"type": "json_object"}}), 400, "text.format"),
        (_body(text={"format": {"type": "json_schema", "name": "x"}}), 400, "text.format.schema"),
        (_body(text={"format": {"type": "yaml"}}), 400, "text.format.type"),
        (_body(previous_response_id="resp_nope"), 400, "previous_response_id"),
        (_body(background=True, store=False), 400, "background"),
        (_body(background=True, model="gpt-9"), 404, "model"),
        (_body(include=["message.output_text.logprobs"], top_logprobs=21), 400, "top_logprobs"),
        (_body(top_logprobs=-1), 400, "top_logprobs"),
        (_body(model="gpt-9"), 404, "model"),
    ],
)
def test_errors_are_in_openais_shape(served, body, status, param):
    r = httpx.post(f"{served}/v1/responses", json=body, timeout=30)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"
    assert httpx.post(f"{served}/v1/responses", json=_body()).status_code == 200  # nothing was lost


def test_a_failure_mid_stream_is_an_error_event_then_response_failed(client, frontend):
    frontend.fail_after = 2
    events = list(client.responses.create(model=MODEL, input="Hi?", stream=True))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2].code == "node_failed" and events[-1].response.status == "failed"
    with pytest.raises(openai.NotFoundError):  # a failed response is not stored
        client.responses.retrieve(events[-1].response.id)


def test_a_refusal_before_the_first_token_keeps_its_status(client, frontend):
    from controlplane.frontend import FrontendError

    frontend.fail_before = FrontendError(ErrorCode.OVERLOADED, "busy", retry_after_s=2.0)
    with pytest.raises(openai.RateLimitError):
        client.responses.create(model=MODEL, input="Hi?", stream=True)


@pytest.mark.anyio
async def test_stored_responses_kept_on_disk_are_there_after_a_restart(make_frontend, tmp_path):
    """--files-dir (gateway/response_journal.py): a new gateway on the same directory reads a stored response back,
    lists its input items and continues it; a deleted one stays deleted; the bounds hold at load."""
    from controlplane.gateway import GatewayConfig

    config = GatewayConfig(files_dir=str(tmp_path))

    def gateway(**bounds):
        app = create_app(make_frontend(), config=GatewayConfig(files_dir=str(tmp_path), **bounds))
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")

    async with gateway() as c:
        first = (await c.post("/v1/responses", json={"input": "Hi?", "instructions": "Be brief."})).json()
        gone = (await c.post("/v1/responses", json={"input": "Forget me"})).json()
        await c.delete(f"/v1/responses/{gone['id']}")
        unstored = (await c.post("/v1/responses", json={"input": "Not kept", "store": False})).json()
    assert config.files_dir is not None
    async with gateway() as c:
        read = await c.get(f"/v1/responses/{first['id']}")
        assert read.status_code == 200 and read.json() == first
        (item,) = (await c.get(f"/v1/responses/{first['id']}/input_items")).json()["data"]
        assert item["content"][0]["text"] == "Hi?"
        more = await c.post("/v1/responses", json={"input": "More?", "previous_response_id": first["id"]})
        assert more.status_code == 200
        for missing in (gone["id"], unstored["id"]):
            assert (await c.get(f"/v1/responses/{missing}")).status_code == 404
    async with gateway(responses_store_max=1) as c:  # a lower bound since: the newest kept, the others' files gone
        assert (await c.get(f"/v1/responses/{more.json()['id']}")).status_code == 200
        assert (await c.get(f"/v1/responses/{first['id']}")).status_code == 404
    assert [p.stem for p in (tmp_path / "responses").glob("resp_*.json")] == [more.json()["id"]]
