"""The client library against an in-process control plane and agent (trivial engine), over tcp loopback."""

from __future__ import annotations

import contextlib

import anyio
import anyio.from_thread
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.fake import FAKE_MODEL_NAME, ByteTokenizer, build_trivial_engine, cpu_test_hardware
from client import (
    AsyncZooClient,
    StructuredOutput,
    ToolSpec,
    ZooClient,
    ZooError,
    ZooNoNodeError,
    ZooOverloadedError,
    ZooTimeoutError,
)
from controlplane.router.router_config import RouterConfig
from controlplane.server import ControlPlane, ControlPlaneConfig
from transport.messages import ErrorCode


@contextlib.asynccontextmanager
async def _fleet(step_s: float = 0.0, num_agents: int = 1):
    cp = ControlPlane(
        ControlPlaneConfig(
            agent_endpoint="tcp://127.0.0.1:0",
            client_endpoint="tcp://127.0.0.1:0",
            model_name=FAKE_MODEL_NAME,
            router=RouterConfig(policy="round_robin"),
            heartbeat_interval_s=0.2,
            heartbeat_timeout_s=1.0,
        ),
        ByteTokenizer(),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(cp.run)
        for i in range(num_agents):
            config = AgentConfig(node_id=f"n{i}", model_name=FAKE_MODEL_NAME)
            agent = NodeAgent(
                cp.agent_endpoint, build_trivial_engine(step_s=step_s), config, hardware=cpu_test_hardware()
            )
            await tg.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == num_agents, 10)
        yield cp
        tg.cancel_scope.cancel()


@pytest.fixture
def portal_fleet():
    """A fleet running in a helper thread's event loop, for the blocking client."""
    with anyio.from_thread.start_blocking_portal() as portal, portal.wrap_async_context_manager(_fleet()) as cp:
        yield cp


def test_blocking_client_full_and_streamed(portal_fleet):
    with ZooClient(portal_fleet.client_endpoint, timeout_s=10) as zoo:
        assert zoo.ping() > 0
        done = zoo.generate("hello", max_tokens=4)
        assert (done.text, done.finish_reason, done.num_prompt_tokens, done.node_id) == ("zzzz", "length", 5, "n0")
        chunks = list(zoo.generate(messages=[{"role": "user", "content": "hi"}], max_tokens=3, stream=True))
        assert [c.num_output_tokens for c in chunks] == [1, 2, 3] and chunks[-1].finished
        with pytest.raises(ZooError) as e:
            zoo.generate("x", top_k=-1)
        assert e.value.code is ErrorCode.INVALID_REQUEST and "top_k" in e.value.message
        # the penalties and logit_bias travel in SamplingParams; checked at the control plane (range, vocabulary)
        assert zoo.generate("x", max_tokens=2, frequency_penalty=1.0, logit_bias={5: 1.0}, min_tokens=2).text == "zz"
        for bad, field in (
            ({"logit_bias": {10**6: 1.0}}, "logit_bias"),
            ({"presence_penalty": 9.0}, "presence_penalty"),
        ):
            with pytest.raises(ZooError) as e:
                zoo.generate("x", **bad)
            assert e.value.code is ErrorCode.INVALID_REQUEST and field in e.value.message
        assert zoo.generate("after", max_tokens=1).text == "z"


def test_structured_outputs_travel_in_sampling_params(portal_fleet):
    """Whole or streamed, the constraint reaches the control plane (which checks its shape and its clashes) and, well
    formed, the node (the trivial engine has no grammar compiler: it refuses it, naming the field)."""
    regex = StructuredOutput(regex="[0-9]{3}")
    with ZooClient(portal_fleet.client_endpoint, timeout_s=10) as zoo:
        for kwargs, field in (
            ({"structured_outputs": regex}, "structured_outputs"),  # refused by the node
            ({"structured_outputs": StructuredOutput(regex="[a-")}, "structured_outputs"),  # does not compile
            ({"structured_outputs": StructuredOutput(regex="a", choice=("b",))}, "structured_outputs"),  # two kinds
            ({"structured_outputs": StructuredOutput(choice=())}, "structured_outputs"),
            ({"structured_outputs": regex, "ignore_eos": True}, "ignore_eos"),
            ({"structured_outputs": regex, "min_tokens": 1}, "min_tokens"),
            ({"structured_outputs": regex, "allowed_token_ids": [5]}, "allowed_token_ids"),
        ):
            for stream in (False, True):
                error = _refusal(zoo, stream, **kwargs)
                assert error.code is ErrorCode.INVALID_REQUEST and error.message.startswith(f"{field}:"), kwargs
        assert "no grammar compiler" in _refusal(zoo, False, structured_outputs=regex).message
        assert zoo.generate("after", max_tokens=1).text == "z"


def test_tools_reach_the_prompt_and_bad_ones_are_refused(portal_fleet):
    messages = [{"role": "user", "content": "Weather?"}]
    weather = ToolSpec("get_weather", "The weather now", '{"type":"object","properties":{"city":{"type":"string"}}}')
    with ZooClient(portal_fleet.client_endpoint, timeout_s=10) as zoo:
        plain = zoo.generate(messages=messages, max_tokens=1)
        with_tools = zoo.generate(messages=messages, tools=[weather], max_tokens=1)
        assert with_tools.num_prompt_tokens > plain.num_prompt_tokens + len(weather.parameters)  # the signature is in
        for kwargs in ({"prompt": "x", "tools": [weather]}, {"messages": messages, "tools": [ToolSpec("a b")]}):
            with pytest.raises(ZooError) as e:
                zoo.generate(max_tokens=1, **kwargs)
            assert e.value.code is ErrorCode.INVALID_REQUEST and "tools" in e.value.message
        assert zoo.generate("after", max_tokens=1).text == "z"


def test_prompt_logprobs_travel_and_a_node_that_cannot_score_refuses_them(portal_fleet):
    with ZooClient(portal_fleet.client_endpoint, timeout_s=10) as zoo:
        for stream in (False, True):
            error = _refusal(zoo, stream, prompt_logprobs=1)
            assert error.code is ErrorCode.INVALID_REQUEST and error.message.startswith("prompt_logprobs:")
        assert _refusal(zoo, False, prompt_logprobs=50).message.startswith("prompt_logprobs:")  # out of range
        done = zoo.generate("after", max_tokens=1)
        assert done.text == "z" and done.prompt_logprobs is None
        cut = zoo.generate(
            "a long prompt", max_tokens=3, truncate_prompt_tokens=4, stop="zz", include_stop_str_in_output=True
        )
        assert (cut.num_prompt_tokens, cut.text, cut.finish_reason) == (4, "zz", "stop")


def test_a_node_that_cannot_embed_refuses_by_name(portal_fleet):
    with ZooClient(portal_fleet.client_endpoint, timeout_s=10) as zoo:
        for stream in (False, True):
            error = _refusal(zoo, stream, embed=True)
            assert error.code is ErrorCode.INVALID_REQUEST and error.message.startswith("embed:")
        with pytest.raises(ZooError) as refused:
            zoo.embed(["a", "b"])
        assert refused.value.message.startswith("embed:")
        with pytest.raises(ZooError) as refused:  # rerank embeds: refused the same way
            zoo.rerank("q", ["a", "b"])
        assert refused.value.message.startswith("embed:")
        for bad in ({"documents": []}, {"documents": ["a"], "top_n": -1}):
            with pytest.raises(ValueError, match="rerank"):
                zoo.rerank("q", **bad)
        for text_1, text_2 in ((["a", "b"], ["c"]), ([], ["c"]), ("a", [])):
            with pytest.raises(ValueError, match="score pairs"):
                zoo.score(text_1, text_2)
        assert zoo.generate("after", max_tokens=1).embedding is None


def _refusal(zoo: ZooClient, stream: bool, **kwargs) -> ZooError:
    with pytest.raises(ZooError) as e:
        if stream:
            list(zoo.generate("x", max_tokens=2, stream=True, **kwargs))
        else:
            zoo.generate("x", max_tokens=2, **kwargs)
    return e.value


def test_blocking_stream_closed_early_cancels(portal_fleet):
    with ZooClient(portal_fleet.client_endpoint, timeout_s=10) as zoo:
        stream = zoo.generate(prompt_token_ids=[5, 6], max_tokens=100_000, stream=True)
        next(stream)
        stream.close()
        assert zoo.generate("after", max_tokens=1).text == "z"
    assert portal_fleet.stats()["requests"]["cancelled"] == 1


@pytest.mark.anyio
async def test_async_client_errors_and_explicit_cancel():
    async with _fleet(step_s=0.01) as cp, AsyncZooClient(cp.client_endpoint, timeout_s=10) as zoo:
        stream = await zoo.generate("x", max_tokens=100_000, stream=True)
        await stream.__anext__()
        await stream.cancel()
        await cp.wait_until(lambda: cp.stats()["requests"]["cancelled"] == 1, 10)
        with pytest.raises(ZooError) as e:
            await zoo.generate(prompt_token_ids=[10**9])
        assert e.value.code is ErrorCode.INVALID_REQUEST
        cp.admission.config.max_queue_per_node = 0
        with pytest.raises(ZooOverloadedError) as e:
            await zoo.generate("x")
        assert e.value.retry_after_s == cp.admission.config.retry_after_s


@pytest.mark.anyio
async def test_timeouts_and_an_empty_fleet():
    async with _fleet(step_s=0.05) as cp, AsyncZooClient(cp.client_endpoint, timeout_s=0.01) as zoo:
        with pytest.raises(ZooTimeoutError):  # 10 ms per chunk is shorter than one 50 ms step
            await zoo.generate("slow", max_tokens=100)
        await cp.wait_until(lambda: cp.stats()["requests"]["inflight"] == 0, 10)  # the timeout cancelled it
    cp_none = ControlPlane(ControlPlaneConfig(agent_endpoint="tcp://127.0.0.1:0", client_endpoint="tcp://127.0.0.1:0"),
                           ByteTokenizer())  # fmt: skip
    async with anyio.create_task_group() as tg:
        await tg.start(cp_none.run)
        async with AsyncZooClient(cp_none.client_endpoint, timeout_s=10) as zoo:
            with pytest.raises(ZooNoNodeError):
                await zoo.generate("anyone?")
        tg.cancel_scope.cancel()


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


def test_chat_options_and_cache_salt_travel_and_bad_ones_are_refused_by_name(portal_fleet):
    """vLLM's chat options render a prefilled reply at the control plane (the byte tokenizer: one token per byte, so
    the prompt grows by exactly the prefill); a salt travels in SamplingParams, checked at the control plane."""
    asked = [{"role": "user", "content": "hi"}]
    with ZooClient(portal_fleet.client_endpoint, timeout_s=10) as zoo:
        new_reply = zoo.generate(messages=asked, max_tokens=1)
        prefilled = zoo.generate(
            messages=[*asked, {"role": "assistant", "content": "Hello th"}],
            add_generation_prompt=False,
            continue_final_message=True,
            max_tokens=1,
        )
        assert prefilled.num_prompt_tokens == new_reply.num_prompt_tokens + len("Hello th")
        salted = zoo.generate(messages=asked, max_tokens=1, cache_salt="tenant-a")
        assert salted.num_prompt_tokens == new_reply.num_prompt_tokens
        for kwargs, field in (
            ({"continue_final_message": True}, "continue_final_message"),  # and add_generation_prompt: both
            ({"chat_template_kwargs": {"messages": []}}, "chat_template_kwargs"),
            ({"cache_salt": ""}, "cache_salt"),
            ({"cache_salt": "zoo-tenant:x"}, "cache_salt"),  # the private tenants' prefix
        ):
            with pytest.raises(ZooError) as e:
                zoo.generate(messages=asked, max_tokens=1, **kwargs)
            assert e.value.code is ErrorCode.INVALID_REQUEST and e.value.param == field, kwargs
        with pytest.raises(TypeError):  # a keyword the request does not have
            zoo.generate(messages=asked, max_tokns=1)
        assert zoo.generate("after", max_tokens=1).text == "z"


def test_the_prompts_tokens_come_back_once_when_asked(portal_fleet):
    """vLLM's return_token_ids over the wire: the control plane names the prompt's tokens as served (rendered,
    truncated) on the first chunk it relays, and on no other; a request that did not ask gets none."""
    tokenizer = ByteTokenizer()
    with ZooClient(portal_fleet.client_endpoint, timeout_s=10) as zoo:
        done = zoo.generate("hello", max_tokens=3, return_prompt_token_ids=True)
        assert done.prompt_token_ids == tokenizer.encode("hello") and done.num_prompt_tokens == 5
        cut = zoo.generate("a longer prompt", max_tokens=2, truncate_prompt_tokens=4, return_prompt_token_ids=True)
        assert cut.prompt_token_ids == tokenizer.encode("a longer prompt")[-4:]  # the prompt the node was given
        chunks = list(zoo.generate("hello", max_tokens=3, stream=True, return_prompt_token_ids=True))
        assert chunks[0].prompt_token_ids == tokenizer.encode("hello") and len(chunks) == 3
        assert all(c.prompt_token_ids is None for c in chunks[1:])
        assert zoo.generate("hello", max_tokens=2).prompt_token_ids is None


@pytest.mark.anyio
async def test_max_retries_sends_an_overloaded_request_again_and_only_that():
    async with _fleet() as cp, AsyncZooClient(cp.client_endpoint, timeout_s=10, max_retries=50) as zoo:
        refused = cp.path.refused
        cp.admission.config.max_queue_per_node, cp.admission.config.retry_after_s = 0, 0.01
        async with anyio.create_task_group() as tg:
            done = []

            async def send() -> None:
                done.append(await zoo.generate("x", max_tokens=3))

            tg.start_soon(send)
            await cp.wait_until(lambda: refused[ErrorCode.OVERLOADED] >= 2, 10)  # refused, and sent again
            assert not done
            cp.admission.config.max_queue_per_node = 256  # room again: the next retry is served
        assert done[0].text == "zzz"
        with pytest.raises(ZooError) as e:  # a request's own fault is not sent again
            await zoo.generate(prompt_token_ids=[10**9])
        assert e.value.code is ErrorCode.INVALID_REQUEST and refused[ErrorCode.INVALID_REQUEST] == 1
    async with _fleet() as cp, AsyncZooClient(cp.client_endpoint, timeout_s=10, max_retries=2) as zoo:
        cp.admission.config.max_queue_per_node, cp.admission.config.retry_after_s = 0, 0.01
        with pytest.raises(ZooOverloadedError):  # still refused after its retries: the last refusal raises
            await zoo.generate("x")
        assert cp.path.refused[ErrorCode.OVERLOADED] == 3
    with pytest.raises(ValueError, match="max_retries"):
        AsyncZooClient("tcp://127.0.0.1:1", max_retries=-1)
