"""vLLM's score and rerank APIs over the fleet's embeddings: a bi-encoder's scores, each the cosine similarity of two
texts' embeddings (vLLM's rule for an embedding model: vllm/entrypoints/pooling/score/serving.py ``_embedding_score``
and utils.py ``_cosine_similarity``, v0.11+; a cross-encoder's classifier head SmolLM2 does not have).

    POST /score, /v1/score                 (vLLM; the sentence-transformers CrossEncoder.predict shape)
      request  model, text_1, text_2 (each a string or a list of strings: 1:1, 1:N or N:N pairs),
               truncate_prompt_tokens, traffic_class (ours)
      reply    {id: "score-…", object: "list", created, model, data: [{index, object: "score", score}],
                usage: {prompt_tokens, total_tokens, completion_tokens: 0}}
    POST /rerank, /v1/rerank, /v2/rerank   (vLLM's; Jina's and Cohere's shape, which RAG tools send)
      request  model, query (a string), documents (a list of strings), top_n (0, the default: all),
               return_documents (Jina's and Cohere's; default true: vLLM always returns them), truncate_prompt_tokens
      reply    {id: "rerank-…", model, usage: {total_tokens}, results: [{index, document: {text},
                relevance_score}]}, the most relevant first, at most top_n of them

Every text is one embedding request (``SamplingParams.embed``: engine/embeddings.py's normalised LAST pooling),
routed, batched and cached as any other, sent in waves as /v1/embeddings sends them; a single text_1 (or the query)
is embedded once and paired with every text_2. Usage counts each pair's two texts, as vLLM's does (its pad token
between them excepted). Multimodal inputs, vLLM's ``use_activation``/``softmax`` (a classifier's) and a score
template are refused or have nothing to apply to: a 400 names the field.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import msgspec

from controlplane.frontend import invalid_param
from controlplane.gateway.openai_embeddings import MAX_INPUTS, EmbeddingsReply
from controlplane.gateway.openai_schema import decode_body
from engine.embeddings import cosine, score_pairs
from engine.sampling_params import SamplingParams, SamplingParamsError


class ScoreRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    text_1: str | list[str]
    text_2: str | list[str]
    truncate_prompt_tokens: int | None = None
    use_activation: bool | None = None  # a classifier's (cross-encoder's) option: nothing to apply it to here
    traffic_class: str | None = None  # extension: the request's traffic class (controlplane/cells.py)


class RerankRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    query: str
    documents: list[str]
    top_n: int | None = None  # None or 0: every document (clients of Jina's and Cohere's APIs send null)
    return_documents: bool | None = None  # None: true
    truncate_prompt_tokens: int | None = None
    use_activation: bool | None = None
    traffic_class: str | None = None


_SCORE = msgspec.json.Decoder(ScoreRequest)
_RERANK = msgspec.json.Decoder(RerankRequest)


@dataclass(frozen=True, slots=True)
class ScoreArgs:
    """What to embed (``inputs``: the first side's texts, then the second's) and how to answer."""

    model: str | None
    sampling: SamplingParams
    inputs: list[str]
    num_first: int  # inputs[:num_first] are text_1 (or the query), the rest text_2 (or the documents)
    traffic_class: str | None
    rerank: bool
    top_n: int = 0  # rerank: at most this many results (0: all)
    return_documents: bool = True


def parse_score(body: bytes) -> ScoreArgs:
    """A score request as ScoreArgs; FrontendError naming the field at fault."""
    req = decode_body(_SCORE, body)
    first = _texts(req.text_1, "text_1")
    second = _texts(req.text_2, "text_2")
    try:
        score_pairs(len(first), len(second))
    except ValueError as exc:
        raise invalid_param("text_2", str(exc)) from None
    return _args(req, first, second, rerank=False)


def parse_rerank(body: bytes) -> ScoreArgs:
    """A rerank request as ScoreArgs; FrontendError naming the field at fault."""
    req = decode_body(_RERANK, body)
    query = _texts(req.query, "query")
    documents = _texts(req.documents, "documents")
    top_n = req.top_n or 0
    if top_n < 0:
        raise invalid_param("top_n", f"must be >= 0 (0: every document), got {top_n}")
    return_documents = req.return_documents is not False
    return _args(req, query, documents, rerank=True, top_n=top_n, return_documents=return_documents)


def _texts(value: str | list[str], param: str) -> list[str]:
    texts = [value] if isinstance(value, str) else value
    if not texts:
        raise invalid_param(param, "must hold at least one text")
    for i, text in enumerate(texts):
        if not text:
            raise invalid_param(param if isinstance(value, str) else f"{param}[{i}]", "must not be empty")
    return texts


def _args(req, first: list[str], second: list[str], **answer) -> ScoreArgs:
    if req.use_activation:
        raise invalid_param("use_activation", "applies to a classifier's scores; these are cosine similarities")
    if len(first) + len(second) > MAX_INPUTS:
        raise invalid_param("text_2" if not answer["rerank"] else "documents", f"at most {MAX_INPUTS} texts in all")
    try:
        sampling = SamplingParams(
            max_tokens=1, temperature=0.0, embed=True, truncate_prompt_tokens=req.truncate_prompt_tokens
        )
    except SamplingParamsError as exc:
        raise invalid_param(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None
    return ScoreArgs(req.model, sampling, [*first, *second], len(first), req.traffic_class, **answer)


class ScoreReply:
    """Gathers the texts' embeddings (``add`` each TokenChunk), then scores the pairs (``full_object``)."""

    def __init__(self, args: ScoreArgs, model: str, choice_ids: list[str], request_id: str) -> None:
        self.args = args
        self.request_id = request_id
        self.embeddings = EmbeddingsReply(model, choice_ids, base64_encoded=False)
        self.created = int(time.time())

    @property
    def finished(self) -> bool:
        return self.embeddings.finished

    def add(self, chunk) -> None:
        self.embeddings.add(chunk)

    def pairs(self) -> list[tuple[float, int]]:
        """(score, tokens of the pair) for each pair, in the second side's order."""
        vectors, tokens, k = self.embeddings.vectors, self.embeddings.num_prompt_tokens, self.args.num_first
        return [
            (cosine(vectors[i] or [], vectors[j] or []), tokens[i] + tokens[j])
            for i, j in score_pairs(k, len(vectors) - k)
        ]

    def full_object(self) -> dict:
        args, model = self.args, self.embeddings.model
        pairs = self.pairs()
        num_tokens = sum(t for _, t in pairs)
        if not args.rerank:
            data = [{"index": i, "object": "score", "score": score} for i, (score, _) in enumerate(pairs)]
            usage = {"prompt_tokens": num_tokens, "total_tokens": num_tokens, "completion_tokens": 0}
            return {"id": self.request_id, "object": "list", "created": self.created, "model": model, "data": data,
                    "usage": usage}  # fmt: skip
        documents = args.inputs[args.num_first :]
        order = sorted(range(len(pairs)), key=lambda j: -pairs[j][0])  # the most relevant first (stable on ties)
        if args.top_n:
            order = order[: args.top_n]
        results = []
        for j in order:
            result = {"index": j, "relevance_score": pairs[j][0]}
            if args.return_documents:
                result["document"] = {"text": documents[j]}
            results.append(result)
        return {"id": self.request_id, "model": model, "usage": {"total_tokens": num_tokens}, "results": results}
