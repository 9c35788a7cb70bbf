"""vLLM's score and rerank APIs (gateway/score_rerank.py) over a frontend whose embedding of each text is known:
each score is the pair's cosine similarity, 1:1, 1:N and N:N pairs, rerank's order, top_n and documents, usage as
vLLM counts it, every route's path, and refusals naming their field."""

from __future__ import annotations

import math

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from controlplane.frontend import FrontendError
from controlplane.gateway import create_app
from engine.embeddings import cosine
from transport.messages import ErrorCode, TokenChunk

pytestmark = pytest.mark.anyio

MODEL = "smol"
VECTORS = {  # each text's embedding (not normalised: the score is a cosine all the same)
    "query": [1.0, 0.0, 0.0],
    "close": [0.9, 0.1, 0.0],
    "far": [0.0, 0.0, 2.0],
    "opposite": [-1.0, 0.0, 0.0],
    "middle": [1.0, 1.0, 0.0],
}


def _frontend(make_frontend):
    class Embedding(make_frontend):
        def generate(self, request_id, *, model=None, prompt=None, prompts=None, sampling, **fields):
            self.calls.append({"request_id": request_id, "prompt": prompt, "prompts": prompts, "sampling": sampling})
            texts = prompts if prompts is not None else [prompt]
            ids = [request_id] if len(texts) == 1 else [f"{request_id}-{i}" for i in range(len(texts))]

            async def chunks():
                if model not in (None, MODEL):
                    raise FrontendError(ErrorCode.UNKNOWN_MODEL, f"no node serves {model!r}", param="model")
                for choice_id, text in zip(ids, texts):
                    yield TokenChunk(
                        request_id=choice_id, token_ids=[1], text="x", finished=True, finish_reason="length",
                        num_prompt_tokens=len(text), num_output_tokens=1, embedding=VECTORS[text],
                    )  # fmt: skip

            return chunks()

    return Embedding()


@pytest.fixture
def frontend(make_frontend):
    return _frontend(make_frontend)


@pytest.fixture
async def client(frontend):
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(frontend)), base_url="http://g") as c:
        yield c


def _cos(a: str, b: str) -> float:
    va, vb = VECTORS[a], VECTORS[b]
    return sum(x * y for x, y in zip(va, vb)) / math.hypot(*va) / math.hypot(*vb)


@pytest.mark.parametrize("path", ["/score", "/v1/score"])
async def test_one_text_against_many_is_their_cosine_similarities(client, frontend, path):
    r = await client.post(path, json={"model": MODEL, "text_1": "query", "text_2": ["close", "far", "opposite"]})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == MODEL and body["id"].startswith("score-")
    assert [d["index"] for d in body["data"]] == [0, 1, 2] and {d["object"] for d in body["data"]} == {"score"}
    scores = [d["score"] for d in body["data"]]
    assert scores == pytest.approx([_cos("query", "close"), 0.0, -1.0])
    pair_tokens = 3 * len("query") + len("close") + len("far") + len("opposite")  # the query counted in each pair
    assert body["usage"] == {"prompt_tokens": pair_tokens, "total_tokens": pair_tokens, "completion_tokens": 0}
    (call,) = frontend.calls  # the query embedded once, beside the three others, one wave
    assert call["prompts"] == ["query", "close", "far", "opposite"]
    assert call["sampling"].embed and call["sampling"].max_tokens == 1


async def test_pairs_one_to_one_and_n_to_n(client):
    one = (await client.post("/v1/score", json={"text_1": "query", "text_2": "middle"})).json()
    assert [d["score"] for d in one["data"]] == pytest.approx([math.sqrt(0.5)])
    many = await client.post("/v1/score", json={"text_1": ["query", "far"], "text_2": ["close", "far"]})
    assert [d["score"] for d in many.json()["data"]] == pytest.approx([_cos("query", "close"), 1.0])


@pytest.mark.parametrize("path", ["/rerank", "/v1/rerank", "/v2/rerank"])
async def test_rerank_orders_the_documents_most_relevant_first(client, path):
    documents = ["far", "close", "opposite", "middle"]
    r = await client.post(path, json={"model": MODEL, "query": "query", "documents": documents})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["id"].startswith("rerank-") and body["model"] == MODEL
    assert [x["index"] for x in body["results"]] == [1, 3, 0, 2]  # close, middle, far, opposite
    assert [x["document"]["text"] for x in body["results"]] == ["close", "middle", "far", "opposite"]
    assert [x["relevance_score"] for x in body["results"]] == pytest.approx(
        [_cos("query", "close"), math.sqrt(0.5), 0.0, -1.0]
    )
    assert body["usage"] == {"total_tokens": 4 * len("query") + sum(len(d) for d in documents)}


async def test_top_n_and_return_documents(client):
    body = {"query": "query", "documents": ["far", "close", "middle"], "top_n": 2, "return_documents": False}
    results = (await client.post("/v1/rerank", json=body)).json()["results"]
    assert [x["index"] for x in results] == [1, 2] and all("document" not in x for x in results)
    everything = (await client.post("/v1/rerank", json={**body, "top_n": 10, "return_documents": True})).json()
    assert len(everything["results"]) == 3  # more than there are: all of them
    nulls = (await client.post("/v1/rerank", json={**body, "top_n": None, "return_documents": None})).json()
    assert len(nulls["results"]) == 3 and all("document" in x for x in nulls["results"])  # null: the defaults


@pytest.mark.parametrize(
    "path, body, param",
    [
        ("/v1/score", {"text_1": ["query", "far"], "text_2": ["close", "far", "middle"]}, "text_2"),  # 2 against 3
        ("/v1/score", {"text_1": [], "text_2": "far"}, "text_1"),
        ("/v1/score", {"text_1": "query", "text_2": ["far", ""]}, "text_2[1]"),
        ("/v1/score", {"text_1": "query"}, "text_2"),
        ("/v1/score", {"text_1": {"content": [{"type": "image_url"}]}, "text_2": "far"}, "text_1"),  # multimodal
        ("/v1/score", {"text_1": "query", "text_2": "far", "use_activation": True}, "use_activation"),
        ("/v1/score", {"text_1": "query", "text_2": "far", "truncate_prompt_tokens": -5}, "truncate_prompt_tokens"),
        ("/v1/rerank", {"query": "query", "documents": []}, "documents"),
        ("/v1/rerank", {"query": "query", "documents": ["far"], "top_n": -1}, "top_n"),
        ("/v1/rerank", {"query": ["query"], "documents": ["far"]}, "query"),
        ("/v1/rerank", {"query": "query", "documents": ["far"] * 3000}, "documents"),
    ],
)
async def test_bad_requests_are_400s_naming_the_field(client, frontend, path, body, param):
    r = await client.post(path, json=body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert frontend.calls == []  # nothing was sent


async def test_an_unknown_model_is_a_404(client):
    r = await client.post("/v1/rerank", json={"model": "nope", "query": "query", "documents": ["far"]})
    assert r.status_code == 404 and r.json()["error"]["param"] == "model"


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=8).flatmap(
        lambda a: st.tuples(st.just(a), st.lists(st.floats(-1e3, 1e3), min_size=len(a), max_size=len(a)))
    )
)
def test_cosine_is_bounded_symmetric_and_zero_for_a_zero_vector(pair):
    a, b = pair
    value = cosine(a, b)
    assert -1 - 1e-9 <= value <= 1 + 1e-9 and value == pytest.approx(cosine(b, a))
    assert cosine(a, [0.0] * len(a)) == 0.0 and cosine(a, [*a, 1.0]) == 0.0
    if any(a):
        assert cosine(a, a) == pytest.approx(1.0)


def test_a_batch_of_rerank_requests_runs_as_vllms_run_batch_takes_them(frontend, serve):
    import time

    import msgspec
    import openai

    lines = [
        {"custom_id": f"r{i}", "method": "POST", "url": "/v1/rerank",
         "body": {"model": MODEL, "query": "query", "documents": ["far", "close"], "top_n": 1}}
        for i in range(2)
    ]  # fmt: skip
    content = b"".join(msgspec.json.encode(line) + b"\n" for line in lines)
    with serve(create_app(frontend)) as url, openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0) as c:
        upload = c.files.create(file=("in.jsonl", content), purpose="batch")
        batch = c.batches.create(input_file_id=upload.id, endpoint="/v1/rerank", completion_window="24h")
        deadline = time.monotonic() + 60  # a bounded wait, not a timing check
        while batch.status not in ("completed", "failed") and time.monotonic() < deadline:
            time.sleep(0.02)
            batch = c.batches.retrieve(batch.id)
        assert batch.status == "completed" and batch.request_counts.completed == 2
        out = [msgspec.json.decode(line) for line in c.files.content(batch.output_file_id).text.splitlines()]
    assert {line["custom_id"] for line in out} == {"r0", "r1"}
    assert all([r["index"] for r in line["response"]["body"]["results"]] == [1] for line in out)
