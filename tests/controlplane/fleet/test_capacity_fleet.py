"""The autoscaling signal on a real fleet (processes over real sockets): `zoo controlplane --capacity-plan` exports
each GPU type's nodes and the nodes it should have (on /metrics and in `zoo top`'s stats stream), and a queue on the
nodes raises the second."""

from __future__ import annotations

import anyio
import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from backends.fake.byte_tokenizer import FAKE_MODEL_NAME
from client.zoo_client import AsyncZooClient
from observe.metrics_names import (
    CAPACITY_ARRIVAL_GROWTH,
    CAPACITY_COLD_START_WAITING,
    CAPACITY_DESIRED_NODES,
    CAPACITY_NODES,
    CAPACITY_UTILISATION,
    REJECTED_REQUESTS,
)
from observe.stats_stream import subscribe

pytestmark = pytest.mark.anyio
START_TIMEOUT_S = 60.0


async def _capacity(http: httpx.AsyncClient) -> dict:
    text = (await http.get("/metrics", headers={"Accept": "text/plain"})).text
    samples = {}
    for family in text_string_to_metric_families(text):
        if family.name in (CAPACITY_NODES, CAPACITY_DESIRED_NODES, CAPACITY_UTILISATION, CAPACITY_ARRIVAL_GROWTH,
                           CAPACITY_COLD_START_WAITING):  # fmt: skip
            for s in family.samples:
                samples[(family.name, s.labels.get("gpu_type", ""))] = s.value
    return samples


async def _rejected(http: httpx.AsyncClient) -> dict[str, float]:
    """zoo:rejected_requests_total by reason."""
    text = (await http.get("/metrics", headers={"Accept": "text/plain"})).text
    families = [f for f in text_string_to_metric_families(text) if f.name == REJECTED_REQUESTS]
    return {s.labels["reason"]: s.value for f in families for s in f.samples if s.name.endswith("_total")}


async def test_each_gpu_type_is_exported_and_a_queue_asks_for_more_of_the_cheaper_capacity(
    spawn_controlplane, spawn_agent, tmp_path
):
    plan = tmp_path / "capacity.toml"
    # power scores (backends/gpu_table.py): H100 2.28, L4 0.24. At 20 times an L4's cost an H100's capacity costs
    # 8.8 per unit and an L4's 4.2: L4s are the cheaper capacity (a GPU type is matched without case: "L4")
    plan.write_text("[capacity]\nscale_down_window_s = 0\n[capacity.gpu_cost]\nH100 = 20.0\nl4 = 1.0\n")
    cp = spawn_controlplane(None, "--capacity-plan", str(plan))
    for node_id, gpu in (("big", "h100-sxm"), ("small", "l4")):
        spawn_agent(cp.agent_endpoint, node_id, "--gpu-profile", gpu, "--fake-max-num-seqs", "1", "--fake-step-ms", "9")
    with anyio.fail_after(START_TIMEOUT_S):
        async for stats in subscribe(cp.stats_endpoint):
            if sum(n.state == "up" for n in stats.nodes) == 2 and len(stats.capacity) == 2:
                break
    assert sorted((gpu, nodes, wanted) for _, _, gpu, nodes, wanted in stats.capacity) == [("H100", 1, 1), ("L4", 1, 1)]
    async with (
        httpx.AsyncClient(base_url=f"http://{cp.http}", timeout=30.0) as http,
        AsyncZooClient(cp.client_endpoint, timeout_s=60.0) as client,
    ):
        idle = await _capacity(http)
        assert idle[(CAPACITY_NODES, "H100")] == 1 and idle[(CAPACITY_NODES, "L4")] == 1
        assert idle[(CAPACITY_DESIRED_NODES, "H100")] == 1 and idle[(CAPACITY_DESIRED_NODES, "L4")] == 1
        assert idle[(CAPACITY_UTILISATION, "")] == 0.0
        assert idle[(CAPACITY_ARRIVAL_GROWTH, "")] == 1.0  # no arrivals yet: no growth

        # one running per node (--fake-max-num-seqs 1), the rest wait: 11 waiting on each against the threshold of 5
        async def hold(i: int) -> None:  # a stream's first chunk comes once it runs: until then it waits
            await client.generate(f"long {i}", max_tokens=100_000, stream=True)

        async with anyio.create_task_group() as tg:
            for i in range(24):
                tg.start_soon(hold, i)
            with anyio.fail_after(30):
                while True:
                    busy = await _capacity(http)
                    if busy[(CAPACITY_DESIRED_NODES, "L4")] > 1:
                        break
                    await anyio.sleep(0.1)
            tg.cancel_scope.cancel()
        assert busy[(CAPACITY_DESIRED_NODES, "H100")] == 1  # the dearer capacity is not the one asked for
        assert busy[(CAPACITY_UTILISATION, "")] > 0.7
        assert busy[(CAPACITY_ARRIVAL_GROWTH, "")] == 1.0  # the forecast needs half its window (60 s) of arrivals
    assert cp.proc.poll() is None


def test_a_capacity_plan_that_cannot_be_used_stops_the_start_with_its_reason(spawn_controlplane, tmp_path):
    plan = tmp_path / "capacity.toml"
    plan.write_text("[capacity]\ntarget_utilisation = 2\n")
    cp = spawn_controlplane(None, "--capacity-plan", str(plan))
    assert cp.proc.wait(timeout=60) != 0
    assert "--capacity-plan" in cp.output() and "target_utilisation must be in (0, 1]" in cp.output()


async def test_a_request_for_a_pool_scaled_to_zero_asks_for_a_node_and_waits_for_it(
    spawn_controlplane, spawn_agent, tmp_path
):
    """Scale from zero on a real fleet: min_nodes 0; the pool's only node, unasked for a window, is planned away and
    leaves. Its model is still listed; a request for it is refused for want of capacity, which asks for one node of
    the variant again (zoo:capacity_desired_nodes 0 → 1), and waits (cold_start_wait_s), the node asked for all the
    while, until a node joins: then it is served. A ZeroMQ client's request waits the same way."""
    plan = tmp_path / "capacity.toml"
    plan.write_text("[capacity]\nscale_down_window_s = 1\ndefault_min_nodes = 0\ncold_start_wait_s = 120\n")
    cp = spawn_controlplane(None, "--capacity-plan", str(plan))
    agent = spawn_agent(cp.agent_endpoint, "small", "--gpu-profile", "l4")
    with anyio.fail_after(START_TIMEOUT_S):
        async for stats in subscribe(cp.stats_endpoint):
            if any(n.state == "up" for n in stats.nodes) and stats.capacity:
                break
    async with (
        httpx.AsyncClient(base_url=f"http://{cp.http}", timeout=120.0) as http,
        AsyncZooClient(cp.client_endpoint, timeout_s=120.0) as client,
    ):
        samples = await _capacity(http)
        assert samples[(CAPACITY_NODES, "L4")] == 1
        with anyio.fail_after(30):  # held a window as first seen, then shed: nothing asked for it
            while (samples := await _capacity(http))[(CAPACITY_DESIRED_NODES, "L4")] != 0:
                await anyio.sleep(0.1)
        models = [m["id"] for m in (await http.get("/v1/models")).json()["data"]]
        agent.terminate(timeout_s=10)  # KEDA scaled its Deployment to zero
        with anyio.fail_after(30):
            while (samples := await _capacity(http))[(CAPACITY_NODES, "L4")] != 0:
                await anyio.sleep(0.1)
        assert samples[(CAPACITY_DESIRED_NODES, "L4")] == 0  # remembered at zero nodes, and not asked for
        assert [m["id"] for m in (await http.get("/v1/models")).json()["data"]] == models  # still served
        replies, completions = [], []

        async def ask() -> None:
            body = {"model": models[0], "prompt": "hi", "max_tokens": 2}
            replies.append(await http.post("/v1/completions", json=body))

        async def ask_over_zmq() -> None:
            completions.append(await client.generate("hi", model=models[0], max_tokens=2))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            tg.start_soon(ask_over_zmq)
            with anyio.fail_after(30):
                while (await _capacity(http))[(CAPACITY_DESIRED_NODES, "L4")] != 1:  # its refusal asked for one
                    await anyio.sleep(0.1)
            with anyio.fail_after(30):
                while (await _capacity(http))[(CAPACITY_COLD_START_WAITING, "")] != 2:  # both, told to operators
                    await anyio.sleep(0.1)
            await anyio.sleep(2)  # past the window: still asked for, as the request still waits
            assert (await _capacity(http))[(CAPACITY_DESIRED_NODES, "L4")] == 1 and not replies and not completions
            spawn_agent(cp.agent_endpoint, "small-2", "--gpu-profile", "l4")  # KEDA started it
        (reply,) = replies
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 2
        (completion,) = completions
        assert completion.num_output_tokens == 2 and completion.node_id == "small-2"
        assert (await _capacity(http))[(CAPACITY_COLD_START_WAITING, "")] == 0
        assert not any((await _rejected(http)).values())  # both served in the end: no refusal counted
    assert cp.proc.poll() is None


async def test_a_declared_pool_no_node_has_served_is_started_by_a_request(spawn_controlplane, spawn_agent, tmp_path):
    """controlplane/capacity_variants.py on a real fleet: a control plane whose plan declares an L4 pool of the fake
    model at min_nodes 0, and no agent yet. The model is listed and planned at zero nodes; a request for it asks for a
    node (zoo:capacity_desired_nodes 0 → 1) and waits until one joins: then it is served."""
    plan = tmp_path / "capacity.toml"
    plan.write_text(
        "[capacity]\ndefault_min_nodes = 0\ncold_start_wait_s = 120\n"
        f'[[capacity.variants]]\nmodel = "{FAKE_MODEL_NAME}"\ngpu_type = "l4"\n'
    )
    cp = spawn_controlplane(None, "--capacity-plan", str(plan))
    with anyio.fail_after(START_TIMEOUT_S):
        async for stats in subscribe(cp.stats_endpoint):
            if stats.capacity:
                break
    async with httpx.AsyncClient(base_url=f"http://{cp.http}", timeout=120.0) as http:
        assert [m["id"] for m in (await http.get("/v1/models")).json()["data"]] == [FAKE_MODEL_NAME]
        samples = await _capacity(http)
        assert samples[(CAPACITY_NODES, "L4")] == 0 and samples[(CAPACITY_DESIRED_NODES, "L4")] == 0
        replies = []

        async def ask() -> None:
            body = {"model": FAKE_MODEL_NAME, "prompt": "hi", "max_tokens": 2}
            replies.append(await http.post("/v1/completions", json=body))

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(30):
                while (await _capacity(http))[(CAPACITY_DESIRED_NODES, "L4")] != 1:  # its refusal asked for one
                    await anyio.sleep(0.1)
            assert not replies
            spawn_agent(cp.agent_endpoint, "first", "--gpu-profile", "l4")  # KEDA started it
        (reply,) = replies
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 2
    assert cp.proc.poll() is None
