"""OpenAI's stored chat completions (gateway/chat_completion_store.py, chat_completion_routes.py) with the official
``openai`` package against the gateway on loopback, over a scripted frontend: a completion stored (whole and
streamed) with its metadata, read, listed (filters, order, cursor), re-labelled, its messages paged, deleted; one
not asked to be stored is not; owners kept apart; the store's bounds, its journal across a restart, its metrics;
errors in OpenAI's shape, nothing lost."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway import GatewayConfig, create_app
from controlplane.gateway.api_keys import ApiKeyConfig
from controlplane.gateway.chat_completion_store import ChatCompletionStore
from transport.messages import ErrorCode

MODEL = "smol"
ASKED = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": [{"type": "text", "text": "Hi"}, {"type": "text", "text": "there"}]},
]

SEVENTEEN = {str(i): "v" for i in range(17)}  # OpenAI's metadata holds at most 16 pairs


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def test_a_stored_completion_is_read_listed_relabelled_paged_and_deleted(client):
    made = client.chat.completions.create(model=MODEL, messages=ASKED, store=True, metadata={"team": "a"})
    got = client.chat.completions.retrieve(made.id)
    assert got.id == made.id and got.choices[0].message.content == "Hello, world" == made.choices[0].message.content
    assert got.metadata == {"team": "a"} and got.usage.total_tokens == made.usage.total_tokens

    listed = client.chat.completions.list()
    assert [c.id for c in listed.data] == [made.id] and listed.has_more is False
    assert client.chat.completions.list(metadata={"team": "b"}).data == []
    assert client.chat.completions.list(model="other").data == []
    assert [c.id for c in client.chat.completions.list(model=MODEL, metadata={"team": "a"})] == [made.id]

    updated = client.chat.completions.update(made.id, metadata={"team": "b", "run": "2"})
    assert updated.metadata == {"team": "b", "run": "2"} and updated.choices[0].message.content == "Hello, world"
    assert [c.id for c in client.chat.completions.list(metadata={"team": "b"})] == [made.id]

    messages = client.chat.completions.messages.list(made.id)
    assert [m.id for m in messages.data] == [f"{made.id}-0", f"{made.id}-1"]
    assert [(m.role, m.content) for m in messages.data] == [("system", "Be brief."), ("user", "Hi\nthere")]
    assert messages.data[0].content_parts is None and [p.text for p in messages.data[1].content_parts] == [
        "Hi",
        "there",
    ]
    newest = client.chat.completions.messages.list(made.id, order="desc", limit=1)
    assert [m.id for m in newest.data] == [f"{made.id}-1"] and newest.has_more is True

    deleted = client.chat.completions.delete(made.id)
    assert deleted.deleted is True and deleted.id == made.id and deleted.object == "chat.completion.deleted"
    for read in (
        client.chat.completions.retrieve,
        client.chat.completions.messages.list,
        client.chat.completions.delete,
    ):
        with pytest.raises(openai.NotFoundError):
            read(made.id)
    assert client.chat.completions.list().data == []


def test_only_a_completion_asked_to_be_stored_is_kept(client):
    plain = client.chat.completions.create(model=MODEL, messages=ASKED)
    unstored = client.chat.completions.create(model=MODEL, messages=ASKED, store=False, metadata={"team": "a"})
    assert client.chat.completions.list().data == []
    for made in (plain, unstored):
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.retrieve(made.id)


def test_a_streamed_completion_is_stored_once_it_ends(client):
    stream = client.chat.completions.create(model=MODEL, messages=ASKED, store=True, stream=True)
    chunks = list(stream)
    (stored,) = client.chat.completions.list().data
    assert stored.id == chunks[0].id and stored.object == "chat.completion" and stored.metadata == {}
    assert stored.choices[0].message.content == "".join(c.choices[0].delta.content or "" for c in chunks)
    assert stored.choices[0].finish_reason == "stop" and stored.usage.completion_tokens == 3


def test_the_list_is_the_owners_in_the_order_kept_and_its_cursor_is_followed(client):
    made = [client.chat.completions.create(model=MODEL, messages=ASKED, store=True).id for _ in range(5)]
    assert [c.id for c in client.chat.completions.list(limit=2)] == made  # the SDK follows the cursor
    page = client.chat.completions.list(limit=2, order="desc")
    assert [c.id for c in page.data] == made[:2:-1] and page.has_more is True
    assert [c.id for c in client.chat.completions.list(after=made[1], limit=2).data] == made[2:4]
    client.chat.completions.retrieve(made[0])  # a read is a use (the LRU order), not a change of the list's
    assert [c.id for c in client.chat.completions.list().data] == made


def test_a_failed_or_aborted_completion_is_not_stored(client, frontend, script):
    frontend.fail_before = FrontendError(ErrorCode.OVERLOADED, "busy")
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model=MODEL, messages=ASKED, store=True)
    frontend.fail_before = None
    frontend.chunks = script("Hel", "lo", finish_reason="abort")
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model=MODEL, messages=ASKED, store=True)
    assert client.chat.completions.list().data == []


@pytest.mark.anyio
async def test_a_stored_completion_is_its_owners_only(frontend):
    app = create_app(frontend, api_keys=ApiKeyConfig(frozenset({"sk-a", "sk-b"})))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        a, b = ({"authorization": f"Bearer {k}"} for k in ("sk-a", "sk-b"))
        body = {"model": MODEL, "messages": ASKED, "store": True}
        made = (await c.post("/v1/chat/completions", json=body, headers=a)).json()["id"]
        path = f"/v1/chat/completions/{made}"
        assert (await c.get(path, headers=a)).status_code == 200
        for method, url in (("GET", path), ("DELETE", path), ("GET", f"{path}/messages")):
            assert (await c.request(method, url, headers=b)).status_code == 404
        assert (await c.post(path, json={"metadata": {"x": "y"}}, headers=b)).status_code == 404
        assert (await c.get("/v1/chat/completions", headers=b)).json()["data"] == []
        assert [o["id"] for o in (await c.get("/v1/chat/completions", headers=a)).json()["data"]] == [made]


@pytest.mark.parametrize(
    ("method", "path", "body", "param"),
    [
        ("POST", "/v1/chat/completions", {"messages": ASKED, "store": True, "metadata": SEVENTEEN}, "metadata"),
        ("POST", "/v1/chat/completions", {"messages": ASKED, "metadata": {"k" * 65: "v"}}, "metadata"),
        ("POST", "/v1/chat/completions", {"messages": ASKED, "metadata": {"k": "v" * 513}}, "metadata.k"),
        ("POST", "/v1/chat/completions", {"messages": ASKED, "metadata": {"k": 1}}, "metadata[...]"),
        ("POST", "/v1/chat/completions", {"messages": ASKED, "store": "yes"}, "store"),
        ("GET", "/v1/chat/completions?limit=0", None, "limit"),
        ("GET", "/v1/chat/completions?limit=101", None, "limit"),
        ("GET", "/v1/chat/completions?order=newest", None, "order"),
        ("GET", "/v1/chat/completions?after=chatcmpl-none", None, "after"),
    ],
)  # fmt: skip
def test_errors_are_in_openais_shape(served, method, path, body, param):
    reply = httpx.request(method, f"{served}{path}", json=body, timeout=30)
    assert reply.status_code == 400, reply.text
    error = reply.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param


def test_a_bad_update_is_refused_and_changes_nothing(client, served):
    made = client.chat.completions.create(model=MODEL, messages=ASKED, store=True, metadata={"team": "a"})
    for body in ({}, {"metadata": {"k": "v" * 513}}, {"metadata": "a"}, b"{not json"):
        sent = {"content": body} if isinstance(body, bytes) else {"json": body}
        reply = httpx.post(f"{served}/v1/chat/completions/{made.id}", timeout=30, **sent)
        assert reply.status_code == 400 and reply.json()["error"]["type"] == "invalid_request_error"
    assert client.chat.completions.retrieve(made.id).metadata == {"team": "a"}
    assert client.chat.completions.update(made.id, metadata=None).metadata == {}  # null: none, as OpenAI's


def test_the_store_keeps_within_its_bounds_its_largest_owner_losing_first():
    store = ChatCompletionStore(max_completions=3, max_bytes=10_000, max_share=0.5)

    def put(owner: str, completion_id: str, text: str = "hi") -> bool:
        obj = {"id": completion_id, "object": "chat.completion", "model": MODEL, "metadata": {}}
        return store.put(owner, obj, ({"role": "user", "content": text},))

    assert put("a", "a1") and put("b", "b1") and put("b", "b2")
    assert put("b", "b3")  # b holds more than half of 3: its own oldest goes
    assert {(o, i) for o in "ab" for i in (f"{o}1", f"{o}2", f"{o}3") if store.get(o, i)} == {
        ("a", "a1"),
        ("b", "b2"),
        ("b", "b3"),
    }
    assert store.num_evicted == 1 and len(store) == 3
    assert not put("a", "huge", "x" * 20_000) and store.get("a", "huge") is None  # alone over the bytes
    assert store.get("b", "a1") is None and store.page("b", {})["data"][0]["id"] == "b2"
    assert ChatCompletionStore(0, 10_000).put("a", {"id": "x"}, ()) is False  # 0: none kept


def test_a_gateway_that_keeps_none_still_answers(make_frontend):
    from starlette.testclient import TestClient

    app = create_app(make_frontend(), config=GatewayConfig(chat_completions_store_max=0))
    with TestClient(app) as c:
        made = c.post("/v1/chat/completions", json={"messages": ASKED, "store": True})
        assert made.status_code == 200
        assert c.get(f"/v1/chat/completions/{made.json()['id']}").status_code == 404
        assert c.get("/v1/chat/completions").json()["data"] == []


@pytest.mark.anyio
async def test_stored_completions_are_on_disk_and_back_after_a_restart(make_frontend, tmp_path):
    """--files-dir (gateway/chat_completion_journal.py): a new gateway on the same directory lists the completions
    as they were (metadata changed, one deleted), each its owner's, in the order kept; a file that is not a
    completion's is skipped; two owners' completions of one id (a reused X-Request-Id) are two files."""
    keys = ApiKeyConfig(frozenset({"sk-a", "sk-b"}))
    config = GatewayConfig(files_dir=str(tmp_path))
    a, b = ({"authorization": f"Bearer {k}"} for k in ("sk-a", "sk-b"))
    body = {"model": MODEL, "messages": ASKED, "store": True}

    def gateway():
        app = create_app(make_frontend(), config=config, api_keys=keys)
        return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway")

    async with gateway() as c:
        made = [(await c.post("/v1/chat/completions", json=body, headers=a)).json()["id"] for _ in range(3)]
        await c.post(f"/v1/chat/completions/{made[1]}", json={"metadata": {"k": "v"}}, headers=a)
        await c.delete(f"/v1/chat/completions/{made[2]}", headers=a)
        same = {"x-request-id": "shared-id"}
        for owner in (a, b):
            await c.post("/v1/chat/completions", json=body, headers={**owner, **same})
        before = (await c.get("/v1/chat/completions", headers=a)).json()
        messages = (await c.get(f"/v1/chat/completions/{made[0]}/messages", headers=a)).json()
    (tmp_path / "chat_completions" / "chat_0000.json").write_text("not a completion")
    assert len(list((tmp_path / "chat_completions").glob("*.json"))) == 5

    async with gateway() as c:
        assert (await c.get("/v1/chat/completions", headers=a)).json() == before
        assert [o["id"] for o in before["data"]] == [*made[:2], "chatcmpl-shared-id"]
        assert before["data"][1]["metadata"] == {"k": "v"}
        assert (await c.get(f"/v1/chat/completions/{made[0]}/messages", headers=a)).json() == messages
        assert [o["id"] for o in (await c.get("/v1/chat/completions", headers=b)).json()["data"]] == [
            "chatcmpl-shared-id"
        ]
        assert (await c.get(f"/v1/chat/completions/{made[2]}", headers=a)).status_code == 404


@pytest.mark.anyio
async def test_the_stored_completions_on_the_control_planes_metrics(make_frontend):
    from prometheus_client import CollectorRegistry, generate_latest

    from observe.exporter import SnapshotCollector
    from observe.responses_metrics import responses_metrics

    app = create_app(make_frontend(), config=GatewayConfig(chat_completions_store_max=2))
    responses = app.state.responses
    registry = CollectorRegistry()
    collect = responses_metrics(
        responses.store, responses.background, responses.conversations, app.state.chat_completions
    )
    registry.register(SnapshotCollector(collect))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gateway") as c:
        for _ in range(3):
            assert (await c.post("/v1/chat/completions", json={"messages": ASKED, "store": True})).is_success
    text = generate_latest(registry).decode()
    assert "zoo:chat_completions_stored 2.0" in text and "zoo:chat_completions_evicted_total 1.0" in text
    stored = next(line for line in text.splitlines() if line.startswith("zoo:chat_completions_stored_bytes "))
    assert float(stored.split()[1]) > 0
