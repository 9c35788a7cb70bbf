"""The gateway passes a request's traffic class on: the ``x-zoo-class`` header, else the body's
``traffic_class`` field, else "default" (the control plane resolves it: controlplane/cells.py)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    ("headers", "body", "expected"),
    [
        ({"x-zoo-class": "vip"}, {}, "vip"),
        ({}, {"traffic_class": "batch"}, "batch"),
        ({"x-zoo-class": "vip"}, {"traffic_class": "batch"}, "vip"),
        ({}, {}, "default"),
    ],
)
async def test_the_class_comes_from_the_header_or_the_body(client, frontend, headers, body, expected):
    response = await client.post("/v1/completions", json={"prompt": "hi", "max_tokens": 2, **body}, headers=headers)
    assert response.status_code == 200
    (call,) = frontend.calls
    assert call["traffic_class"] == expected


async def test_a_non_string_class_in_the_body_is_a_400_naming_it(client):
    response = await client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": "x"}],
                                                              "traffic_class": 3})  # fmt: skip
    assert response.status_code == 400 and response.json()["error"]["param"] == "traffic_class"
