"""A multipart/form-data body already read (gateway/request_body.py) parsed into its fields: what the file routes'
uploads (``POST /v1/files``: gateway/batch_routes.py) and the Uploads API's parts (gateway/upload_routes.py) take.
A body that is not multipart, or is malformed, is a 400 naming ``param``; a field other than a file is bounded.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from starlette.datastructures import FormData
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import Request

from controlplane.frontend import invalid_param

MAX_FORM_FIELD_BYTES = 64 * 1024  # a field that is not a file (``purpose``, a part's framing)


async def multipart_form(request: Request, body: bytes, *, param: str, shape: str, max_fields: int) -> FormData:
    """The form (close it when done); ``shape`` says what the body should be, in the error for one that is not
    multipart."""
    if not request.headers.get("content-type", "").startswith("multipart/form-data"):
        raise invalid_param(param, shape)
    try:
        parser = MultiPartParser(
            request.headers, _once(body), max_files=1, max_fields=max_fields, max_part_size=MAX_FORM_FIELD_BYTES
        )
        return await parser.parse()
    except MultiPartException as err:
        raise invalid_param(param, f"the multipart body is malformed: {err.message}") from None


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body
