"""Embeddings through the whole path with the real model: the official ``openai`` package (its default base64
encoding) → the gateway → the intake → a real agent (SmolLM2 on the torch runner) → back. Each vector is
transformers' final hidden state at the input's last token, normalised (vLLM's LAST pooling); a batch gives each
input's vector as alone, in order, also sent in waves; usage counts the inputs' tokens; the ZeroMQ client library's
``embed`` gets the same vectors; vLLM's score and rerank APIs (and the client's ``score`` and ``rerank``) score by
those vectors' cosine similarities."""

from __future__ import annotations

import httpx
import openai
import pytest
import torch

from client import ZooClient, zoo_client
from controlplane.gateway import openai_embeddings
from tests.controlplane.fleet.one_agent_gateway import check_over_http, smollm2_engine

pytestmark = [pytest.mark.anyio, pytest.mark.slow]
TEXTS = ["The cat sat on the mat.", "Quarterly revenue grew by five percent.", "Bonjour"]


async def test_embeddings_through_the_fleet(controlplane, smollm2_model, smollm2_checkpoint, hf_reference, monkeypatch):
    tokenizer = smollm2_checkpoint.tokenizer
    monkeypatch.setattr(openai_embeddings, "WAVE", 2)  # the batch of three goes in two waves (2, then 1)
    monkeypatch.setattr(zoo_client, "EMBED_WAVE", 1)  # and the client's two inputs one after the other

    @torch.inference_mode()
    def reference(text: str) -> torch.Tensor:
        hidden = hf_reference.model(torch.tensor([tokenizer.encode(text)])).last_hidden_state[0, -1].float()
        return torch.nn.functional.normalize(hidden, dim=0)

    def check(base_url: str, model: str, client_endpoint: str) -> None:
        with openai.OpenAI(base_url=f"{base_url}/v1", api_key="x", max_retries=0, timeout=120) as client:
            batch = client.embeddings.create(model=model, input=TEXTS)
            assert [d.index for d in batch.data] == [0, 1, 2]
            assert batch.usage.prompt_tokens == sum(len(tokenizer.encode(t)) for t in TEXTS)
            for text, item in zip(TEXTS, batch.data):
                assert float(torch.tensor(item.embedding) @ reference(text)) > 0.9999, text
            alone = client.embeddings.create(model=model, input=TEXTS[1], encoding_format="float")
            assert alone.data[0].embedding == pytest.approx(batch.data[1].embedding, abs=1e-4)
        tensors = [torch.tensor(item.embedding) for item in batch.data]
        with httpx.Client(base_url=base_url, timeout=120) as http:  # vLLM's score and rerank, over the same vectors
            scores = http.post("/v1/score", json={"model": model, "text_1": TEXTS[0], "text_2": TEXTS}).json()["data"]
            assert [d["score"] for d in scores] == pytest.approx([float(tensors[0] @ v) for v in tensors], abs=1e-4)
            documents = [TEXTS[1], TEXTS[0], TEXTS[2]]
            ranked = http.post("/rerank", json={"model": model, "query": TEXTS[0], "documents": documents}).json()
            assert ranked["results"][0]["index"] == 1 and ranked["results"][0]["relevance_score"] == pytest.approx(1)
            assert [r["relevance_score"] for r in ranked["results"]] == sorted(scores_of(ranked), reverse=True)
            assert ranked["usage"]["total_tokens"] == sum(
                len(tokenizer.encode(TEXTS[0])) + len(tokenizer.encode(d)) for d in documents
            )
        with ZooClient(client_endpoint, timeout_s=60) as zoo:  # the ZeroMQ client library: the same vectors
            vectors = zoo.embed(TEXTS[:2])
            assert vectors[0] == pytest.approx(batch.data[0].embedding, abs=1e-4)
            assert vectors[1] == pytest.approx(batch.data[1].embedding, abs=1e-4)
            assert zoo.embed(tokenizer.encode(TEXTS[2]))[0] == pytest.approx(batch.data[2].embedding, abs=1e-4)
            assert zoo.score(TEXTS[0], TEXTS) == pytest.approx([d["score"] for d in scores], abs=1e-4)
            assert zoo.score(TEXTS[:2], TEXTS[1:]) == pytest.approx(
                [float(tensors[0] @ tensors[1]), float(tensors[1] @ tensors[2])], abs=1e-4
            )  # N:N, pairwise
            by_client = zoo.rerank(TEXTS[0], documents, top_n=2)  # the client's own rerank: the gateway's ranking
            assert [i for i, _ in by_client] == [r["index"] for r in ranked["results"][:2]]
            assert [score for _, score in by_client] == pytest.approx(scores_of(ranked)[:2], abs=1e-4)

    engine = smollm2_engine(smollm2_model, tokenizer)
    await check_over_http(controlplane, tokenizer, engine, check, with_client_endpoint=True)


def scores_of(ranked: dict) -> list[float]:
    return [r["relevance_score"] for r in ranked["results"]]
