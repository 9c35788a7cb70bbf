"""POST /invocations (gateway/invocations.py): SageMaker's path serves each body by the route its shape names, in
vLLM's order, with that route's reply, stream and errors; a body no route takes is a 400 naming what was expected."""

from __future__ import annotations

import httpx
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.app import GatewayConfig
from controlplane.gateway.invocations import ROUTES, invocations, route_for
from transport.messages import TokenChunk

pytestmark = pytest.mark.anyio

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
BODIES = {
    "/v1/chat/completions": CHAT,
    "/v1/completions": {"prompt": "hi", "max_tokens": 3},
    "/v1/embeddings": {"input": ["hi", "there"]},
    "/v1/rerank": {"query": "hi", "documents": ["a", "b"]},
    "/v1/score": {"text_1": "hi", "text_2": ["a", "b"]},
}


def _frontend(make_frontend):
    class Both(make_frontend):
        """Every request's one chunk carries a text and an embedding: each route takes what it needs."""

        def generate(self, request_id, *, model=None, prompt=None, prompts=None, sampling, **fields):
            self.calls.append({"request_id": request_id, "prompt": prompt, "prompts": prompts, **fields})
            num = len(prompts) if prompts is not None else 1
            ids = [request_id] if num == 1 else [f"{request_id}-{i}" for i in range(num)]

            async def chunks():
                for choice_id in ids:
                    yield TokenChunk(
                        request_id=choice_id, token_ids=[1], text="x", finished=True, finish_reason="length",
                        num_prompt_tokens=2, num_output_tokens=1, embedding=[1.0, 0.0],
                    )  # fmt: skip

            return chunks()

    return Both()


@pytest.fixture
def frontend(make_frontend):
    return _frontend(make_frontend)


@pytest.fixture
async def client(frontend):
    app = create_app(frontend, config=GatewayConfig(max_body_bytes=4096))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://g") as c:
        yield c


@pytest.mark.parametrize("path", list(BODIES))
async def test_a_body_is_served_as_its_route_serves_it(client, path):
    direct = await client.post(path, json=BODIES[path])
    invoked = await client.post("/invocations", json=BODIES[path])
    assert direct.status_code == invoked.status_code == 200, invoked.text
    mine, theirs = invoked.json(), direct.json()
    assert set(mine) == set(theirs) and mine.get("object") == theirs.get("object")
    for volatile in ("id", "created"):
        mine.pop(volatile, None), theirs.pop(volatile, None)
    assert mine == theirs


async def test_a_stream_streams(client):
    async with client.stream("POST", "/invocations", json={**CHAT, "stream": True}) as reply:
        assert reply.status_code == 200 and reply.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in reply.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]" and '"chat.completion.chunk"' in lines[0]


async def test_the_routes_own_checks_answer(client):
    reply = await client.post("/invocations", json={"messages": "not a list"})
    assert reply.status_code == 400 and reply.json()["error"]["param"] == "messages"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "could not parse the JSON body"),
        (b"[1, 2]", "must be a JSON object"),
        (b'{"prompt": "hi", "x": ' + b"[" * 1500 + b"]" * 1500 + b"}", "nested too deeply"),
        (b'{"query": "only a query"}', "Expected one of: /v1/chat/completions ('messages')"),
        (b"{}", "/v1/score ('text_1' and 'text_2')"),
    ],
)
async def test_a_body_no_route_takes_is_a_400_naming_what_was_expected(client, frontend, body, message):
    reply = await client.post("/invocations", content=body, headers={"content-type": "application/json"})
    assert reply.status_code == 400 and message in reply.json()["error"]["message"]
    assert reply.json()["error"]["type"] == "invalid_request_error" and not frontend.calls


async def test_a_body_over_the_cap_is_a_413_before_it_is_routed(client, frontend):
    reply = await client.post("/invocations", json={"prompt": "x" * 5000})
    assert reply.status_code == 413 and not frontend.calls


def test_vllms_order_decides_a_body_with_several_shapes():
    assert route_for(b'{"messages": [], "prompt": "p", "input": "i"}') == "/v1/chat/completions"
    assert route_for(b'{"prompt": "p", "input": "i"}') == "/v1/completions"
    assert route_for(b'{"input": "i", "query": "q", "documents": []}') == "/v1/embeddings"
    assert [path for _, path in ROUTES][-2:] == ["/v1/rerank", "/v1/score"]  # rerank before score, as vLLM's
    with pytest.raises(ValueError, match="no handler for"):
        invocations({}, None)
