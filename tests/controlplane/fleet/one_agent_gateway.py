"""One in-process agent behind a control plane and its HTTP gateway, for a blocking client check (the ``openai``
package) run in a worker thread while they serve."""

from __future__ import annotations

from collections.abc import Callable

import anyio

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import cpu_test_hardware
from controlplane.gateway.app import create_app
from controlplane.gateway.http_server import serve_gateway
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine


async def check_over_http(
    controlplane, tokenizer, engine, check: Callable[..., None], *, with_client_endpoint: bool = False
) -> None:
    """Serve ``engine`` as node n0 of a round-robin control plane (``controlplane``: the fleet fixture) and run
    ``check(base_url, model)`` against its gateway (``check(base_url, model, client_endpoint)`` with
    ``with_client_endpoint``: the control plane's ZeroMQ client socket too)."""
    async with controlplane("round_robin", tokenizer=tokenizer) as cp, anyio.create_task_group() as agents:
        agent = NodeAgent(
            cp.agent_endpoint, engine, AgentConfig(node_id="n0", model_name="smol"), hardware=cpu_test_hardware()
        )
        await agents.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == 1, 30)
        async with anyio.create_task_group() as tg:  # port 0: the kernel picks it while binding (no race)
            server = await tg.start(serve_gateway, create_app(cp), "127.0.0.1", 0)
            port = server.servers[0].sockets[0].getsockname()[1]
            more = (cp.client_endpoint,) if with_client_endpoint else ()
            await anyio.to_thread.run_sync(check, f"http://127.0.0.1:{port}", cp.model_names[0], *more)
            tg.cancel_scope.cancel()
        agents.cancel_scope.cancel()


def smollm2_engine(smollm2_model, tokenizer, **more) -> LLMEngine:
    """The real model on the torch runner, as these checks serve it (``more``: e.g. ``grammars``)."""
    from backends.torch import TorchModelRunner

    return LLMEngine(
        TorchModelRunner(smollm2_model, progress=False),
        tokenizer,
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=8, max_model_len=1024),
        CacheConfig(block_size=16, num_device_blocks=128, num_host_blocks=0),
        **more,
    )
