"""The prefill/decode split with real agent processes (simulated GPUs, paced in real time: their runners have a
model's KV geometry, so the agents open data planes; having no KV tensors, a move re-prefills on the target): a
request is prefilled on the prefill-role node and, after its first token, migrated (reason "split") to the
decode-role node, which finishes the stream."""

from __future__ import annotations

import contextlib

import anyio
import pytest

from backends.fake import FAKE_MODEL_NAME, ByteTokenizer
from controlplane.router.router_config import RouterConfig
from controlplane.server import ControlPlane, ControlPlaneConfig
from controlplane.split_handoff import SplitHandoffPolicy, attach_split, make_control_plane_policy

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

DATA = ("--data-endpoint", "tcp://127.0.0.1:0", "--backend", "sim", "--model", "sim:llama-3-8b", "--model-name",
        FAKE_MODEL_NAME, "--no-profile", "--max-num-seqs", "8")  # fmt: skip


@contextlib.asynccontextmanager
async def _split_controlplane():
    router = RouterConfig(policy="pd_split")
    config = ControlPlaneConfig(
        agent_endpoint="tcp://127.0.0.1:0",
        client_endpoint="tcp://127.0.0.1:0",
        model_name=FAKE_MODEL_NAME,
        router=router,
        heartbeat_interval_s=0.2,
        heartbeat_timeout_s=5.0,  # a loaded test machine: a late heartbeat must not look like a lost node
        report_interval_s=0.05,
    )
    cp = ControlPlane(config, ByteTokenizer(), policy=make_control_plane_policy(router))
    attach_split(cp)
    async with anyio.create_task_group() as tg:
        await tg.start(cp.run)
        try:
            yield cp
        finally:
            tg.cancel_scope.cancel()


async def test_prefill_node_hands_the_request_to_the_decode_node(spawn_agent, client):
    async with _split_controlplane() as cp:
        assert isinstance(cp.policy, SplitHandoffPolicy)
        spawn_agent(cp.agent_endpoint, "p", *DATA, "--gpu-profile", "h100-sxm", "--role", "prefill", fake=False)
        spawn_agent(cp.agent_endpoint, "d", *DATA, "--gpu-profile", "l4", "--role", "decode", fake=False)
        await cp.wait_until(lambda: len(cp.registry) == 2, 60)
        assert cp.registry.hello("p").role == "prefill" and cp.registry.hello("d").role == "decode"
        async with client(cp, timeout_s=30) as c:
            stream = await c.generate(prompt_token_ids=list(range(10, 60)), max_tokens=20, stream=True)
            with anyio.fail_after(30):
                chunks = [chunk async for chunk in stream]
        assert chunks[0].node_id == "p"  # the first token: prefilled on the prefill node
        assert chunks[-1].node_id == "d" and chunks[-1].num_output_tokens == 20
        assert sum(len(ch.token_ids) for ch in chunks) == 20  # nothing lost or repeated across the move
        assert cp.migrations == {"split:ok": 1}
        assert cp.policy.num_handoffs_asked == 1
        assert cp.stats()["requests"]["failed"] == 0


async def test_without_a_decode_node_the_prefill_node_serves_whole_requests(spawn_agent, client):
    async with _split_controlplane() as cp:
        spawn_agent(cp.agent_endpoint, "p", *DATA, "--gpu-profile", "h100-sxm", "--role", "prefill", fake=False)
        await cp.wait_until(lambda: len(cp.registry) == 1, 60)
        async with client(cp, timeout_s=30) as c:
            reply = await c.generate(prompt_token_ids=list(range(10, 40)), max_tokens=5)
        assert len(reply.token_ids) == 5
        assert cp.migrations == {}


# placement: `zoo agent --host-id/--rack` reach the control plane in the hellos, and the split sends a request's KV
# to the decode node on the faster link (the same host: NVLink) though the two decode nodes are alike and the far
# one comes first in node order
async def test_the_split_hands_off_to_the_decode_node_on_the_same_host(spawn_agent, client):
    async with _split_controlplane() as cp:
        common = (*DATA, "--gpu-profile")
        spawn_agent(cp.agent_endpoint, "p", *common, "h100-sxm", "--role", "prefill", "--host-id", "box1",
                    "--rack", "r1", fake=False)  # fmt: skip
        spawn_agent(cp.agent_endpoint, "d0-far", *common, "l4", "--role", "decode", "--host-id", "box2",
                    "--rack", "r2", fake=False)  # fmt: skip
        spawn_agent(cp.agent_endpoint, "d1-near", *common, "l4", "--role", "decode", "--host-id", "box1",
                    "--rack", "r1", fake=False)  # fmt: skip
        await cp.wait_until(lambda: len(cp.registry) == 3, 60)
        assert (cp.registry.hello("d0-far").host, cp.registry.hello("d0-far").rack) == ("box2", "r2")
        async with client(cp, timeout_s=30) as c:
            stream = await c.generate(prompt_token_ids=list(range(10, 60)), max_tokens=20, stream=True)
            with anyio.fail_after(30):
                chunks = [chunk async for chunk in stream]
        assert chunks[0].node_id == "p" and chunks[-1].node_id == "d1-near"
        assert cp.policy.links.kind("p", "d1-near") == "nvlink" and cp.policy.links.kind("p", "d0-far") == "ethernet"
        assert cp.migrations == {"split:ok": 1}
