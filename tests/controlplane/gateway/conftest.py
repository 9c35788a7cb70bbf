"""A scripted fake Frontend, an httpx client on the ASGI app, and the app served by uvicorn on loopback.

Under ``--import-mode=importlib`` a test module cannot import this file, so helpers are fixtures
(``script`` returns the chunk factory, ``make_frontend`` the FakeFrontend class).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field

import anyio
import httpx
import msgspec
import pytest
import uvicorn

from backends.fake import ByteTokenizer
from controlplane.frontend import FrontendError, choice_request_ids
from controlplane.gateway import create_app
from controlplane.model_aliases import resolve_model
from engine.sampling_params import SamplingParams
from transport.chat_wire import ChatMessage, ChatTemplateOptions, ToolSpec
from transport.messages import ErrorCode, TokenChunk

MODEL = "smol"  # the FakeFrontend's default (and only) model


def _script(*texts: str, finish_reason: str = "stop", num_prompt_tokens: int = 5) -> list[TokenChunk]:
    """One chunk of one token per text; the last one finishes the request."""
    return [
        TokenChunk(
            token_ids=[100 + i],
            text=text,
            finished=i == len(texts) - 1,
            finish_reason=finish_reason if i == len(texts) - 1 else None,
            num_prompt_tokens=num_prompt_tokens,
            num_output_tokens=i + 1,
        )
        for i, text in enumerate(texts)
    ]


@dataclass
class FakeFrontend:
    """Streams ``chunks`` for every request, after the configured failures have had their say.

    fail_before: raised before the first chunk.   fail_after: NODE_FAILED raised after that many chunks.
    hang_after: after that many chunks, wait until cancelled.   ``cancelled`` is set when a request's
    iterator is closed or cancelled before its last chunk was taken.
    """

    model_names: list[str] = field(default_factory=lambda: [MODEL])
    model_aliases: dict[str, str] = field(default_factory=dict)  # resolved as the control plane's intake does
    tokenizer: ByteTokenizer | None = field(default_factory=ByteTokenizer)
    max_model_len: int = 1000
    max_prompt_chars: int = 1000  # the fake's "context length": a longer prompt is refused as too long
    chunks: list[TokenChunk] = field(default_factory=lambda: _script("Hello", ",", " world"))
    fail_before: FrontendError | None = None
    fail_after: int | None = None
    hang_after: int | None = None
    health_status: str = "ok"
    calls: list[dict] = field(default_factory=list)
    cancelled: threading.Event = field(default_factory=threading.Event)
    num_streaming: threading.Semaphore = field(default_factory=lambda: threading.Semaphore(0))

    def generate(
        self,
        request_id: str,
        *,
        model: str | None,
        prompt: str | None = None,
        messages: list[ChatMessage] | None = None,
        prompt_token_ids: list[int] | None = None,
        sampling: SamplingParams,
        traffic_class: str = "default",
        arrival_ns: int | None = None,
        num_choices: int = 1,
        tools: list[ToolSpec] | None = None,
        prompts: list[str | list[int]] | None = None,
        priority: int = 0,
        trace_headers: dict[str, str] | None = None,
        chat: ChatTemplateOptions | None = None,
        return_prompt_token_ids: bool = False,
    ) -> AsyncIterator[TokenChunk]:
        call = dict(request_id=request_id, model=model, prompt=prompt, messages=messages, priority=priority)
        call.update(trace_headers=trace_headers, chat=chat, return_prompt_token_ids=return_prompt_token_ids)
        call.update(prompt_token_ids=prompt_token_ids, sampling=sampling, traffic_class=traffic_class)
        call.update(arrival_ns=arrival_ns, num_choices=num_choices, tools=tools, prompts=prompts)
        self.calls.append(call)
        num_requests = num_choices * len(prompts or [None])
        return self._stream(model, prompt, messages, choice_request_ids(request_id, num_requests))

    async def _stream(
        self, model: str | None, prompt: str | None, messages: list[ChatMessage] | None, choice_ids: list[str]
    ) -> AsyncIterator[TokenChunk]:
        """Every choice gets the script's chunks (under its request id), the choices interleaved."""
        done = False
        try:
            if model is not None and resolve_model(self.model_aliases, model) not in self.model_names:
                raise FrontendError(ErrorCode.UNKNOWN_MODEL, f"no node serves {model!r}", param="model")
            num_chars = len(prompt or "") + sum(len(m.content) for m in messages or [])
            if num_chars > self.max_prompt_chars:
                raise FrontendError(ErrorCode.PROMPT_TOO_LONG, "prompt is longer than the context")
            if self.fail_before is not None:
                raise self.fail_before
            for i, chunk in enumerate(self.chunks):
                if i == self.fail_after:
                    raise FrontendError(ErrorCode.NODE_FAILED, "node n0 died")
                if i == self.hang_after:
                    self.num_streaming.release()
                    await anyio.sleep_forever()
                for choice_id in choice_ids:
                    yield msgspec.structs.replace(chunk, request_id=choice_id)
            done = True
        finally:
            if not done:
                self.cancelled.set()

    def health(self) -> dict:
        return {"status": self.health_status, "nodes": 1 if self.health_status == "ok" else 0}


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
def script():
    return _script


@pytest.fixture
def make_frontend() -> type[FakeFrontend]:
    return FakeFrontend


@pytest.fixture
def frontend() -> FakeFrontend:
    return FakeFrontend()


class FirstOnly(FakeFrontend):
    """Answers its first request; every later one waits until the gateway stops (a restart's test: what the first
    gateway answered, and what the next one must run)."""

    def generate(self, request_id, **kwargs):
        if self.calls:
            self.calls.append(kwargs)
            return self._hang()
        return super().generate(request_id, **kwargs)

    async def _hang(self):
        await anyio.sleep_forever()
        yield


@pytest.fixture
def first_only() -> type[FirstOnly]:
    return FirstOnly


@pytest.fixture
async def client(frontend: FakeFrontend) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=create_app(frontend))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        yield c


class _Server(uvicorn.Server):
    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.ready = threading.Event()

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.ready.set()


def _serve(app) -> Iterator[str]:
    """``app`` on a free loopback port, served by uvicorn in a thread (its lifespan run); yields its base URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    # log_config None: uvicorn's dictConfig would close every logging handler there is, one an earlier test left
    # on pytest's captured stderr among them (absl's, once JAX is imported): that capture then fails at teardown
    config = uvicorn.Config(app, http="h11", loop="asyncio", lifespan="on", log_level="warning", log_config=None)
    server = _Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    assert server.ready.wait(timeout=30), "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def serve():
    """``with serve(app) as url``: any app served as ``served`` serves the default one."""
    return contextlib.contextmanager(_serve)


@pytest.fixture
def served(frontend: FakeFrontend) -> Iterator[str]:
    """The gateway on a free loopback port, served by uvicorn in a thread; yields its base URL."""
    yield from _serve(create_app(frontend))


def _response_until(client, response_id: str, *statuses: str):
    """The response once its status is one of ``statuses`` (polled with the openai SDK's ``client``; after 30 s, as
    it is then: a test fails if it never gets there)."""
    deadline = time.monotonic() + 30
    while True:
        reply = client.responses.retrieve(response_id)
        if reply.status in statuses or time.monotonic() > deadline:
            return reply
        time.sleep(0.01)


@pytest.fixture
def response_until():
    """``response_until(client, id, *statuses)``: a background response polled until one of ``statuses``."""
    return _response_until
