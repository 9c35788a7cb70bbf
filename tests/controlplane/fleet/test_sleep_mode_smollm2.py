"""Sleep mode with the real model behind a real agent (the torch runner built from the SmolLM2 checkpoint): level 2
gives its weights and KV cache back, a request meanwhile is refused (no node awake), and after the wake, which loads
the weights again from the checkpoint, the same greedy request answers the same text."""

from __future__ import annotations

import anyio
import httpx
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import cpu_test_hardware
from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine

pytestmark = [pytest.mark.anyio, pytest.mark.slow]


async def test_level_2_gives_the_weights_back_and_the_wake_answers_the_same(controlplane, smollm2_checkpoint):
    from backends.torch import TorchModelRunner

    tokenizer = smollm2_checkpoint.tokenizer
    engine = LLMEngine(
        TorchModelRunner(smollm2_checkpoint, progress=False),  # from the checkpoint: level 2 can load it again
        tokenizer,
        SchedulerConfig(max_num_batched_tokens=256, max_num_seqs=4, max_model_len=512),
        CacheConfig(block_size=16, num_device_blocks=64, num_host_blocks=0),
    )
    weights = sum(p.numel() * p.element_size() for p in engine.runner.model.parameters())
    async with controlplane("round_robin", tokenizer=tokenizer) as cp, anyio.create_task_group() as agents:
        agent = NodeAgent(cp.agent_endpoint, engine, AgentConfig(node_id="n0", model_name="smol"),
                          hardware=cpu_test_hardware())  # fmt: skip
        await agents.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == 1, 30)
        app = create_app(cp, config=GatewayConfig(sleep_mode=True))
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw", timeout=120) as http:
            body = {"model": cp.model_names[0], "prompt": "The capital of France is", "max_tokens": 6, "temperature": 0}
            before = (await http.post("/v1/completions", json=body)).json()["choices"][0]["text"]
            asleep = await http.post("/sleep", params={"level": "2"})
            assert asleep.status_code == 200, asleep.text
            answer = asleep.json()["nodes"]["n0"]
            assert answer["sleep_level"] == 2 and answer["freed_bytes"] >= weights
            assert engine.runner.model is None and engine.runner.kv_cache is None
            assert (await http.post("/v1/completions", json=body)).status_code == 503  # nobody awake
            woken = await http.post("/wake_up")
            assert woken.status_code == 200 and woken.json()["nodes"]["n0"]["detail"] == "awake"
            after = (await http.post("/v1/completions", json=body)).json()["choices"][0]["text"]
        assert after == before and before
        agents.cancel_scope.cancel()
