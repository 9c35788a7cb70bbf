"""vLLM's LoRA endpoints on the gateway, answered with OpenAI-shaped errors.

    POST /v1/load_lora_adapter     {"lora_name": str, "lora_path": str}  -> 200 "Success: ..." | 400
    POST /v1/unload_lora_adapter   {"lora_name": str}                    -> 200 "Success: ..." | 404 | 400

Both exist only when the frontend allows run-time updates (vLLM: ``VLLM_ALLOW_RUNTIME_LORA_UPDATING``;
here ``--allow-runtime-lora-updating``), since loading reads files named by the caller; otherwise they
are unknown paths (404). ``/v1/models`` lists each adapter beside the base models, with ``parent`` (its
base model) and ``root`` (its path), as vLLM does.

A load reads and checks the adapter's files (the whole weights file when the base model's shapes are
known), so it runs in a worker thread: the event loop keeps routing meanwhile. Loads and unloads are
serialized by one lock, so two loads of one name cannot both pass the "already loaded" check.
"""

from __future__ import annotations

from typing import Protocol

import anyio
import msgspec
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from controlplane.gateway.errors import http_error_response

MAX_LORA_BODY_BYTES = 64 * 1024
READ_TIMEOUT_S = 30.0


class LoraFrontend(Protocol):
    """What these routes need from the control plane (controlplane/server.py)."""

    allow_runtime_lora_updating: bool

    def lora_models(self) -> list[tuple[str, str, str]]: ...  # (name, parent, path)

    def load_lora_adapter(self, name: str, path: str) -> None: ...  # raises LoraTableError

    def unload_lora_adapter(self, name: str) -> None: ...  # raises LoraTableError


class _LoadBody(msgspec.Struct, forbid_unknown_fields=False):
    lora_name: str
    lora_path: str


class _UnloadBody(msgspec.Struct, forbid_unknown_fields=False):
    lora_name: str
    lora_int_id: int | None = None


def lora_routes(frontend: object) -> list[Route]:
    """The two routes, or none when the frontend serves no adapters or forbids run-time updates."""
    if not getattr(frontend, "allow_runtime_lora_updating", False):
        return []
    handlers = _LoraHandlers(frontend)
    return [
        Route("/v1/load_lora_adapter", handlers.load, methods=["POST"]),
        Route("/v1/unload_lora_adapter", handlers.unload, methods=["POST"]),
    ]


def lora_model_objects(frontend: object, created_s: int, owned_by: str) -> list[dict]:
    """OpenAI model objects of the adapters (vLLM adds ``root`` and ``parent``)."""
    lora_models = getattr(frontend, "lora_models", None)
    if lora_models is None:
        return []
    return [
        {"id": name, "object": "model", "created": created_s, "owned_by": owned_by, "root": path, "parent": parent}
        for name, parent, path in lora_models()
    ]


class _LoraHandlers:
    def __init__(self, frontend: LoraFrontend) -> None:
        self.frontend = frontend
        self._lock = anyio.Lock()  # one load or unload at a time (loads run in a worker thread)

    async def load(self, request: Request) -> Response:
        body = await _read(request, _LoadBody)
        if isinstance(body, Response):
            return body
        try:
            async with self._lock:  # reading the files off the event loop
                await anyio.to_thread.run_sync(self.frontend.load_lora_adapter, body.lora_name, body.lora_path)
        except ValueError as error:  # LoraTableError
            return http_error_response(getattr(error, "status", 400), str(error))
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' added successfully.")

    async def unload(self, request: Request) -> Response:
        body = await _read(request, _UnloadBody)
        if isinstance(body, Response):
            return body
        try:
            async with self._lock:
                self.frontend.unload_lora_adapter(body.lora_name)
        except ValueError as error:
            return http_error_response(getattr(error, "status", 400), str(error))
        return PlainTextResponse(f"Success: LoRA adapter '{body.lora_name}' removed successfully.")


async def _read(request: Request, kind: type):
    raw = bytearray()
    with anyio.move_on_after(READ_TIMEOUT_S) as deadline:
        async for part in request.stream():
            raw += part
            if len(raw) > MAX_LORA_BODY_BYTES:
                return http_error_response(413, f"The request body is larger than {MAX_LORA_BODY_BYTES} bytes")
    if deadline.cancelled_caught:
        return http_error_response(408, f"The request body did not arrive within {READ_TIMEOUT_S:g} s")
    try:
        return msgspec.json.decode(raw, type=kind)
    except msgspec.ValidationError as error:
        return http_error_response(400, f"Invalid request body: {error}")
    except msgspec.DecodeError as error:
        return http_error_response(400, f"The request body is not valid JSON: {error}")
