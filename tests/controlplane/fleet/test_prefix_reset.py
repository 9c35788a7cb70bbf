"""POST /reset_prefix_cache over a fleet (controlplane/prefix_reset.py): every node forgets its prefix cache and the
router what it knew of it; a node with a request running keeps its cache and says so (vLLM's rule); an agent cannot
answer for another node."""

from __future__ import annotations

import anyio
import httpx
import pytest

from client import AsyncZooClient
from controlplane.gateway import create_app
from controlplane.node_asks import NodeAsks
from controlplane.prefix_reset import reset_prefix_caches
from transport.messages import ResetPrefixCache

pytestmark = pytest.mark.anyio

PROMPT = "The same long prompt, four blocks of sixteen bytes at least, then some more."


@pytest.fixture
def fleet(fleet_with_agents):
    """``async with fleet() as cp``: conftest's control plane under hardware_aware, two agents in process."""
    return lambda: fleet_with_agents("n0", "n1", policy="hardware_aware")


async def test_every_node_forgets_its_cache_and_the_router_its_index(fleet):
    async with fleet() as cp, AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
        for _ in range(3):
            await zoo.generate(PROMPT, max_tokens=2)
        index = cp.policy._index
        served = [n for n in ("n0", "n1") if index.num_blocks(n)]
        assert served  # the router knows which node holds the prompt
        app = create_app(cp)
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw") as http:
            reply = await http.post("/reset_prefix_cache")
        assert reply.status_code == 200 and reply.json()["reset"] is True
        nodes = reply.json()["nodes"]
        assert set(nodes) == {"n0", "n1"} and all(answer["ok"] for answer in nodes.values())
        assert sum(answer["num_blocks"] for answer in nodes.values()) >= 4  # the prompt's full blocks, gone
        assert all(index.num_blocks(n) == 0 for n in ("n0", "n1"))


async def test_a_node_with_a_running_request_keeps_its_cache_and_says_so(fleet):
    async with fleet() as cp, AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
        stream = await zoo.generate(PROMPT, max_tokens=100_000, stream=True)
        first = await stream.__anext__()
        busy = cp.requests.get(first.request_id).node_id
        answers = await cp.reset_prefix_cache(10.0)
        await stream.cancel()
    oks = {node: answer["ok"] for node, answer in answers.items()}
    assert oks == {busy: False, ({"n0", "n1"} - {busy}).pop(): True}  # the busy node refused, the idle one reset


async def test_an_answer_for_another_node_or_an_unknown_reset_is_dropped():
    resets = NodeAsks()

    class Policy:
        def __init__(self) -> None:
            self.reset: list[str] = []

        def on_prefix_cache_reset(self, node_id: str) -> None:
            self.reset.append(node_id)

    policy, sent = Policy(), []

    async def answer_later() -> None:
        await anyio.sleep(0.05)
        (msg, _), _ = sent
        resets.answer(ResetPrefixCache(request_id="ask-999", node_id="a", ok=True))  # no such reset
        resets.answer(ResetPrefixCache(request_id=msg.request_id, node_id="z", ok=True))  # not asked
        resets.answer(ResetPrefixCache(request_id=msg.request_id, node_id="a", ok=True, num_blocks=3))

    async with anyio.create_task_group() as tg:
        tg.start_soon(answer_later)
        send = lambda msg, node: sent.append((msg, node))  # noqa: E731
        results = await reset_prefix_caches(resets, ["a", "b"], send, policy, 0.5)
    assert results == {"a": {"ok": True, "num_blocks": 3}, "b": None}  # b never answered: None at the timeout
    assert policy.reset == ["a"]
