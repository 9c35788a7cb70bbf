"""OpenAI's Conversations API (gateway/conversation_routes.py, conversation_store.py) with the official ``openai``
package against the gateway on loopback, over a scripted frontend: a conversation created, read, updated, its items
added, listed, read and deleted, the conversation deleted; responses naming it continue it and add their input and
output items to it (whole, streamed, in the background, a tool call answered); what cannot be recorded is counted;
owners kept apart; the store's bounds; errors in OpenAI's shape, nothing lost."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import openai
import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.conversation_store import Conversation, ConversationFull, ConversationStore
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


def _texts(items) -> list[tuple[str, str]]:
    return [(i.role, i.content[0].text) for i in items]


def test_a_conversation_and_its_items_created_read_updated_and_deleted(client):
    first = [
        {"role": "developer", "content": "Be brief."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Hi, I am Ada."}]},
    ]
    made = client.conversations.create(items=first, metadata={"topic": "intro"})
    assert made.object == "conversation" and made.id.startswith("conv_") and made.metadata == {"topic": "intro"}
    assert client.conversations.retrieve(made.id).created_at == made.created_at
    assert client.conversations.update(made.id, metadata={"topic": "names"}).metadata == {"topic": "names"}

    added = client.conversations.items.create(made.id, items=[{"role": "assistant", "content": "Hello Ada."}])
    (said,) = added.data
    assert said.type == "message" and said.content[0].type == "output_text" and added.first_id == said.id
    listed = client.conversations.items.list(made.id)  # newest first, OpenAI's default
    assert _texts(listed.data) == [("assistant", "Hello Ada."), ("user", "Hi, I am Ada."), ("system", "Be brief.")]
    assert _texts(client.conversations.items.list(made.id, order="asc", limit=1).data) == [("system", "Be brief.")]
    pages = client.conversations.items.list(made.id, order="asc", limit=2)
    assert [i.id for i in pages] == [i.id for i in reversed(listed.data)]  # the SDK follows the cursor
    assert client.conversations.items.retrieve(said.id, conversation_id=made.id).content[0].text == "Hello Ada."

    after = client.conversations.items.delete(said.id, conversation_id=made.id)
    assert after.id == made.id and len(client.conversations.items.list(made.id).data) == 2
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.retrieve(said.id, conversation_id=made.id)
    with pytest.raises(openai.NotFoundError):
        client.conversations.items.delete(said.id, conversation_id=made.id)
    gone = client.conversations.delete(made.id)
    assert (gone.id, gone.deleted, gone.object) == (made.id, True, "conversation.deleted")
    for call in (
        lambda: client.conversations.retrieve(made.id),
        lambda: client.conversations.update(made.id, metadata={}),
        lambda: client.conversations.delete(made.id),
        lambda: client.conversations.items.list(made.id),
        lambda: client.conversations.items.create(made.id, items=[{"role": "user", "content": "?"}]),
    ):
        with pytest.raises(openai.NotFoundError):
            call()


def test_responses_continue_a_conversation_and_add_their_items(client, frontend, script):
    conversation = client.conversations.create(items=[{"role": "user", "content": "I am Ada."}])
    frontend.chunks = script("Hi ", "Ada")
    first = client.responses.create(model=MODEL, input="Who am I?", conversation=conversation.id)
    assert first.conversation.id == conversation.id and first.output_text == "Hi Ada"
    assert frontend.calls[-1]["messages"] == [ChatMessage("user", "I am Ada."), ChatMessage("user", "Who am I?")]
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert _texts(items) == [("user", "I am Ada."), ("user", "Who am I?"), ("assistant", "Hi Ada")]
    assert items[2].id == first.output[0].id  # the output item as the response gave it
    assert items[1].id == client.responses.input_items.list(first.id).data[0].id  # one id wherever it is listed

    frontend.chunks = script("Still Ada")  # the object form, streamed: its items are added too
    events = list(
        client.responses.create(model=MODEL, input="Sure?", conversation={"id": conversation.id}, stream=True)
    )
    assert events[-1].type == "response.completed" and events[-1].response.conversation.id == conversation.id
    assert frontend.calls[-1]["messages"][-2:] == [ChatMessage("assistant", "Hi Ada"), ChatMessage("user", "Sure?")]
    assert _texts(client.conversations.items.list(conversation.id, limit=2).data) == [
        ("assistant", "Still Ada"),
        ("user", "Sure?"),
    ]
    plain = client.responses.create(model=MODEL, input="Hi?")
    assert plain.conversation is None


def test_a_tool_call_and_its_output_go_on_in_a_conversation(client, frontend, script):
    conversation = client.conversations.create()
    frontend.chunks = script('{"city": "Paris"}')
    named = {"type": "function", "name": "get_weather"}
    first = client.responses.create(
        model=MODEL, input="Weather?", tools=[WEATHER], tool_choice=named, conversation=conversation.id
    )
    call = first.output[0]
    frontend.chunks = script("Sunny")
    answer = {"type": "function_call_output", "call_id": call.call_id, "output": "18 C"}
    client.responses.create(model=MODEL, input=[answer], tools=[WEATHER], conversation=conversation.id, store=False)
    assert frontend.calls[-1]["messages"] == [
        ChatMessage("user", "Weather?"),
        ChatMessage("assistant", "", tool_calls=(ToolCall(call.call_id, "get_weather", '{"city": "Paris"}'),)),
        ChatMessage("tool", "18 C", tool_call_id=call.call_id),
    ]
    kinds = [i.type for i in client.conversations.items.list(conversation.id, order="asc").data]
    assert kinds == ["message", "function_call", "function_call_output", "message"]  # store: false recorded too


def test_a_background_response_adds_its_items_once_it_ends(client, frontend):
    conversation = client.conversations.create()
    created = client.responses.create(model=MODEL, input="Hi?", background=True, conversation=conversation.id)
    deadline = time.monotonic() + 30
    while client.responses.retrieve(created.id).status != "completed" and time.monotonic() < deadline:
        time.sleep(0.01)
    items = client.conversations.items.list(conversation.id, order="asc").data
    assert _texts(items) == [("user", "Hi?"), ("assistant", "Hello, world")]


@pytest.mark.anyio
async def test_a_conversation_full_or_deleted_meanwhile_records_nothing_and_counts_it(make_frontend):
    frontend = make_frontend()
    app = create_app(frontend, config=GatewayConfig(conversations_bytes=600))
    routes = app.state.responses
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        made = (await c.post("/v1/conversations", json={"items": [{"role": "user", "content": "x" * 300}]})).json()
        body = {"input": "y" * 100, "conversation": made["id"]}
        reply = await c.post("/v1/responses", json=body)
        assert reply.status_code == 200 and reply.json()["output"][0]["content"][0]["text"] == "Hello, world"
        assert routes.conversations.num_unrecorded == 1  # over the bound: the conversation is as it was
        assert len((await c.get(f"/v1/conversations/{made['id']}/items")).json()["data"]) == 1
        too_big = {"items": [{"role": "user", "content": "z" * 400}]}
        refused = await c.post(f"/v1/conversations/{made['id']}/items", json=too_big)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "items"
        assert (await c.post("/v1/conversations", json=too_big | {"items": too_big["items"] * 2})).status_code == 400

        def deleted(*_, done=routes.conversations.delete):  # the conversation goes while the response runs
            done(None, made["id"])

        routes.store.put, put = deleted, routes.store.put
        try:
            assert (await c.post("/v1/responses", json={"input": "?", "conversation": made["id"]})).status_code == 200
        finally:
            routes.store.put = put
        assert routes.conversations.num_unrecorded == 2
        assert (await c.post("/v1/responses", json={"input": "?", "conversation": made["id"]})).status_code == 400


@pytest.mark.anyio
async def test_a_conversation_is_its_owners_only(frontend):
    keys = ApiKeyConfig(frozenset({"sk-a", "sk-b"}))
    app = create_app(frontend, api_keys=keys)
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        a, b = ({"authorization": f"Bearer {k}"} for k in ("sk-a", "sk-b"))
        made = (await c.post("/v1/conversations", json={}, headers=a)).json()
        path = f"/v1/conversations/{made['id']}"
        assert (await c.get(path, headers=a)).status_code == 200
        assert (await c.get(path, headers=b)).status_code == 404
        assert (await c.get(f"{path}/items", headers=b)).status_code == 404
        assert (await c.delete(path, headers=b)).status_code == 404
        refused = await c.post("/v1/responses", json={"input": "?", "conversation": made["id"]}, headers=b)
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "conversation"
        assert (await c.post("/v1/responses", json={"input": "?", "conversation": made["id"]}, headers=a)).is_success


def test_the_store_keeps_within_its_bounds():
    store = ConversationStore(max_conversations=2, max_bytes=1000)
    item = {"id": "i", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x" * 100}]}
    for i in range(3):
        store.create(None, Conversation(f"c{i}", 0, {}), (item,))
    assert [store.get(None, f"c{i}") is not None for i in range(3)] == [False, True, True]
    assert store.num_evicted == 1 and len(store) == 2
    assert store.get(None, "c1") is not None  # used last: c2 goes next
    store.create(None, Conversation("c3", 0, {}), (item,) * 5)  # within bytes only by dropping the others
    assert [store.get(None, c) is not None for c in ("c1", "c2", "c3")] == [False, False, True]
    assert store.num_bytes <= store.max_bytes
    with pytest.raises(ConversationFull):
        store.add_items(None, "c3", (item,) * 5)  # alone over the bound: refused, nothing added
    assert len(store.get(None, "c3").items) == 5
    assert store.delete_item(None, "c3", "nope") is False and store.delete_item(None, "c9", "i") is None
    before = store.num_bytes
    assert store.delete_item(None, "c3", "i") is not None and store.num_bytes < before
    assert store.delete(None, "c3") and store.num_bytes == 0
    with pytest.raises(ConversationFull):
        ConversationStore(0, 100).create(None, Conversation("c", 0, {}))


def _body(**fields) -> dict:
    return {"model": MODEL, "input": "Hi?", **fields}


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/conversations", {"items": [{"role": "user", "content": "?"}] * 21}, "items"),
        ("/v1/conversations", {"items": [{"role": "robot", "content": "?"}]}, "items[0].role"),
        ("/v1/conversations", {"items": [{"type": "reasoning"}]}, "items[0].type"),
        (
            "/v1/conversations",
            {"items": [{"role": "user", "content": [{"type": "input_image"}]}]},
            "items[0].content[0]",
        ),
        ("/v1/conversations", {"metadata": {f"k{i}": "v" for i in range(17)}}, "metadata"),
        ("/v1/conversations", {"metadata": {"k" * 65: "v"}}, "metadata"),
        ("/v1/conversations", {"metadata": {"k": "v" * 513}}, "metadata.k"),
        ("/v1/conversations", {"metadata": {"k": 1}}, "metadata[...]"),
        ("/v1/conversations", {"items": "hi"}, "items"),
        ("/v1/responses", _body(conversation="conv_nope"), "conversation"),
        ("/v1/responses", _body(conversation={"id": "conv_nope"}), "conversation"),
        ("/v1/responses", _body(conversation={}), "conversation.id"),
    ],
)
def test_errors_are_in_openais_shape(served, path, body, param):
    r = httpx.post(f"{served}{path}", json=body, timeout=30)
    assert r.status_code == 400, r.text
    error = r.json()["error"]
    assert error["param"] == param and error["message"] and error["type"] == "invalid_request_error"
    assert httpx.post(f"{served}/v1/conversations", json={}).status_code == 200  # nothing was lost


def test_requests_against_a_conversation_refused_by_name(client, served):
    made = client.conversations.create(items=[{"role": "user", "content": "?"}])
    with pytest.raises(openai.BadRequestError, match="previous_response_id"):
        previous = client.responses.create(model=MODEL, input="Hi?")
        client.responses.create(model=MODEL, input="?", conversation=made.id, previous_response_id=previous.id)
    for body in ({"items": []}, {}, {"items": [{"role": "user"}] * 21}):
        r = httpx.post(f"{served}/v1/conversations/{made.id}/items", json=body, timeout=30)
        assert r.status_code == 400 and r.json()["error"]["param"] == "items", r.text
    r = httpx.post(f"{served}/v1/conversations/{made.id}", json={}, timeout=30)
    assert r.status_code == 400 and r.json()["error"]["param"] == "metadata", r.text
    for query in ("order=up", "limit=0", "limit=101", "after=msg_nope"):
        r = httpx.get(f"{served}/v1/conversations/{made.id}/items?{query}", timeout=30)
        assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == "after"
    assert r.json()["error"]["message"].startswith("after")
    assert len(client.conversations.items.list(made.id).data) == 1  # nothing was lost


def test_a_frontend_error_is_not_recorded(client, frontend):
    conversation = client.conversations.create()
    frontend.fail_before = FrontendError(ErrorCode.OVERLOADED, "busy")
    with pytest.raises(openai.APIStatusError):
        client.responses.create(model=MODEL, input="Hi?", conversation=conversation.id)
    assert client.conversations.items.list(conversation.id).data == []


@pytest.mark.anyio
async def test_the_conversations_on_the_control_planes_metrics(make_frontend):
    """observe/responses_metrics.py, registered as zoo/serve.py registers it: conversations kept and their bytes,
    those dropped for the bounds, the responses a conversation could not take."""
    from prometheus_client import CollectorRegistry, generate_latest

    from observe.exporter import SnapshotCollector
    from observe.responses_metrics import responses_metrics

    app = create_app(make_frontend(), config=GatewayConfig(conversations_max=2, conversations_bytes=800))
    responses = app.state.responses
    registry = CollectorRegistry()
    registry.register(
        SnapshotCollector(responses_metrics(responses.store, responses.background, responses.conversations))
    )
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        made = [(await c.post("/v1/conversations", json={})).json()["id"] for _ in range(3)]
        full = {"items": [{"role": "user", "content": "x" * 500}]}
        assert (await c.post(f"/v1/conversations/{made[2]}/items", json=full)).status_code == 200
        assert (await c.post("/v1/responses", json={"input": "y" * 200, "conversation": made[2]})).status_code == 200
    text = generate_latest(registry).decode()
    assert "zoo:conversations_stored 2.0" in text and "zoo:conversations_evicted_total 1.0" in text
    assert "zoo:conversations_unrecorded_responses_total 1.0" in text
    stored = next(line for line in text.splitlines() if line.startswith("zoo:conversations_stored_bytes "))
    assert 500 < float(stored.split()[1]) <= 800


@pytest.mark.anyio
async def test_conversations_kept_on_disk_are_there_after_a_restart(make_frontend, tmp_path):
    """--files-dir: every change is logged (gateway/conversation_journal.py); a new gateway on the same directory
    has the conversations as they were, their owners' only; a torn last line loses that change alone."""
    keys = ApiKeyConfig(frozenset({"sk-a", "sk-b"}))
    config = GatewayConfig(files_dir=str(tmp_path))
    a, b = ({"authorization": f"Bearer {k}"} for k in ("sk-a", "sk-b"))

    def gateway():
        app = create_app(make_frontend(), config=config, api_keys=keys)
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")

    async with gateway() as c:
        made = await c.post("/v1/conversations", json={"items": [{"role": "user", "content": "Hi"}]}, headers=a)
        kept = made.json()["id"]
        await c.post(f"/v1/conversations/{kept}", json={"metadata": {"topic": "greetings"}}, headers=a)
        await c.post("/v1/responses", json={"input": "More?", "conversation": kept}, headers=a)
        items = (await c.get(f"/v1/conversations/{kept}/items?order=asc", headers=a)).json()["data"]
        await c.delete(f"/v1/conversations/{kept}/items/{items[0]['id']}", headers=a)
        gone = (await c.post("/v1/conversations", json={}, headers=a)).json()["id"]
        await c.delete(f"/v1/conversations/{gone}", headers=a)
        torn = (await c.post("/v1/conversations", json={}, headers=b)).json()["id"]
        await c.post(f"/v1/conversations/{torn}/items", json={"items": [{"role": "user", "content": "1"}]}, headers=b)
        before = (await c.get(f"/v1/conversations/{kept}/items", headers=a)).json()
    log = tmp_path / "conversations" / f"{torn}.jsonl"
    log.write_bytes(log.read_bytes() + b'{"op": "items", "items": [{"id": "msg_x", "ty')  # a crash mid-write
    (tmp_path / "conversations" / "notes.jsonl").write_text("not a conversation")
    assert sorted(p.stem for p in (tmp_path / "conversations").glob("conv_*")) == sorted([kept, torn])

    async with gateway() as c:
        after = await c.get(f"/v1/conversations/{kept}", headers=a)
        assert after.status_code == 200 and after.json()["metadata"] == {"topic": "greetings"}
        assert (await c.get(f"/v1/conversations/{kept}/items", headers=a)).json() == before
        assert [i["role"] for i in before["data"]] == ["assistant", "user"]  # its first item was deleted
        assert (await c.get(f"/v1/conversations/{kept}", headers=b)).status_code == 404
        assert (await c.get(f"/v1/conversations/{gone}", headers=a)).status_code == 404
        torn_items = (await c.get(f"/v1/conversations/{torn}/items", headers=b)).json()["data"]
        assert [i["content"][0]["text"] for i in torn_items] == ["1"]
        await c.post(f"/v1/conversations/{torn}/items", json={"items": [{"role": "user", "content": "2"}]}, headers=b)
        assert len((await c.get(f"/v1/conversations/{torn}/items", headers=b)).json()["data"]) == 2


def test_a_journal_beyond_the_bounds_loads_the_newest_and_drops_the_rest(tmp_path):
    import os

    from controlplane.gateway.conversation_journal import ConversationJournal

    journal = ConversationJournal(tmp_path)
    item = {"id": "msg_1", "type": "message", "role": "user", "content": [{"type": "input_text", "text": "x"}]}
    store = ConversationStore(10, 10_000, journal)
    ids = [f"conv_{i:024x}" for i in range(4)]
    for i, conversation_id in enumerate(ids):
        store.create(None, Conversation(conversation_id, i, {}), (item,))
        os.utime(journal.directory / f"{conversation_id}.jsonl", ns=(i * 10**9, i * 10**9))  # used in this order
    smaller = ConversationStore(2, 10_000, ConversationJournal(tmp_path))
    assert smaller.load() == 2
    assert [smaller.get(None, c) is not None for c in ids] == [False, False, True, True]  # the newest two
    assert sorted(p.stem for p in journal.directory.glob("conv_*")) == ids[2:]  # the others' files went
    assert smaller.get(None, ids[3]).items == [item]


@pytest.mark.anyio
async def test_a_gateway_that_keeps_no_conversations_says_so(make_frontend):
    app = create_app(make_frontend(), config=GatewayConfig(conversations_max=0))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        refused = await c.post("/v1/conversations", json={})
        assert refused.status_code == 400 and "keeps no conversations" in refused.json()["error"]["message"]
        assert (await c.post("/v1/responses", json={"input": "?", "conversation": "conv_x"})).status_code == 400
        assert (await c.post("/v1/responses", json={"input": "?"})).status_code == 200


def test_a_full_store_evicts_the_flooding_owners_conversations_first():
    store = ConversationStore(max_conversations=8, max_bytes=100_000, max_share=0.25)  # an owner's share: 2
    for i in range(2):
        store.create("quiet", Conversation(f"q{i}", 0, {}))
    for i in range(6):
        store.create("loud", Conversation(f"l{i}", 0, {}))
    assert len(store) == 8 and store.num_evicted == 0  # not full yet: the loud owner may hold more than its share
    for i in range(6, 10):  # full: the loud owner, over its share, loses its own least recently used
        store.create("loud", Conversation(f"l{i}", 0, {}))
    assert [store.get("quiet", f"q{i}") is not None for i in range(2)] == [True, True]
    assert [store.get("loud", f"l{i}") is not None for i in range(10)] == [False] * 4 + [True] * 6
    assert store.num_evicted == 4
    store.create("quiet", Conversation("q2", 0, {}))  # the quiet owner's: the largest owner's oldest goes
    assert store.get("loud", "l4") is None and all(store.get("quiet", f"q{i}") for i in range(3))
    lone = ConversationStore(max_conversations=4, max_bytes=100_000, max_share=0.25)
    for i in range(6):
        lone.create(None, Conversation(f"c{i}", 0, {}))
    assert len(lone) == 4 and [lone.get(None, f"c{i}") is not None for i in range(6)] == [False] * 2 + [True] * 4
    with pytest.raises(ValueError):
        ConversationStore(4, 100, max_share=0)


@pytest.mark.anyio
async def test_a_failed_disk_write_is_counted_and_the_conversation_goes_on(make_frontend, tmp_path):
    from prometheus_client import CollectorRegistry, generate_latest

    from observe.exporter import SnapshotCollector
    from observe.responses_metrics import responses_metrics

    app = create_app(make_frontend(), config=GatewayConfig(files_dir=str(tmp_path)))
    responses = app.state.responses
    registry = CollectorRegistry()
    collect = responses_metrics(responses.store, responses.background, responses.conversations)
    registry.register(SnapshotCollector(collect))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        made = (await c.post("/v1/conversations", json={})).json()["id"]
        log = tmp_path / "conversations" / f"{made}.jsonl"
        log.unlink()
        log.mkdir()  # its log cannot be written any more (as a full disk would refuse it), even by root
        added = await c.post(f"/v1/conversations/{made}/items", json={"items": [{"role": "user", "content": "x"}]})
        assert added.status_code == 200  # in memory still
        assert len((await c.get(f"/v1/conversations/{made}/items")).json()["data"]) == 1
    text = generate_latest(registry).decode()
    assert 'zoo:gateway_store_write_errors_total{store="conversations"} 1.0' in text
    assert 'zoo:gateway_store_write_errors_total{store="responses"} 0.0' in text
