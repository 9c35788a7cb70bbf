"""The routes that answer with embeddings, or with what is computed from them: OpenAI's ``/v1/embeddings``
(gateway/openai_embeddings.py) and vLLM's score and rerank APIs (gateway/score_rerank.py).

Each parses its body into the texts to embed (``inputs``), sends them as engine requests (``SamplingParams.embed``)
WAVE at a time (a wave starts when the one before it has finished, so a large batch does not fill a node's
admission queue by itself), gathers the vectors into its reply object, and answers with its ``full_object``.
"""

from __future__ import annotations

import time

from starlette.requests import Request
from starlette.responses import Response

from controlplane.frontend import choice_request_ids
from controlplane.gateway.guarded import guarded
from controlplane.gateway.openai_embeddings import EmbeddingsReply, PoolingReply, parse_embeddings, waves
from controlplane.gateway.openai_schema import GenerateArgs
from controlplane.gateway.reply_stream import close_stream, next_chunk, respond
from controlplane.gateway.request_ids import request_ids
from controlplane.gateway.score_rerank import ScoreReply, parse_rerank, parse_score


class EmbeddingRoutes:
    """The handlers, over the gateway's body reader, model naming and request start (gateway/app.py Gateway)."""

    def __init__(self, gateway) -> None:
        self.gateway = gateway

    async def handle_embeddings(self, request: Request) -> Response:
        """OpenAI's ``POST /v1/embeddings``: one engine request per input."""
        return await self._embedded(
            request, parse_embeddings, "embd", lambda args, model, ids, _: EmbeddingsReply(model, ids, args.base64)
        )

    async def handle_pooling(self, request: Request) -> Response:
        """vLLM's ``POST /pooling``: the embeddings' request, its vectors in vLLM's pooling shape."""
        created = int(time.time())
        return await self._embedded(
            request,
            parse_embeddings,
            "pool",
            lambda args, model, ids, reply_id: PoolingReply(model, ids, args.base64, reply_id, created),
        )

    async def handle_score(self, request: Request) -> Response:
        """vLLM's ``POST /score``: text pairs' cosine similarities, by their embeddings."""
        return await self._embedded(request, parse_score, "score", ScoreReply)

    async def handle_rerank(self, request: Request) -> Response:
        """vLLM's ``POST /rerank`` (Jina's, Cohere's shape): documents by relevance to a query."""
        return await self._embedded(request, parse_rerank, "rerank", ScoreReply)

    async def _embedded(self, request: Request, parse, prefix: str, make_reply) -> Response:
        """Embed the parsed request's ``inputs`` (one engine request each, in waves), then answer with
        ``make_reply(args, the model's name, the inputs' request ids, request_id)`` (its ``full_object``, once every
        one is in)."""
        arrival_ns = time.monotonic_ns()
        gateway = self.gateway

        async def serve() -> Response:
            args = parse(await gateway.read_body(request))
            named = request_ids(request, prefix)  # a caller's X-Request-Id, as vLLM takes it
            request_id = named.engine
            batches = waves(args.inputs)
            wave_ids = [request_id] if len(batches) == 1 else [f"{request_id}-w{k}" for k in range(len(batches))]
            ids = [i for wave_id, wave in zip(wave_ids, batches) for i in choice_request_ids(wave_id, len(wave))]
            reply = make_reply(args, gateway.model_name(args.model), ids, named.reply)
            generate = GenerateArgs(model=args.model, sampling=args.sampling, traffic_class=args.traffic_class)
            chunks = self._waves(request, zip(wave_ids, batches), generate, arrival_ns)
            return await respond(request, chunks, reply, False, None, named.header)

        return await guarded(request, serve)

    async def _waves(self, request: Request, batches, generate: GenerateArgs, arrival_ns: int):
        """The chunks of every wave of inputs, a wave started when the one before it has finished."""
        for wave_id, wave in batches:
            first = wave[0]
            if len(wave) > 1:  # a batch (as a completion's)
                more = {"prompts": wave}
            else:
                more = {"prompt": first} if isinstance(first, str) else {"prompt_token_ids": first}
            chunks = self.gateway.start(request, wave_id, generate, arrival_ns, **more)
            try:
                num_finished = 0
                while num_finished < len(wave):
                    chunk = await next_chunk(chunks)
                    num_finished += chunk.finished
                    yield chunk
            finally:
                await close_stream(chunks)
