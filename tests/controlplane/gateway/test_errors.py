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
