"""ErrorCode → HTTP status, OpenAI's error body, Retry-After."""

from __future__ import annotations

import json

import pytest

from controlplane.frontend import FrontendError
from controlplane.gateway.errors import ERROR_KINDS, error_response
from transport.messages import ErrorCode


def test_every_code_has_a_status():
    assert set(ERROR_KINDS) == set(ErrorCode)
    assert all(400 <= kind.status < 600 for kind in ERROR_KINDS.values())


@pytest.mark.parametrize(
    ("retry_after_s", "header", "header_ms"), [(None, "1", "1000"), (0.2, "1", "200"), (7, "7", "7000")]
)
def test_overload_carries_retry_after(retry_after_s, header, header_ms):
    response = error_response(FrontendError(ErrorCode.OVERLOADED, "full", retry_after_s=retry_after_s))
    assert response.status_code == 429
    assert (response.headers["retry-after"], response.headers["retry-after-ms"]) == (header, header_ms)


def test_body_shape():
    response = error_response(FrontendError(ErrorCode.INVALID_REQUEST, "n: only 1", param="n"))
    assert json.loads(response.body) == {
        "error": {"message": "n: only 1", "type": "invalid_request_error", "param": "n", "code": None}
    }


def test_a_503_for_want_of_a_node_says_when_to_retry_if_its_refusal_does():
    from controlplane.gateway.errors import error_headers

    assert error_headers(FrontendError(ErrorCode.NO_NODE, "no live node serves 'm'", 1.0))["Retry-After"] == "1"
    assert error_headers(FrontendError(ErrorCode.NO_NODE, "the batch runner is not running")) == {}
    assert error_headers(FrontendError(ErrorCode.OVERLOADED, "queue full"))["Retry-After"] == "1"
    assert error_headers(FrontendError(ErrorCode.INVALID_REQUEST, "bad", 5.0)) == {}
