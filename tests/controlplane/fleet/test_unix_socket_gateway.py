"""vLLM's ``--uds``: the OpenAI API of a control-plane process on a Unix domain socket instead of its TCP port, for a
sidecar or a local proxy; the socket's mode lets its owner and group in, nobody else. Read with httpx and the openai
SDK over that socket, a fake-runner agent serving."""

from __future__ import annotations

import os
import socket
import stat
import time

import httpx
import openai

from backends.fake import FAKE_MODEL_NAME
from controlplane.gateway.http_server import UDS_MODE


def test_the_api_on_a_unix_socket(spawn_controlplane, spawn_agent, tmp_path):
    path = str(tmp_path / "zoo.sock")
    cp = spawn_controlplane(None, "--uds", path)
    spawn_agent(cp.agent_endpoint, "a")
    http = httpx.Client(transport=httpx.HTTPTransport(uds=path), base_url="http://localhost", timeout=30)
    deadline = time.monotonic() + 60
    while True:
        try:
            if http.get("/health").status_code == 200:
                break
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, cp.output()
        time.sleep(0.1)
    assert stat.S_IMODE(os.stat(path).st_mode) == UDS_MODE
    sdk = openai.OpenAI(base_url="http://localhost/v1", api_key="x", max_retries=0, http_client=http)
    reply = sdk.completions.create(model=FAKE_MODEL_NAME, prompt="the otters", max_tokens=2)
    assert reply.usage.completion_tokens == 2
    host, port = cp.http.rsplit(":", 1)
    with socket.socket() as s:  # --http's port is not served: the socket is the way in
        assert s.connect_ex((host, int(port))) != 0
    assert f"on the Unix socket {path}" in cp.output()


def test_the_socket_path_is_claimed_at_its_mode_before_uvicorn_binds(tmp_path):
    from controlplane.gateway.http_server import _claim_socket_path

    fresh, stale = str(tmp_path / "fresh.sock"), str(tmp_path / "stale.sock")
    with socket.socket(socket.AF_UNIX) as s:  # a socket a previous run left, open to anyone
        s.bind(stale)
    os.chmod(stale, 0o666)
    for path in (fresh, stale):
        _claim_socket_path(path)  # uvicorn then gives its socket this file's mode
        assert stat.S_ISSOCK(os.stat(path).st_mode) and stat.S_IMODE(os.stat(path).st_mode) == UDS_MODE
