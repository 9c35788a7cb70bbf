"""POST /start_profile and /stop_profile over a fleet (controlplane/profiling.py, gateway/profile_routes.py): agent
processes started with and without --profiler-config, each node's answer, its trace written on its disk with each
engine step in it; what the routes refuse; and the routes absent without a profiler, as vLLM's."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import anyio
import httpx
import pytest
from prometheus_client import generate_latest

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from controlplane.node_asks import NodeAsks
from controlplane.profiling import profile_nodes
from observe.controlplane_exporter import ControlPlaneExporter
from transport.messages import ProfileControl

pytestmark = pytest.mark.anyio

JOIN_TIMEOUT_S = 30.0


def _profiling_lines(exported: str) -> list[str]:
    return [line for line in exported.splitlines() if line.startswith("zoo:node_profiling{")]


def _http(cp, profiling: bool = True) -> httpx.AsyncClient:
    app = create_app(cp, config=GatewayConfig(profiling=profiling))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=60)


async def test_each_node_profiles_by_its_own_config_and_writes_its_trace(
    controlplane, spawn_agent, client, tmp_path, monkeypatch
):
    monkeypatch.delenv("VLLM_TORCH_PROFILER_DIR", raising=False)
    traces = tmp_path / "traces"
    config = json.dumps({"profiler": "torch", "torch_profiler_dir": str(traces)})
    async with controlplane("round_robin") as cp:
        spawn_agent(cp.agent_endpoint, "p", "--profiler-config", config)
        spawn_agent(cp.agent_endpoint, "q")
        await cp.wait_until(lambda: len(cp.registry) == 2, JOIN_TIMEOUT_S)
        async with _http(cp) as http, client(cp) as zoo:
            started = await http.post("/start_profile")
            assert started.status_code == 200, started.text
            nodes = started.json()["nodes"]
            assert nodes["p"] == {"ok": True, "detail": "torch profiler started", "trace_files": []}
            assert not nodes["q"]["ok"] and "--profiler-config" in nodes["q"]["detail"]
            await cp.wait_until(lambda: cp.stats()["nodes"]["p"]["profiling"] == "recording", 10)  # its LoadReport
            exported = generate_latest(ControlPlaneExporter(cp.stats).registry).decode()
            assert 'node="p"' in _profiling_lines(exported)[0] and len(_profiling_lines(exported)) == 1
            assert cp.stats()["nodes"]["q"]["profiling"] == ""
            again = await http.post("/start_profile", json={"nodes": ["p"]})
            assert again.status_code == 400 and "already running" in again.json()["error"]["message"]
            for _ in range(4):  # round robin: two requests on p
                await zoo.generate("profile me", max_tokens=4)
            stopped = await http.post("/stop_profile", json={"nodes": ["p"]})
            assert stopped.status_code == 200, stopped.text
            assert set(stopped.json()["nodes"]) == {"p"}
            files = stopped.json()["nodes"]["p"]["trace_files"]
            trace = next(Path(f) for f in files if f.endswith(".pt.trace.json.gz"))
            assert trace.parent == traces and trace.name.startswith("p.")
            names = {e.get("name") for e in json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"]}
            assert sum(1 for n in names if str(n).startswith("zoo_step_")) >= 4  # 2 requests x 4 tokens' steps
            await cp.wait_until(lambda: cp.stats()["nodes"]["p"]["profiling"] == "", 10)
            assert _profiling_lines(generate_latest(ControlPlaneExporter(cp.stats).registry).decode()) == []
            unknown = await http.post("/stop_profile", json={"nodes": ["p", "nowhere"]})
            assert unknown.status_code == 400 and "'nowhere'" in unknown.json()["error"]["message"]
            bad = await http.post("/stop_profile", content=b'{"nodes": "p"}')
            assert bad.status_code == 400 and "nodes" in bad.json()["error"]["message"]
        async with _http(cp, profiling=False) as http:  # without --profiler-config: no such routes, as vLLM's
            assert (await http.post("/start_profile")).status_code == 404


class _Frontend:
    def __init__(self, node_ids: list[str], answers: dict) -> None:
        self.node_ids, self.answers, self.asked = node_ids, answers, []

    async def profile(self, action: str, node_ids: list[str]) -> dict:
        self.asked.append((action, node_ids))
        return {n: self.answers.get(n) for n in node_ids}


async def test_the_routes_refuse_what_no_node_could_do_and_a_fleet_without_nodes(serve_frontend):
    no_profiler = {"ok": False, "detail": "profiling is off on this node", "trace_files": []}
    frontend = _Frontend(["a", "b"], {"a": no_profiler})
    async with serve_frontend(frontend) as http:
        reply = await http.post("/start_profile", content=b"")
        assert reply.status_code == 400
        message = reply.json()["error"]["message"]
        assert "a: profiling is off on this node" in message and "b: no answer" in message
        assert frontend.asked == [("start", ["a", "b"])]
        await http.post("/stop_profile", json={"nodes": ["b", "b", "a"], "stages": [0]})  # duplicates once, extra keys
        assert frontend.asked[-1] == ("stop", ["b", "a"])
        assert (await http.post("/start_profile", content=b"{")).status_code == 400
    async with serve_frontend(_Frontend([], {})) as http:
        reply = await http.post("/start_profile")
        assert reply.status_code == 503 and reply.json()["error"]["code"] == "no_node"


@pytest.fixture
def serve_frontend():
    import contextlib

    @contextlib.asynccontextmanager
    async def serve(frontend):
        app = create_app(frontend, config=GatewayConfig(profiling=True))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
            yield http

    return serve


async def test_a_node_that_cannot_be_sent_to_or_does_not_answer_is_null_and_the_rest_answer():
    asks = NodeAsks()
    sent: list = []

    def send(msg: ProfileControl, node_id: str) -> None:
        if node_id == "gone":
            raise ConnectionError("its outbox is full")
        sent.append((msg, node_id))

    async def answer() -> None:
        await anyio.sleep(0.05)
        msg, _ = sent[0]
        asks.answer(ProfileControl(request_id=msg.request_id, node_id="a", ok=True, trace_files=["/t/a.json"]))
        asks.answer(ProfileControl(request_id=msg.request_id, node_id="intruder", ok=True))  # not asked: dropped

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer)
        results = await profile_nodes(asks, "stop", ["a", "silent", "gone"], send, 0.5)
    assert results == {"a": {"ok": True, "detail": "", "trace_files": ["/t/a.json"]}, "silent": None, "gone": None}
    assert [m.action for m, _ in sent] == ["stop", "stop"]
    with pytest.raises(ValueError, match="start, stop"):
        await profile_nodes(asks, "restart", ["a"], send, 0.1)


async def test_the_control_plane_profiles_its_own_loop_unless_ignore_frontend(tmp_path):
    import pstats

    answer = {"ok": True, "detail": "torch profiler started", "trace_files": []}
    frontend = _Frontend(["a"], {"a": answer})
    app = create_app(frontend, config=GatewayConfig(profiling=True, profile_dir=str(tmp_path / "cp")))
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
        started = (await http.post("/start_profile")).json()
        assert started["controlplane"] == {"ok": True, "detail": started["controlplane"]["detail"], "trace_files": []}
        await http.get("/health")
        again = (await http.post("/start_profile")).json()["controlplane"]
        assert not again["ok"] and "already profiling" in again["detail"]
        only_a = (await http.post("/stop_profile", json={"nodes": ["a"]})).json()
        assert "controlplane" not in only_a  # a body naming nodes asks those nodes only
        stopped = (await http.post("/stop_profile")).json()["controlplane"]
    assert stopped["ok"] and [Path(f).suffix for f in stopped["trace_files"]] == [".pstats", ".txt"]
    stats = pstats.Stats(stopped["trace_files"][0])
    assert any(name == "handle_health" for _, _, name in stats.stats)  # the gateway's own work, seen on its loop
    assert "cumulative" in Path(stopped["trace_files"][1]).read_text()
