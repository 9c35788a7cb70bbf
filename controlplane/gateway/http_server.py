"""Serving the gateway: uvicorn with a deadline on every request's headers and OpenAI-shaped errors.

    connection ─► headers (deadline: request_read_timeout_s, else 408 + close) ─► app ─► body (the app's
    deadline, also request_read_timeout_s: 408) ─► response ─► idle (keep_alive_timeout_s, then close)
                  └─ not HTTP (h11 refuses it) ─► 400 + close

uvicorn times out only idle keep-alive connections; a client that sends its headers one byte at a time
(slowloris) would hold a connection forever. ``GatewayProtocol`` is uvicorn's h11 protocol with a header
deadline, armed when a connection opens and again after each response, disarmed while the app serves a
request (its headers are in; the body's deadline is the app's own, app.py ``read_body``). A client still
sending the body of a request already answered (say, refused with 413) is cut off at the same deadline.
Every error the server itself sends (400, 408) has OpenAI's JSON error body, like the app's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket

import anyio
import h11
import msgspec
import uvicorn
from anyio.abc import TaskStatus
from starlette.types import ASGIApp
from uvicorn.protocols.http.h11_impl import H11Protocol

from controlplane.gateway.app import GatewayConfig
from controlplane.gateway.errors import http_error_body

STARTUP_TIMEOUT_S = 30.0
UDS_MODE = 0o660  # a Unix socket's: its owner and group may connect (a sidecar, a local proxy), nobody else


class GatewayProtocol(H11Protocol):
    """uvicorn's h11 protocol with a header deadline and JSON error bodies (see the module docstring).

    Made per server by ``gateway_protocol(header_timeout_s)``; uvicorn instantiates it per connection.
    """

    header_timeout_s: float = 30.0
    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        if self._app_is_serving():  # this request's headers are in: the app (and its body deadline) has it
            self._disarm_header_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_header_deadline()  # the next request's headers, on this kept-alive connection

    def _app_is_serving(self) -> bool:
        return self.cycle is not None and not self.cycle.response_complete

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def send_400_response(self, msg: str) -> None:
        body = msgspec.json.encode(http_error_body(f"Invalid HTTP request: {msg}"))
        self._write_error(400, body)

    def _arm_header_deadline(self) -> None:
        self._disarm_header_deadline()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._on_header_timeout)

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _on_header_timeout(self) -> None:
        self._header_deadline = None
        if self.transport.is_closing() or self._app_is_serving():
            return  # the app answers this request (a body it reads late is its own 408)
        if self.conn.their_state is not h11.IDLE:
            # answered already, yet the client is still sending that request's body (e.g. after a 413)
            self.transport.close()
            return
        message = f"The request headers were not received within {self.header_timeout_s:g} s"
        body = msgspec.json.encode(http_error_body(message, code="request_timeout"))
        self._write_error(408, body)

    def _write_error(self, status: int, body: bytes) -> None:
        """Status line, headers and body written raw (h11 has no request to answer yet), then close."""
        reason = {400: b"Bad Request", 408: b"Request Timeout"}.get(status, b"Error")
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
            % (status, reason, len(body))
        )
        with contextlib.suppress(Exception):
            self.transport.write(head + body)
        self.transport.close()


def gateway_protocol(header_timeout_s: float) -> type[GatewayProtocol]:
    """A GatewayProtocol class with this header deadline (uvicorn makes one instance per connection)."""
    return type("GatewayProtocol", (GatewayProtocol,), {"header_timeout_s": header_timeout_s})


def uvicorn_config(app: ASGIApp, host: str, port: int, config: GatewayConfig, **overrides) -> uvicorn.Config:
    """The uvicorn config the gateway is served with (``overrides``: more uvicorn.Config arguments)."""
    settings = dict(
        host=host,
        port=port,
        http=gateway_protocol(config.request_read_timeout_s),
        timeout_keep_alive=config.keep_alive_timeout_s,
        log_level="warning",
        lifespan="off",  # serve_gateway runs the app's runs itself (a cancelled lifespan task logs a traceback)
    )
    if config.ssl_certfile is not None:  # HTTPS, as vLLM's --ssl-* flags set up uvicorn
        settings.update(ssl_keyfile=config.ssl_keyfile, ssl_certfile=config.ssl_certfile)
        settings.update(ssl_ca_certs=config.ssl_ca_certs, ssl_cert_reqs=config.ssl_cert_reqs)
    settings.update(overrides)
    return uvicorn.Config(app, **settings)


class GatewayServer(uvicorn.Server):
    """uvicorn.Server that leaves signals to its task group and tells when it listens."""

    def __init__(self, config: uvicorn.Config) -> None:
        super().__init__(config)
        self.listening = anyio.Event()

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        pass

    def capture_signals(self):  # uvicorn >= 0.29
        return contextlib.nullcontext()

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.started:
            self.listening.set()


async def serve_gateway(
    app: ASGIApp,
    host: str,
    port: int,
    config: GatewayConfig | None = None,
    *,
    uds: str | None = None,
    task_status: TaskStatus[GatewayServer] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``app`` until cancelled, and run its ``app.state.runs`` (create_app's: batches, background responses);
    reports the GatewayServer once it listens. Raises RuntimeError
    when uvicorn stops on its own (e.g. the port was taken). ``uds``: on this Unix domain socket instead of
    ``host:port`` (vLLM's ``--uds``), of mode ``UDS_MODE`` (``_claim_socket_path``)."""
    overrides = {"uds": uds} if uds is not None else {}
    if uds is not None:
        _claim_socket_path(uds)
    server = GatewayServer(uvicorn_config(app, host, port, config or GatewayConfig(), **overrides))

    async def serve() -> None:
        try:
            await server.serve()
        finally:
            server.listening.set()  # whatever happened, the starter stops waiting

    async with anyio.create_task_group() as tg:
        for run in getattr(getattr(app, "state", None), "runs", ()):  # create_app's: batches, background responses
            tg.start_soon(run)
        tg.start_soon(serve)
        with anyio.fail_after(STARTUP_TIMEOUT_S):
            await server.listening.wait()
        where = f"{host}:{port}" if uds is None else uds
        if not server.started:
            raise RuntimeError(f"the HTTP server on {where} did not start")
        task_status.started(server)
    raise RuntimeError(f"the HTTP server on {where} stopped")


def _claim_socket_path(path: str) -> None:
    """A socket file of mode ``UDS_MODE`` at ``path`` before uvicorn binds there: uvicorn gives its new socket the
    mode of the file it replaces (a path with none: world-writable), so the socket is never open to others."""
    if not os.path.exists(path):
        with socket.socket(socket.AF_UNIX) as placeholder:
            placeholder.bind(path)
    os.chmod(path, UDS_MODE)
