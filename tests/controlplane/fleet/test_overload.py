"""10x overload through real agent processes: every request gets its answer or a 429 (OVERLOADED with a
retry time), nothing else, and every admitted request finishes in full."""

from __future__ import annotations

import anyio
import pytest

pytestmark = pytest.mark.anyio

NUM_REQUESTS = 80  # 10x the fleet's queue room: 2 nodes x 4 queued


async def test_ten_times_overload_answers_only_completions_and_429s(controlplane, spawn_agent, client):
    from client import ZooOverloadedError
    from controlplane.admission import AdmissionConfig

    admission = AdmissionConfig(max_queue_per_node=4, max_queue_global=1000, retry_after_s=0.5)
    async with controlplane("least_requests", admission=admission) as cp:
        for node_id in ("a", "b"):
            spawn_agent(cp.agent_endpoint, node_id, "--fake-step-ms", "20")
        await cp.wait_until(lambda: "a" in cp.registry and "b" in cp.registry, 30)
        completed, refused, other = [], [], []

        async def one(c, i: int) -> None:
            try:
                done = await c.generate(f"request {i}", max_tokens=6)
                completed.append(done)
            except ZooOverloadedError as e:
                refused.append(e.retry_after_s)
            except Exception as e:  # anything else is a failure of the test
                other.append(repr(e))

        async with client(cp, timeout_s=60) as c, anyio.create_task_group() as tg:
            for i in range(NUM_REQUESTS):
                tg.start_soon(one, c, i)
    assert other == []
    assert len(completed) + len(refused) == NUM_REQUESTS
    assert refused and all(r == 0.5 for r in refused)  # overload was reached, and said when to retry
    assert completed and all(d.num_output_tokens == 6 and d.finish_reason == "length" for d in completed)
    assert cp.stats()["refused"] == {"overloaded": len(refused)}
