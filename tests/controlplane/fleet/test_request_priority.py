"""vLLM's per-request ``priority`` through the control plane to an engine (trivial runner, one sequence at a time):
of two requests waiting behind a running one, the lower priority value runs first, whatever their arrival order;
an out-of-range priority is refused by name."""

from __future__ import annotations

import anyio
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import build_trivial_engine, cpu_test_hardware
from controlplane.frontend import FrontendError
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.anyio


async def test_the_lower_priority_value_runs_first_among_waiting_requests(controlplane):
    firsts: list[str] = []
    async with controlplane() as cp, anyio.create_task_group() as tg:
        agent = NodeAgent(
            cp.agent_endpoint, build_trivial_engine(step_s=0.01, max_num_seqs=1),
            AgentConfig(node_id="n0", model_name="fake-bytes"), hardware=cpu_test_hardware(),
        )  # fmt: skip
        await tg.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == 1, 30)
        running = anyio.Event()

        async def run(request_id: str, priority: int, max_tokens: int) -> None:
            sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
            async for chunk in cp.generate(request_id, model=None, prompt="hi", sampling=sampling, priority=priority):
                if chunk.token_ids and request_id not in firsts:
                    firsts.append(request_id)
                    running.set()

        async with anyio.create_task_group() as requests:
            requests.start_soon(run, "first", -10, 40)  # outranks the others: they all wait for its 40 steps
            await running.wait()  # it holds the node's one sequence slot
            requests.start_soon(run, "batch", 5, 3)  # submitted first, the highest value
            requests.start_soon(run, "later-but-urgent", -5, 3)
            requests.start_soon(run, "urgent", -7, 3)
        with pytest.raises(FrontendError) as refused:
            await run("out-of-range", 2**40, 3)
        tg.cancel_scope.cancel()
    assert firsts[0] == "first"
    assert firsts.index("urgent") < firsts.index("later-but-urgent") < firsts.index("batch")
    assert refused.value.param == "priority"


async def test_the_zeromq_client_sends_a_priority(controlplane, client):
    from client.errors import ZooInvalidRequestError

    async with controlplane() as cp, anyio.create_task_group() as tg:
        agent = NodeAgent(cp.agent_endpoint, build_trivial_engine(), AgentConfig(node_id="n0", model_name="fake-bytes"),
                          hardware=cpu_test_hardware())  # fmt: skip
        await tg.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == 1, 30)
        async with client(cp) as c:
            done = await c.generate("hi", max_tokens=2, ignore_eos=True, priority=3)
            with pytest.raises(ZooInvalidRequestError, match="priority"):
                await c.generate("hi", max_tokens=2, priority=-(2**40))
        tg.cancel_scope.cancel()
    assert done.num_output_tokens == 2
