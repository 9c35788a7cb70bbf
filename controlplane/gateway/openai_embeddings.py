"""OpenAI's embeddings API (``POST /v1/embeddings``) over the fleet's generation requests.

vLLM serves the same route for a decoder-only model run as an embedding model (vllm/entrypoints/openai/
serving_embedding.py, v0.11); what clients send (the ``openai`` SDK, LangChain's OpenAIEmbeddings, aiperf's
embeddings endpoint):

    request   model, input (a string, a list of strings, token ids, or a list of token-id lists: at most MAX_INPUTS,
              sent WAVE at a time, so a large batch does not fill a node's admission queue by itself),
              encoding_format ("float", or "base64": the little-endian float32 bytes, which the ``openai`` SDK asks
              for by default and decodes), user (ignored), vLLM's truncate_prompt_tokens; ``dimensions`` is refused
              (SmolLM2 is not a Matryoshka model, as vLLM refuses it for such a model)
    reply     {object: list, data: [{object: embedding, index, embedding}], model, usage: {prompt_tokens,
              total_tokens}}

Each input is one engine request (``SamplingParams.embed``, ``max_tokens`` 1, greedy), routed, batched and cached as
any other; its first TokenChunk carries the vector (engine/embeddings.py: vLLM's LAST pooling, normalised). A node
whose runner cannot embed (a simulated one) refuses with a 400 naming ``embed``.
"""

from __future__ import annotations

import base64
import struct
from dataclasses import dataclass

import msgspec

from controlplane.frontend import FrontendError, invalid_param
from controlplane.gateway.openai_schema import MAX_BATCH, decode_body, prompts_of
from engine.sampling_params import SamplingParams, SamplingParamsError, show_value
from transport.messages import ErrorCode, TokenChunk

MAX_INPUTS = 2048  # OpenAI's limit per request (LangChain's OpenAIEmbeddings sends 1,000 by default)
WAVE = MAX_BATCH  # inputs in flight at once: the gateway sends a larger batch in waves of this many (``waves``)


class EmbeddingsRequest(msgspec.Struct, kw_only=True):
    model: str | None = None
    input: str | list[str | int | list[int]]
    encoding_format: str | None = None
    dimensions: int | None = None
    user: str | None = None  # accepted and ignored
    truncate_prompt_tokens: int | None = None  # extension (as in vLLM): keep each input's last k tokens
    traffic_class: str | None = None  # extension: the request's traffic class (controlplane/cells.py)


_DECODER = msgspec.json.Decoder(EmbeddingsRequest)


@dataclass(frozen=True, slots=True)
class EmbeddingsArgs:
    model: str | None
    sampling: SamplingParams
    inputs: list[str | list[int]]
    base64: bool
    traffic_class: str | None


def parse_embeddings(body: bytes) -> EmbeddingsArgs:
    """The request as EmbeddingsArgs; FrontendError naming the field at fault."""
    req = decode_body(_DECODER, body)
    if req.encoding_format not in (None, "float", "base64"):
        raise invalid_param("encoding_format", f"must be 'float' or 'base64', got {show_value(req.encoding_format)}")
    if req.dimensions is not None:
        raise invalid_param("dimensions", "is not supported: this model's embeddings have one size")
    prompt, token_ids, batch = prompts_of(req.input, param="input", max_batch=MAX_INPUTS)
    inputs = batch if batch is not None else [prompt if prompt is not None else token_ids]
    try:
        sampling = SamplingParams(
            max_tokens=1, temperature=0.0, embed=True, truncate_prompt_tokens=req.truncate_prompt_tokens
        )
    except SamplingParamsError as exc:
        raise invalid_param(exc.field, str(exc).removeprefix(f"{exc.field}: ")) from None
    return EmbeddingsArgs(req.model, sampling, inputs, req.encoding_format == "base64", req.traffic_class)


class EmbeddingsReply:
    """The inputs' vectors, gathered from their TokenChunks (``add`` each; ``full_object()`` once ``finished``)."""

    def __init__(self, model: str, choice_ids: list[str], base64_encoded: bool) -> None:
        self.model = model
        self.index_of = {request_id: i for i, request_id in enumerate(choice_ids)}
        self.base64 = base64_encoded
        self.vectors: list[list[float] | None] = [None] * len(choice_ids)
        self.num_prompt_tokens = [0] * len(choice_ids)
        self.num_finished = 0

    @property
    def finished(self) -> bool:
        return self.num_finished == len(self.vectors)

    def add(self, chunk: TokenChunk) -> None:
        i = self.index_of.get(chunk.request_id)
        if i is None:
            return
        if chunk.embedding is not None and self.vectors[i] is None:
            self.vectors[i] = chunk.embedding
        self.num_prompt_tokens[i] = max(self.num_prompt_tokens[i], chunk.num_prompt_tokens)
        if chunk.finished:
            if chunk.finish_reason == "abort":
                raise FrontendError(ErrorCode.CANCELLED, "The request was aborted by the serving node")
            if self.vectors[i] is None:  # (a node that finished the request without computing its vector)
                raise FrontendError(ErrorCode.NODE_FAILED, f"input[{i}]'s embedding did not come back")
            self.num_finished += 1

    def full_object(self) -> dict:
        data = [
            {"object": "embedding", "index": i, "embedding": _encoded(vector) if self.base64 else vector}
            for i, vector in enumerate(self.vectors)
        ]
        num_tokens = sum(self.num_prompt_tokens)
        usage = {"prompt_tokens": num_tokens, "total_tokens": num_tokens}
        return {"object": "list", "data": data, "model": self.model, "usage": usage}


class PoolingReply(EmbeddingsReply):
    """vLLM's ``POST /pooling`` reply (vllm/entrypoints/openai/protocol.py PoolingResponse): the same vectors, as
    ``{"id": "pool-…", "object": "list", "created", "model", "data": [{"index", "object": "pooling", "data"}],
    "usage"}``; the pooler here is the embeddings' (LAST, normalised), as vLLM's pooling output for an embedding
    model."""

    def __init__(self, model: str, choice_ids: list[str], base64_encoded: bool, reply_id: str, created: int) -> None:
        super().__init__(model, choice_ids, base64_encoded)
        self.reply_id, self.created = reply_id, created

    def full_object(self) -> dict:
        whole = super().full_object()
        data = [{"index": d["index"], "object": "pooling", "data": d["embedding"]} for d in whole["data"]]
        return {"id": self.reply_id, "object": "list", "created": self.created, "model": self.model, "data": data,
                "usage": whole["usage"]}  # fmt: skip


def waves(inputs: list[str | list[int]]) -> list[list[str | list[int]]]:
    """The inputs in the order they are sent: WAVE at a time."""
    return [inputs[i : i + WAVE] for i in range(0, len(inputs), WAVE)]


def _encoded(vector: list[float] | None) -> str:
    values = vector or []
    return base64.b64encode(struct.pack(f"<{len(values)}f", *values)).decode("ascii")
