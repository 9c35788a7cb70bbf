"""An agent's /metrics server (observe/agent_http.py) on the wire: HEAD has the GET's headers and no body on the wire,
OPTIONS is 204 with Allow, other methods 405 with Allow; GET still serves the exposition."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest
from prometheus_client import Counter

from observe.agent_http import AgentHttpServer
from observe.exporter import PrometheusExporter


@pytest.fixture
def served() -> Iterator[tuple[str, int]]:
    exporter = PrometheusExporter()
    Counter("zoo_test_things", "Things.", registry=exporter.registry).inc(3)
    server = AgentHttpServer(exporter, lambda: {"status": "ok"})
    url = server.serve("127.0.0.1", 0)
    try:
        yield "127.0.0.1", int(url.rsplit(":", 1)[1].split("/")[0])
    finally:
        server.close()


def _raw(address: tuple[str, int], method: str, path: str = "/metrics") -> tuple[str, dict[str, str], bytes]:
    """(status line, headers, every byte after the headers until the server closed): what a strict client sees."""
    with socket.create_connection(address, timeout=10) as s:
        s.sendall(f"{method} {path} HTTP/1.0\r\nHost: x\r\n\r\n".encode())
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    status, *lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines)}
    return status, headers, body


def test_get_head_options_and_other_methods(served):
    status, headers, body = _raw(served, "GET")
    assert " 200 " in status and b"zoo_test_things_total 3.0" in body
    assert int(headers["content-length"]) == len(body)

    status, head_headers, body = _raw(served, "HEAD")
    assert " 200 " in status and body == b""  # no body on the wire (a body here breaks aiohttp)
    assert head_headers["content-type"] == headers["content-type"]
    assert int(head_headers["content-length"]) == int(headers["content-length"])

    status, headers, body = _raw(served, "OPTIONS")
    assert " 204 " in status and headers["allow"] == "GET, HEAD, OPTIONS" and body == b""

    for method in ("POST", "DELETE"):
        status, headers, _ = _raw(served, method)
        assert " 405 " in status and headers["allow"] == "GET, HEAD, OPTIONS"
