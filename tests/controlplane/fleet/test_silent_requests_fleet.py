"""A generate whose node never answers fails after ``chunk_timeout_s`` (RequestTable.time_out_silent, from the
control plane's expiry loop), and the node is told to stop it."""

from __future__ import annotations

import anyio
import pytest

from controlplane.frontend import FrontendError
from controlplane.request_table import TIMED_OUT
from engine.sampling_params import SamplingParams
from transport.messages import ErrorCode


@pytest.mark.anyio
async def test_a_generate_whose_node_never_answers_fails_and_leaves_the_nodes_books(fleet_with_agents):
    from backends.fake import build_trivial_engine

    engine = build_trivial_engine()
    async with fleet_with_agents("a", engines=[engine], chunk_timeout_s=0.3) as cp:
        engine.runner.step_s = 3.0  # joined (its start-up profile measured): now its first chunk comes after 3 s
        with anyio.fail_after(30), pytest.raises(FrontendError) as failed:
            async for _ in cp.generate("r", model=None, prompt="hi", sampling=SamplingParams(max_tokens=2)):
                pass
        assert (failed.value.code, str(failed.value)) == (ErrorCode.INTERNAL, TIMED_OUT)
        assert "r" not in cp.requests and cp.counters["failed"] == 1
        assert cp.registry.inflight_request_ids("a") == []  # off the node's books
