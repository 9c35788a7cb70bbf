"""Anthropic's list page: how its list routes answer (``GET /v1/messages/batches``, ``/v1/models`` for the anthropic
SDK)::

    {"data": [...], "has_more": bool, "first_id": str | null, "last_id": str | null}

``limit`` how many at most (1..``max_limit``), ``after_id`` the page just after that object (the SDK's next page:
``last_id``), ``before_id`` the page just before it; not both. An ``after_id`` or ``before_id`` that names no object
gives an empty page, as a cursor past the end. A bad query is a 400 naming its parameter. Sans-IO.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from controlplane.frontend import invalid_param


def page_window(ids: Sequence[str], query: Mapping[str, str], *, default_limit: int, max_limit: int):
    """(start, end, has_more) of the page of ``ids`` (in the list's order) that ``query`` asks for."""
    try:
        limit = int(query.get("limit", default_limit))
    except ValueError:
        limit = 0
    if not 1 <= limit <= max_limit:
        raise invalid_param("limit", f"must be an integer in [1, {max_limit}]")
    if "after_id" in query and "before_id" in query:
        raise invalid_param("before_id", "cannot be given beside after_id: name one of them")
    if "before_id" in query:  # the page just before that object
        end = ids.index(query["before_id"]) if query["before_id"] in ids else 0
        return max(0, end - limit), end, end - limit > 0
    after = query.get("after_id")  # the first page, or the one just after ``after_id``
    start = 0 if after is None else ids.index(after) + 1 if after in ids else len(ids)
    end = min(len(ids), start + limit)
    return start, end, end < len(ids)


def anthropic_page(data: list[dict], has_more: bool) -> dict:
    """The page of ``data`` (each with an ``id``)."""
    first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
    return {"data": data, "has_more": has_more, "first_id": first, "last_id": last}
