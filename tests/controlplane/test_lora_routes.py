"""The LoRA endpoints' handlers: a load reads files in a worker thread, so the event loop keeps serving."""

from __future__ import annotations

import threading

import anyio
import httpx
import pytest
from starlette.applications import Starlette

from controlplane.gateway.lora_routes import lora_routes

pytestmark = pytest.mark.anyio


class _SlowFrontend:
    """A load that blocks until the test lets it go (as reading a large adapter from a slow disk would)."""

    allow_runtime_lora_updating = True

    def __init__(self) -> None:
        self.started, self.release = threading.Event(), threading.Event()
        self.released: bool | None = None
        self.loaded: list[str] = []

    def lora_models(self):
        return []

    def load_lora_adapter(self, name: str, path: str) -> None:
        self.started.set()
        self.released = self.release.wait(10)  # False only if the loop could not run the test meanwhile
        self.loaded.append(name)

    def unload_lora_adapter(self, name: str) -> None:
        self.loaded.remove(name)


async def test_a_load_reads_off_the_event_loop():
    frontend = _SlowFrontend()
    app = Starlette(routes=lora_routes(frontend))
    responses = []
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://zoo") as http:

        async def load():
            responses.append(await http.post("/v1/load_lora_adapter", json={"lora_name": "a", "lora_path": "/a"}))

        async with anyio.create_task_group() as tg:
            tg.start_soon(load)
            assert await anyio.to_thread.run_sync(frontend.started.wait, 10)
            frontend.release.set()  # the loop runs this while the load is still reading
        assert frontend.released is True
        assert responses[0].status_code == 200 and frontend.loaded == ["a"]
        assert (await http.post("/v1/unload_lora_adapter", json={"lora_name": "a"})).status_code == 200
        assert frontend.loaded == []
