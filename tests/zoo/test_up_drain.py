"""`zoo up` stops a control plane that drains (zoo.toml [controlplane] shutdown_timeout, vLLM's --shutdown-timeout)
before its agents: a stream in flight at the stop finishes; without it, the agents go first and the stream ends
with an error. Real processes (a control plane and a slow fake-runner agent) on loopback."""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from transport.local_ports import free_port
from zoo.up import LocalZoo, shutdown_timeout_s
from zoo.up_config import AgentSpec, UpConfig


def _zoo_config(**controlplane) -> UpConfig:
    return UpConfig(
        control=f"tcp://127.0.0.1:{free_port()}",
        http=f"127.0.0.1:{free_port()}",
        policy="round_robin",
        controlplane_options={"fake_tokenizer": True, "client_listen": "none", "stats_listen": "none", **controlplane},
        agents=[AgentSpec("a", options={"fake_runner": True, "fake_step_ms": 40})],
        ready_timeout_s=90.0,
    )


def _stream_through_a_stop(zoo: LocalZoo, base_url: str) -> list[str]:
    """A streamed completion of 40 tokens; ``zoo.stop()`` runs (in a thread) once its first chunk is in. Its
    data lines."""
    body = {"prompt": "hello", "max_tokens": 40, "ignore_eos": True, "stream": True}
    lines: list[str] = []
    stopper = threading.Thread(target=zoo.stop)
    with httpx.Client(base_url=base_url, timeout=60) as http, http.stream("POST", "/v1/completions", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                lines.append(line.removeprefix("data: "))
                if len(lines) == 1:
                    stopper.start()
    stopper.join(timeout=120)
    return lines


def test_a_draining_control_plane_stops_first_and_the_stream_finishes(tmp_path):
    config = _zoo_config(shutdown_timeout=30)
    with LocalZoo(config, tmp_path) as zoo:
        lines = _stream_through_a_stop(zoo, config.base_url)
    assert lines[-1] == "[DONE]"
    chunks = [json.loads(line) for line in lines[:-1]]
    assert chunks[-1]["choices"][0]["finish_reason"] == "length" and "error" not in chunks[-1]
    assert sum(len(c["choices"][0]["text"]) > 0 for c in chunks) >= 20  # the tokens kept coming after the stop


def test_without_a_drain_the_agents_stop_first_and_the_stream_fails(tmp_path):
    config = _zoo_config()
    with LocalZoo(config, tmp_path) as zoo:
        lines = _stream_through_a_stop(zoo, config.base_url)
    assert any("error" in json.loads(line) for line in lines if line != "[DONE]")


@pytest.mark.parametrize(
    ("options", "seconds"),
    [({}, 0.0), ({"shutdown_timeout": 30}, 30.0), ({"shutdown_timeout": 0}, 0.0), ({"shutdown_timeout": True}, 0.0),
     ({"shutdown_timeout": "30"}, 0.0), ({"shutdown_timeout": float("inf")}, 0.0)],
)  # fmt: skip
def test_the_drain_is_read_from_the_control_planes_options(options, seconds):
    assert shutdown_timeout_s(options) == seconds
