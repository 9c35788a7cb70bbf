"""vLLM's sleep mode over a fleet (controlplane/node_sleeps.py, gateway/sleep_routes.py, agent/node_sleep.py): a node
put to sleep is routed nothing while the others serve; "abort" resumes its streams on another node with nothing
lost, "wait" lets them finish there first; a wake routes to it again, unless an operator's drain holds it; GET
/is_sleeping, the node rows and vllm:engine_sleep_state say each node's level; what the routes refuse, and the routes
absent without --enable-sleep-mode, as vLLM's."""

from __future__ import annotations

import anyio
import httpx
import pytest
from prometheus_client import generate_latest

from backends.fake import FAKE_MODEL_NAME
from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from controlplane.registry import NodeState
from observe.controlplane_exporter import ControlPlaneExporter
from transport.messages import ErrorCode

pytestmark = pytest.mark.anyio


def _http(cp, enabled: bool = True) -> httpx.AsyncClient:
    app = create_app(cp, config=GatewayConfig(sleep_mode=enabled))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=60)


def _sleep_lines(cp) -> set[str]:
    exported = generate_latest(ControlPlaneExporter(cp.stats).registry).decode()
    return {
        line for line in exported.splitlines() if line.startswith("vllm:engine_sleep_state{") and line[-3:] == "1.0"
    }


async def test_abort_resumes_a_sleeping_nodes_streams_elsewhere_and_a_wake_routes_to_it_again(
    fleet_with_agents, client
):
    async with fleet_with_agents("a", "b") as cp, _http(cp) as http, client(cp) as zoo:
        streams = [await zoo.generate("sleepy", stream=True, max_tokens=400, ignore_eos=True) for _ in range(4)]
        on_a = cp.registry.inflight_request_ids("a")
        assert on_a  # round robin: some of them run on a
        for s in streams:  # each has started
            await s.__anext__()
        asleep = await http.post("/sleep", params={"level": "1"}, json={"nodes": ["a"]})
        assert asleep.status_code == 200, asleep.text
        answer = asleep.json()["nodes"]["a"]
        assert answer["ok"] and answer["sleep_level"] == 1 and "asleep at level 1" in answer["detail"]
        assert cp.registry.state("a") is NodeState.DRAINING and cp.registry.inflight_request_ids("a") == []
        for s in streams:  # every stream ends whole: those on a resumed on b from the tokens they had
            done = await s.collect()
            assert done.finish_reason == "length" and len(done.token_ids) >= 399, done
        for _ in range(3):
            await zoo.generate("while a sleeps", max_tokens=2)
        assert cp.stats()["nodes"]["a"]["requests_routed"] == len(on_a)  # nothing new went to a
        assert (await http.get("/is_sleeping")).json() == {"is_sleeping": False, "nodes": {"a": 1, "b": 0}}
        assert cp.stats()["nodes"]["a"]["sleep_level"] == 1
        lines = _sleep_lines(cp)
        assert any('engine="a"' in x and 'sleep_state="weights_offloaded"' in x for x in lines), lines
        assert any('engine="b"' in x and 'sleep_state="awake"' in x for x in lines), lines
        woken = await http.post("/wake_up", json={"nodes": ["a"]})
        assert woken.status_code == 200 and woken.json()["nodes"]["a"]["detail"] == "awake"
        assert cp.registry.state("a") is NodeState.UP and cp.sleeps.levels == {}
        routed = cp.stats()["nodes"]["a"]["requests_routed"]
        for _ in range(4):
            await zoo.generate("a is back", max_tokens=2)
        assert cp.stats()["nodes"]["a"]["requests_routed"] > routed


async def test_wait_lets_the_streams_finish_there_and_sleeps_after(fleet_with_agents, client):
    async with fleet_with_agents("a", "b") as cp, _http(cp) as http, client(cp) as zoo:
        streams = [await zoo.generate("slow", stream=True, max_tokens=150, ignore_eos=True) for _ in range(2)]
        for s in streams:
            await s.__anext__()
        asleep = await http.post("/sleep", params={"level": "2", "mode": "wait"})  # every node: a and b
        assert asleep.status_code == 200, asleep.text
        assert {n: a["sleep_level"] for n, a in asleep.json()["nodes"].items()} == {"a": 2, "b": 2}
        for s in streams:
            assert (await s.collect()).finish_reason == "length"
        assert (await http.get("/is_sleeping")).json()["is_sleeping"] is True
        body = {"model": FAKE_MODEL_NAME, "prompt": "nobody is awake", "max_tokens": 2}
        refused = await http.post("/v1/completions", json=body)
        assert refused.status_code == 503, refused.text  # no node to route to: refused, not queued forever
        await http.post("/wake_up", params={"tags": "weights"})  # in part: still asleep, still out of routing
        assert cp.sleeps.levels == {"a": 2, "b": 2} and cp.registry.state("b") is NodeState.DRAINING
        await http.post("/wake_up", params={"tags": "kv_cache"})
        assert cp.sleeps.levels == {} and {cp.registry.state(n) for n in "ab"} == {NodeState.UP}
        assert (await zoo.generate("awake again", max_tokens=2)).finish_reason == "length"


async def test_an_operators_drain_outlasts_a_sleep_and_a_restarted_control_plane_learns_the_level(fleet_with_agents):
    async with fleet_with_agents("a", "b") as cp, _http(cp) as http:
        assert cp.drain("a", "maintenance")
        assert (await http.post("/sleep", json={"nodes": ["a"]})).status_code == 200
        await http.post("/wake_up", json={"nodes": ["a"]})
        assert cp.registry.state("a") is NodeState.DRAINING  # the operator's drain holds
        assert (await http.post("/sleep", json={"nodes": ["b"]})).status_code == 200
        cp.sleeps.levels.clear()  # as a control plane that restarted knows nothing of it...
        cp.registry.resume("b")
        with anyio.fail_after(10):  # ...until b's next LoadReport says it sleeps
            while cp.registry.state("b") is not NodeState.DRAINING:
                await anyio.sleep(0.02)
        assert cp.sleeps.levels == {"b": 1}


async def test_what_the_routes_refuse_and_their_absence_without_the_flag(fleet_with_agents):
    async with fleet_with_agents("a") as cp, _http(cp) as http:
        for params, why in (
            ({"level": "3"}, "sleep level must be 1 or 2"),
            ({"level": "one"}, "sleep level must be 1 or 2"),
            ({"level": "²"}, "sleep level must be 1 or 2"),  # a digit to str.isdigit, not to int()
            ({"mode": "keep"}, "mode 'keep' is not taken"),
            ({"mode": "later"}, "mode must be abort or wait"),
        ):
            reply = await http.post("/sleep", params=params)
            assert reply.status_code == 400 and why in reply.json()["error"]["message"], reply.text
        reply = await http.post("/wake_up", params={"tags": "gpu"})
        assert reply.status_code == 400 and "unknown wake_up tag 'gpu'" in reply.json()["error"]["message"]
        reply = await http.post("/sleep", json={"nodes": ["nope"]})
        assert reply.status_code == 400 and reply.json()["error"]["code"] == "invalid_nodes"
        reply = await http.post("/sleep", content=b"{not json")
        assert reply.status_code == 400
        assert cp.sleeps.levels == {} and cp.registry.state("a") is NodeState.UP  # nothing done
    async with fleet_with_agents("a") as cp, _http(cp, enabled=False) as http:
        for method, path in (("POST", "/sleep"), ("POST", "/wake_up"), ("GET", "/is_sleeping")):
            assert (await http.request(method, path)).status_code == 404


async def _until(predicate, timeout_s: float = 20.0) -> None:
    with anyio.fail_after(timeout_s):  # a guard against a hang, not a measure: it returns as soon as it holds
        while not predicate():
            await anyio.sleep(0.02)


async def test_an_idle_fleet_sleeps_and_the_next_request_wakes_it_first(fleet_with_agents):
    from client import AsyncZooClient

    async with fleet_with_agents("a", "b", sleep_idle_ttl_s=3.0) as cp, _http(cp) as http:
        await _until(lambda: cp.idle_sleep.auto_slept == {"a", "b"} and cp.sleeps.levels == {"a": 1, "b": 1})
        assert (await http.get("/is_sleeping")).json()["is_sleeping"] is True
        await _until(lambda: cp.sleeps.idle == {"a", "b"})  # their reports say an idle sleep put them there
        await http.get("/health")  # not an inference request: wakes nothing
        assert cp.idle_sleep.num_wakes == 0
        body = {"model": FAKE_MODEL_NAME, "prompt": "wake up", "max_tokens": 2}
        reply = await http.post("/v1/completions", json=body)  # waits for the wake, then is served
        assert reply.status_code == 200, reply.text
        assert cp.idle_sleep.num_wakes == 1 and cp.sleeps.levels == {}
        await _until(lambda: cp.idle_sleep.num_sleeps == 2)  # idle again: asleep again
        async with AsyncZooClient(cp.client_endpoint, timeout_s=20.0) as zoo:  # no retries: it waits for the wake
            done = await zoo.generate("a ZeroMQ client", max_tokens=2)
        assert done.finish_reason == "length" and cp.idle_sleep.num_wakes == 2
        assert cp.refused[ErrorCode.NO_NODE] == 0  # nobody was refused: each request waited for the wake


async def test_nothing_is_lost_while_nodes_sleep_and_wake_under_load(fleet_with_agents):
    """30 streams over 3 nodes while each node in turn is put to sleep ("abort", then "wait") and woken: every stream
    ends with all its tokens (those on a node put to sleep with "abort" resumed on another from the tokens it had)."""
    from client import AsyncZooClient

    async with fleet_with_agents("a", "b", "c") as cp, AsyncZooClient(cp.client_endpoint, timeout_s=60.0) as zoo:
        results: dict[int, object] = {}

        async def one(i: int) -> None:
            stream = await zoo.generate(f"request {i}", stream=True, max_tokens=120, ignore_eos=True)
            results[i] = await stream.collect()

        async with anyio.create_task_group() as tg:
            for i in range(30):
                tg.start_soon(one, i)
            await _until(lambda: sum(len(cp.registry.inflight_request_ids(n)) for n in "abc") >= 20)
            for node_id, mode in (("a", "abort"), ("b", "wait"), ("c", "abort"), ("a", "wait")):
                answers = await cp.sleeps.sleep([node_id], 2 if mode == "abort" else 1, mode)
                assert answers[node_id] is not None and answers[node_id]["ok"], answers
                assert cp.registry.inflight_request_ids(node_id) == []  # resumed elsewhere, or finished there
                woken = await cp.sleeps.wake_up([node_id], [])
                assert woken[node_id]["ok"] and cp.registry.state(node_id) is NodeState.UP
        assert len(results) == 30
        assert all(r.finish_reason == "length" and len(r.token_ids) == 120 for r in results.values())
        assert cp.counters["resumed"] > 0 and cp.counters["failed"] == 0


async def test_an_operator_chooses_the_nodes_by_gpu_type_or_cell(controlplane):
    from agent.agent_config import AgentConfig
    from agent.node_agent import NodeAgent
    from backends.fake import build_trivial_engine, cpu_test_hardware

    fleet = (("h100-0", "H100", "east"), ("t4-0", "T4", "west"), ("t4-1", "T4", "east"))
    async with controlplane() as cp, anyio.create_task_group() as tg, _http(cp) as http:
        for node_id, gpu_type, cell in fleet:
            config = AgentConfig(node_id=node_id, model_name=FAKE_MODEL_NAME, cell=cell)
            agent = NodeAgent(cp.agent_endpoint, build_trivial_engine(), config, hardware=cpu_test_hardware(gpu_type))
            await tg.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == 3, 10)
        asleep = await http.post("/sleep", json={"gpu_type": "T4"})
        assert set(asleep.json()["nodes"]) == {"t4-0", "t4-1"} and cp.sleeps.levels == {"t4-0": 1, "t4-1": 1}
        woken = await http.post("/wake_up", json={"gpu_type": "T4", "cell": "east"})
        assert set(woken.json()["nodes"]) == {"t4-1"} and cp.sleeps.levels == {"t4-0": 1}
        refused = await http.post("/sleep", json={"gpu_type": "A100"})
        assert refused.status_code == 400 and "No node of gpu_type 'A100'" in refused.json()["error"]["message"]
        named = await http.post("/sleep", json={"nodes": ["h100-0", "t4-1"], "cell": "west"})
        assert named.status_code == 400  # neither named node is in the west cell
        tg.cancel_scope.cancel()


async def test_a_zeromq_client_and_zoo_tops_keys_sleep_and_wake_a_node(fleet_with_agents, client):
    from client import ZooInvalidRequestError
    from tui.node_actions import NodeActions  # what zoo top --client does at Z and W

    async with fleet_with_agents("a", "b", sleep_mode=True) as cp, client(cp) as zoo:
        asleep = await zoo.sleep("a", level=2, mode="abort")
        assert asleep.ok and asleep.node_id == "a" and asleep.sleep_level == 2 and cp.sleeps.levels == {"a": 2}
        assert cp.registry.state("a") is NodeState.DRAINING
        woken = await zoo.wake("a")
        assert woken.ok and woken.detail == "awake" and cp.registry.state("a") is NodeState.UP
        for ask, why in (
            (zoo.sleep("nope"), "unknown node 'nope'"),
            (zoo.sleep("a", level=3), "sleep level must be 1 or 2"),
            (zoo.sleep("a", mode="keep"), "mode must be one of abort, wait"),
            (zoo.wake("a", tags=("gpu",)), "unknown wake_up tag"),
        ):
            with pytest.raises(ZooInvalidRequestError, match=why):
                await ask
        actions = NodeActions(cp.client_endpoint, timeout_s=10)
        done, message = await actions("b", "sleep")
        assert done and message.startswith("sleep b: asleep at level 1") and cp.sleeps.levels == {"b": 1}
        done, message = await actions("b", "wake")
        assert done and message == "wake b: awake" and cp.sleeps.levels == {}
    async with fleet_with_agents("a") as cp, client(cp) as zoo:  # started without --enable-sleep-mode
        with pytest.raises(ZooInvalidRequestError, match="start the control plane with --enable-sleep-mode"):
            await zoo.sleep("a")
