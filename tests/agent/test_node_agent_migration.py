"""NodeAgent's side of a live migration, in this process (a tiny random torch model) against a bare ROUTER
playing the control plane: the hello announces the data endpoint, a MigrateRequest ships the request's KV to a
peer's data plane and is answered MigrationDone(ok); a silent peer fails it (the request left: re-prefill
elsewhere); an agent without a data plane keeps the request (left=False); a target agent takes a LoRA request's KV
under its adapter (read ahead first) and continues it token-identical."""

from __future__ import annotations

import anyio
import pytest
import zmq
import zmq.asyncio

from agent.agent_config import AgentConfig
from agent.kv_data_plane import KVDataPlane, accept_spec_for
from agent.node_agent import NodeAgent
from backends.fake import ByteTokenizer, build_trivial_engine, cpu_test_hardware
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams
from transport.messages import GenerateRequest, MigrateRequest, MigrationDone, NodeHello, TokenChunk, Welcome

pytestmark = pytest.mark.anyio


def _tiny_engine(lora_config=None) -> LLMEngine:
    from backends.runner_driver import tiny_config
    from backends.torch import TorchModelRunner, build_model, random_state_dict

    config = tiny_config(vocab_size=300, max_position_embeddings=4096)
    model = build_model(config, "float32", state_dict=random_state_dict(config, seed=1, std=0.2))
    return LLMEngine(
        TorchModelRunner(model, progress=False, lora_config=lora_config),
        ByteTokenizer(),
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=4, max_model_len=4096),
        CacheConfig(block_size=4, num_device_blocks=1024, num_host_blocks=0),
    )


async def _join(tg, cp, engine, **config) -> tuple[NodeAgent, bytes, NodeHello]:
    agent = NodeAgent(
        cp.endpoint,
        engine,
        AgentConfig(node_id="n1", model_name="tiny", hello_timeout_s=0.3, profile_at_start=False, **config),
        hardware=cpu_test_hardware(),
    )
    await tg.start(agent.run)
    peer, hello = await cp.expect(NodeHello)
    await cp.send(peer=peer, msg=Welcome(node_id="n1", heartbeat_interval_s=0.05, report_interval_s=0.05))
    return agent, peer, hello


async def _start_request(cp, peer, max_tokens: int = 4000) -> None:
    """A request that runs for seconds (the test moves it long before it could finish)."""
    prompt = list(range(10, 40))  # 30 tokens: 7 full blocks of 4
    params = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    await cp.send(peer=peer, msg=GenerateRequest(request_id="r", prompt_token_ids=prompt, sampling=params,
                                                 arrival_ns=1, routed_ns=2))  # fmt: skip
    await cp.expect(TokenChunk)  # running: its prompt's KV is computed


async def test_migrate_ships_the_kv_to_the_peer_and_reports_done(router_peer):
    cp, received = router_peer, []
    ctx = zmq.asyncio.Context()
    engine = _tiny_engine()
    try:
        async with anyio.create_task_group() as tg:
            target = KVDataPlane("n2", accept_spec_for(engine), received.append, context=ctx)
            await tg.start(target.run)
            agent, peer, hello = await _join(tg, cp, engine, data_endpoint="tcp://127.0.0.1:0")
            assert hello.data_endpoint == agent.data_plane.endpoint and hello.data_endpoint.startswith("tcp://")
            await _start_request(cp, peer)
            move = MigrateRequest(request_id="r", target_node_id="n2", target_data_endpoint=target.endpoint)
            move.reason = "drain"
            await cp.send(peer=peer, msg=move)
            _, done = await cp.expect(MigrationDone)
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert done.ok and done.left and done.node_id == "n1" and done.target_node_id == "n2" and done.reason == "drain"
    (kv,) = received
    assert kv.request_id == "r" and kv.nbytes == done.kv_bytes > 0
    assert kv.layout.num_blocks == len(kv.block_ids) >= 7 and kv.layout.num_layers == 2 and kv.sender == b"n1"
    assert agent._thread.num_inflight == 0  # the request left the node
    assert agent.data_plane.stats.bytes_total == {("out", "n2"): done.kv_bytes}  # the metric's peer: the node id


async def test_a_silent_peer_fails_the_migration_and_the_request_has_left(router_peer):
    cp = router_peer
    ctx = zmq.asyncio.Context()
    silent = ctx.socket(zmq.ROUTER)
    silent.setsockopt(zmq.LINGER, 0)
    silent.bind("tcp://127.0.0.1:0")
    try:
        async with anyio.create_task_group() as tg:
            _, peer, _ = await _join(tg, cp, _tiny_engine(), data_endpoint="tcp://127.0.0.1:0",
                                     kv_transfer_timeout_s=0.3)  # fmt: skip
            await _start_request(cp, peer)
            endpoint = silent.getsockopt_string(zmq.LAST_ENDPOINT)
            await cp.send(peer=peer, msg=MigrateRequest(request_id="r", target_node_id="n2",
                                                        target_data_endpoint=endpoint))  # fmt: skip
            _, done = await cp.expect(MigrationDone)
            tg.cancel_scope.cancel()
    finally:
        silent.close()
        ctx.destroy(linger=0)
    assert not done.ok and done.left and "timeout" in done.message


async def test_without_a_data_plane_the_request_stays(router_peer):
    cp = router_peer
    async with anyio.create_task_group() as tg:
        # a data endpoint asked for, but the trivial engine has no KV geometry: no data plane
        agent, peer, hello = await _join(tg, cp, build_trivial_engine(), data_endpoint="tcp://127.0.0.1:0")
        assert agent.data_plane is None and hello.data_endpoint == ""
        await cp.send(peer=peer, msg=MigrateRequest(request_id="r", target_node_id="n2",
                                                    target_data_endpoint="tcp://127.0.0.1:1"))  # fmt: skip
        _, done = await cp.expect(MigrationDone)
        tg.cancel_scope.cancel()
    assert not done.ok and not done.left and "no KV data plane" in done.message


async def test_a_lora_request_resumes_on_its_kv_under_its_adapter(router_peer, tmp_path):
    """The target's half: a peer's transfer of a LoRA request's KV arrives (tagged with the adapter's id), then the
    control plane's GenerateRequest naming the adapter. The agent reads the adapter (new to it) off the engine
    thread, imports the blocks under it, and the request continues token-identical, its moved blocks prefix hits."""
    from agent.kv_migration import export_for_migration
    from backends.checkpoint.peft_writer import random_peft_adapter
    from backends.runner_driver import tiny_config
    from engine.lora import LoraConfig, LoraRequest

    config = tiny_config(vocab_size=300, max_position_embeddings=4096)
    path = random_peft_adapter(tmp_path / "kv", config, rank=4, target_modules=("k_proj", "v_proj"), seed=5, b_std=0.3)
    adapter = LoraRequest("kv", str(path))
    prompt, num_tokens, num_before = list(range(10, 40)), 12, 5
    greedy = SamplingParams(temperature=0.0, max_tokens=num_tokens, ignore_eos=True)

    def engine_with_adapter() -> LLMEngine:
        engine = _tiny_engine(LoraConfig(2, 8))
        engine.add_lora(adapter)
        return engine

    reference = engine_with_adapter()
    reference.add_request(prompt, greedy, req_id="r", lora_name="kv")
    expected: list[int] = []
    while reference.has_unfinished_requests():
        expected += [t for out in reference.step() for t in out.new_token_ids]
    source = engine_with_adapter()
    source.add_request(prompt, greedy, req_id="r", lora_name="kv")
    before: list[int] = []
    while len(before) < num_before:
        before += [t for out in source.step() for t in out.new_token_ids]
    exported = export_for_migration(source, "r")
    state = exported.state
    assert state.lora_id == adapter.lora_id and state.block_ids

    cp, ctx = router_peer, zmq.asyncio.Context()
    engine = _tiny_engine(LoraConfig(2, 8))  # the target: the adapter is new to it
    try:
        async with anyio.create_task_group() as tg:
            agent, peer, _ = await _join(tg, cp, engine, data_endpoint="tcp://127.0.0.1:0")
            plane = KVDataPlane("n0", accept_spec_for(source), lambda kv: None, context=ctx)
            await tg.start(plane.run)
            await plane.send(agent.data_plane.endpoint, "r", state.block_ids, exported.layout, exported.kv_bytes(),
                             lora_id=state.lora_id)  # fmt: skip
            rest = SamplingParams(temperature=0.0, max_tokens=num_tokens - num_before, ignore_eos=True)
            await cp.send(peer=peer, msg=GenerateRequest(
                request_id="r", prompt_token_ids=state.token_ids, sampling=rest, arrival_ns=1, routed_ns=2,
                lora_name="kv", lora_path=str(path), num_resumed_tokens=num_before))  # fmt: skip
            after: list[int] = []
            while True:
                _, chunk = await cp.expect(TokenChunk)
                after += chunk.token_ids
                if chunk.finish_reason:
                    break
            tg.cancel_scope.cancel()
    finally:
        ctx.destroy(linger=0)
    assert before + after == expected
    assert engine.make_stats().prefix_cache_hits_total == len(state.block_ids) * 4  # the moved blocks, all hits
