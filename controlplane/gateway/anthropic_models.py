"""Anthropic's Models API on the gateway's ``/v1/models``: a request that carries ``anthropic-version`` (the anthropic
SDK sends it on every request) is answered in Anthropic's shape, so ``client.models.list()`` and ``.retrieve()``
read the served models; any other request gets OpenAI's list (gateway/app.py). Sans-IO.

    GET /v1/models         Anthropic's page (gateway/anthropic_page.py): ``limit`` (1..1000, default 20),
                           ``after_id`` / ``before_id``
    GET /v1/models/{id}    one ModelInfo: {"type": "model", "id", "display_name", "created_at" (RFC 3339),
                           "lifecycle": "active", "max_input_tokens", "max_tokens"}

``created_at`` is when this gateway started (as OpenAI's ``created`` here), and both token bounds are the model's
context length (the served nodes' largest ``max_model_len``; the output's own bound is what the context leaves).
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping

from controlplane.gateway.anthropic_page import anthropic_page, page_window

VERSION_HEADER = "anthropic-version"
DEFAULT_LIMIT, MAX_LIMIT = 20, 1000  # Anthropic's


def anthropic_model(openai_model: dict) -> dict:
    """One model as Anthropic's ModelInfo, from its OpenAI object (gateway/app.py ``_model_object``)."""
    created = datetime.datetime.fromtimestamp(openai_model["created"], datetime.UTC)
    max_len = openai_model.get("max_model_len")
    return {
        "type": "model",
        "id": openai_model["id"],
        "display_name": openai_model["id"],
        "created_at": created.isoformat().replace("+00:00", "Z"),
        "lifecycle": "active",
        "max_input_tokens": max_len,
        "max_tokens": max_len,
    }


def anthropic_models_page(openai_models: list[dict], query: Mapping[str, str]) -> dict:
    """The served models (their OpenAI objects) as Anthropic's page for ``query``; FrontendError naming a bad one."""
    ids = [m["id"] for m in openai_models]
    start, end, more = page_window(ids, query, default_limit=DEFAULT_LIMIT, max_limit=MAX_LIMIT)
    return anthropic_page([anthropic_model(m) for m in openai_models[start:end]], more)
