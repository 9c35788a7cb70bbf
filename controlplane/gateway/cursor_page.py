"""OpenAI's cursor page: how its list routes answer (``GET /v1/files``, ``/v1/batches``,
``/v1/responses/{id}/input_items``, ``/v1/chat/completions`` and its ``messages``)::

    {"object": "list", "data": [...], "first_id": str | null, "last_id": str | null, "has_more": bool}

The query's ``order`` is ``desc`` (OpenAI's default for most: newest first) or ``asc``, ``limit`` how many at most, and
``after`` the id the page starts after (the ``last_id`` of the page before: the openai SDK's list iterators
follow it). A bad one is a 400 naming it. Sans-IO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.frontend import invalid_param
from transport.codec import clip


def cursor_page(
    objects: Sequence[dict],
    query: Mapping[str, str],
    *,
    default_limit: int,
    max_limit: int,
    what: str = "object",
    default_order: str = "desc",
) -> dict:
    """``objects`` (oldest first, each with an ``id``) as one page for ``query``; ``what`` names them in the
    error for an unknown ``after``; ``default_order`` when the query names none (the chat completions' lists are
    ``asc``)."""
    order = query.get("order", default_order)
    if order not in ("asc", "desc"):
        raise invalid_param("order", f"must be 'asc' or 'desc', got {clip(order, 40)!r}")
    limit_text = query.get("limit", str(default_limit))
    if not limit_text.isdigit() or not 1 <= int(limit_text) <= max_limit:
        raise invalid_param("limit", f"must be an integer in [1, {max_limit}], got {clip(limit_text, 40)!r}")
    ordered = list(objects) if order == "asc" else list(reversed(objects))
    after = query.get("after")
    if after is not None:
        ids = [obj["id"] for obj in ordered]
        if after not in ids:
            raise invalid_param("after", f"names no {what}: {clip(after, 60)!r}")
        ordered = ordered[ids.index(after) + 1 :]
    page = ordered[: int(limit_text)]
    return {
        "object": "list",
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(ordered) > len(page),
    }
