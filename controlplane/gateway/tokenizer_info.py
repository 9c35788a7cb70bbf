"""vLLM's ``GET /tokenizer_info`` (``--enable-tokenizer-info-endpoint``): the served model's tokenizer configuration,
for a client or a router outside the fleet that tokenizes as the fleet does (a KV-aware router must hash the same
token ids the nodes cache).

vLLM (``vllm/entrypoints/serve/tokenize/serving.py``, ``TokenizerInfo``) answers a Hugging Face tokenizer's
``init_kwargs`` (its tokenizer_config.json, less the file paths), ``tokenizer_class`` and the chat template. The
tokenizer here is read from the checkpoint (GGUF metadata or a Hugging Face folder) into our own class, so the same
keys are built from what it holds: the special tokens and their ids, the added tokens (``added_tokens_decoder``, as
tokenizer_config.json writes it), ``model_max_length`` (the longest context a live node serves, as ``/tokenize``'s
``max_model_len``), ``vocab_size`` and ``chat_template`` (``--chat-template``'s when one was given, as vLLM's).
``tokenizer_class`` names this class, not a Hugging Face one, so no client mistakes it for one it can load.

Off by default, as vLLM's: the chat template and vocabulary details are the operator's to publish.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from controlplane.gateway.errors import http_error_response
from controlplane.gateway.guarded import json_response


def tokenizer_info(tokenizer: Any, max_model_len: int) -> dict:
    """The reply's object for ``tokenizer`` (our checkpoint Tokenizer, or any with fewer of its attributes)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    text = backend.id_to_token if backend is not None else (lambda _id: None)
    info: dict[str, Any] = {"tokenizer_class": type(tokenizer).__name__}
    for name in ("bos", "eos", "pad"):
        token_id = getattr(tokenizer, f"{name}_token_id", None)
        info[f"{name}_token"] = None if token_id is None else text(token_id)
        info[f"{name}_token_id"] = token_id
    added = backend.get_added_tokens_decoder() if backend is not None else {}
    info["added_tokens_decoder"] = {
        str(token_id): {"content": token.content, "special": token.special} for token_id, token in sorted(added.items())
    }
    info["additional_special_tokens"] = [token.content for _, token in sorted(added.items()) if token.special]
    info["vocab_size"] = getattr(tokenizer, "vocab_size", None)
    info["model_max_length"] = max_model_len
    chat_template = getattr(tokenizer, "chat_template", None)
    if chat_template:
        info["chat_template"] = chat_template
    return info


def tokenizer_info_routes(frontend: Any, enabled: bool) -> list[Route]:
    """``GET /tokenizer_info`` when the operator turned it on, else none (an unknown path: 404, as vLLM's)."""
    if not enabled:
        return []

    async def handle(request: Request) -> Response:
        tokenizer = getattr(frontend, "tokenizer", None)
        if tokenizer is None:
            return http_error_response(501, "This server has no tokenizer", code="not_implemented")
        return json_response(tokenizer_info(tokenizer, getattr(frontend, "max_model_len", None) or 0))

    return [Route("/tokenizer_info", handle, methods=["GET"])]
