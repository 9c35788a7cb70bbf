"""Anthropic's Models API on /v1/models (gateway/anthropic_models.py): the anthropic SDK lists and retrieves the
served models in Anthropic's shape (its page and cursor too); the openai SDK still gets OpenAI's list; an unknown
model is a 404; a bad page query a 400."""

from __future__ import annotations

import datetime

import anthropic
import httpx
import openai
import pytest

from controlplane.gateway.anthropic_models import anthropic_models_page

MODEL = "smol"


def test_the_anthropic_sdk_lists_and_retrieves_the_served_models(served):
    with anthropic.Anthropic(base_url=served, api_key="x", max_retries=0, timeout=30) as client:
        (model,) = client.models.list().data
        assert model.id == MODEL and model.type == "model" and model.display_name == MODEL
        assert isinstance(model.created_at, datetime.datetime) and model.lifecycle == "active"
        assert model.max_input_tokens == 1000  # the fake frontend's context length
        assert client.models.retrieve(MODEL).id == MODEL
        with pytest.raises(anthropic.NotFoundError):
            client.models.retrieve("nope")
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as client:
        (model,) = client.models.list().data
        assert model.object == "model" and model.owned_by  # OpenAI's shape without the header


def test_a_bad_page_query_is_a_400_in_anthropics_shape(served):
    headers = {"anthropic-version": "2023-06-01"}
    for query, param in (("limit=0", "limit"), ("limit=x", "limit"), ("after_id=a&before_id=b", "before_id")):
        reply = httpx.get(f"{served}/v1/models?{query}", headers=headers, timeout=30)
        assert reply.status_code == 400 and reply.json()["type"] == "error", reply.text
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error" and param in error["message"]
    missing = httpx.get(f"{served}/v1/models/nope", headers=headers, timeout=30)
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"


def test_the_page_follows_its_cursors_both_ways():
    models = [{"id": f"m{i}", "created": 0, "max_model_len": 8} for i in range(5)]
    first = anthropic_models_page(models, {"limit": "2"})
    assert [m["id"] for m in first["data"]] == ["m0", "m1"] and first["has_more"] and first["last_id"] == "m1"
    after = anthropic_models_page(models, {"limit": "2", "after_id": "m3"})
    assert [m["id"] for m in after["data"]] == ["m4"] and not after["has_more"]
    before = anthropic_models_page(models, {"limit": "2", "before_id": "m3"})
    assert [m["id"] for m in before["data"]] == ["m1", "m2"] and before["has_more"]
    assert anthropic_models_page(models, {"after_id": "gone"})["data"] == []
    assert first["data"][0]["created_at"] == "1970-01-01T00:00:00Z"
