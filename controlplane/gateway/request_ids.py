"""A request's ids, with a caller's ``X-Request-Id`` (vLLM's rule): the reply's, the engine's, the reply header's.

vLLM takes a request's id from its ``X-Request-Id`` header when one is sent (vLLM PR #10968: ``chatcmpl-<header>``,
``cmpl-<header>``, ``embd-<header>`` ...), so a proxy's or a client's logs meet the server's, and echoes the header in
its reply (PR #9594); since PR #27987 it adds a random suffix to the id it runs the request under, because callers
do send one id twice (a retry that overlaps the original, benchmark clients) and a request id must be unique in the
engine. Here the same::

    X-Request-Id: abc  ─►  reply "id": "chatcmpl-abc"      reply header x-request-id: abc
                           engine requests: "chatcmpl-abc-<12 hex>" (its choices "-<i>" after it), unique
    no header          ─►  "chatcmpl-<32 hex>" for all three

A header that is not 1 to ``MAX_CALLER_ID_CHARS`` characters of ``[A-Za-z0-9_.:=+/@-]`` is not used (the request is
served under an id of ours): an id is repeated in every streamed chunk and in logs, and a request is not refused for a
proxy's header. Used by the completions, chat and embedding routes (embeddings, score, rerank); the Responses and
Messages APIs keep their own ids (``resp_...`` names a stored response, which ``GET /v1/responses/{id}`` retrieves).
"""

from __future__ import annotations

import re
import uuid
from typing import NamedTuple

from starlette.requests import Request

MAX_CALLER_ID_CHARS = 128
_CALLER_ID = re.compile(r"[A-Za-z0-9_.:=+/@-]+", re.ASCII)


class RequestIds(NamedTuple):
    reply: str  # the reply's "id"
    engine: str  # the id its engine requests are named after (unique)
    header: str  # the reply's x-request-id header


def caller_request_id(request: Request) -> str | None:
    """The request's ``X-Request-Id`` when it is one this gateway uses (module docstring), else None."""
    given = request.headers.get("x-request-id")
    if given is None or len(given) > MAX_CALLER_ID_CHARS or not _CALLER_ID.fullmatch(given):
        return None
    return given


def request_ids(request: Request, prefix: str) -> RequestIds:
    """The ids of a request whose reply ids start with ``prefix`` ("chatcmpl", "cmpl", "embd", ...)."""
    own = uuid.uuid4().hex
    given = caller_request_id(request)
    if given is None:
        rid = f"{prefix}-{own}"
        return RequestIds(rid, rid, rid)
    return RequestIds(f"{prefix}-{given}", f"{prefix}-{given}-{own[:12]}", given)
