"""Long prompts tokenized off the control plane's event loop (controlplane/offload_tokenize.py): the same ids and
refusals as on the loop, the loop free meanwhile (SmolLM2's tokenizer releases the GIL on that path), and an
in-process request with a long prompt served through a real agent process."""

from __future__ import annotations

import anyio
import pytest

from controlplane.frontend import FrontendError
from controlplane.offload_tokenize import TokenizeWorkers, pretokenize, prompt_chars, tokenize_unlocked
from controlplane.request_intake import tokenize
from engine.prompt import PromptError
from engine.sampling_params import SamplingParams
from transport.chat_wire import ChatMessage, ChatTemplateOptions
from transport.messages import ClientGenerate

pytestmark = pytest.mark.anyio
TEXT = "The lighthouse keeper climbs the stairs at dusk and lights the lamp. " * 6000  # ~400 kB


def _msg(request_id: str = "r", **fields) -> ClientGenerate:
    return ClientGenerate(request_id=request_id, **{"sampling": SamplingParams(max_tokens=2), **fields})


async def test_the_ids_and_refusals_are_those_of_the_loops_tokenize(smollm2_checkpoint):
    tokenizer = smollm2_checkpoint.tokenizer
    for msg in (
        _msg(prompt=TEXT),
        _msg(messages=[ChatMessage("system", "Be brief."), ChatMessage("user", TEXT)]),
        _msg(prompt=TEXT, sampling=SamplingParams(max_tokens=2, truncate_prompt_tokens=100)),
    ):
        assert tokenize_unlocked(tokenizer, msg) == tokenize(tokenizer, msg)
    both = ChatTemplateOptions(add_generation_prompt=True, continue_final_message=True)
    refused = tokenize_unlocked(tokenizer, _msg(messages=[ChatMessage("user", TEXT)], chat=both))
    assert isinstance(refused, PromptError) and refused.param == "continue_final_message"
    assert prompt_chars(_msg(prompt_token_ids=[1, 2, 3])) == 0


async def test_the_loop_runs_while_a_long_prompt_is_tokenized(smollm2_checkpoint):
    tokenizer = smollm2_checkpoint.tokenizer
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await anyio.sleep(0.001)
            ticks += 1

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        await anyio.sleep(0.01)
        before = ticks
        choices = [_msg(f"r-{i}", prompt=TEXT) for i in range(2)]  # one request's two choices: one tokenization
        workers = TokenizeWorkers(tokenizer)
        done = await pretokenize(workers, [*choices, _msg("short", prompt="Hi")], min_chars=16_384)
        during = ticks - before
        tg.cancel_scope.cancel()
    assert set(done) == {"r-0", "r-1"} and done["r-0"] is done["r-1"]  # the short one is left to the loop
    assert done["r-0"] == tokenize(tokenizer, choices[0])
    assert during >= 3, during  # on the loop it would be 0: the tokenizer holds the GIL on its single-text path
    assert workers.num_tokenized_total == 1 and workers.num_waiting == 0
    assert await pretokenize(workers, choices, min_chars=0) == {}  # 0: off


async def test_a_long_prompt_is_served_and_a_bad_one_refused(controlplane, spawn_agent):
    async with controlplane(offload_tokenize_chars=64) as cp:
        spawn_agent(cp.agent_endpoint, "a")
        await cp.wait_until(lambda: "a" in cp.registry, 60)
        chunks = [
            c async for c in cp.generate("x", model=None, prompt="y" * 500, sampling=SamplingParams(max_tokens=3))
        ]
        assert chunks[-1].finished and chunks[-1].num_prompt_tokens == len(cp.tokenizer.encode("y" * 500))
        both = ChatTemplateOptions(add_generation_prompt=True, continue_final_message=True)
        with pytest.raises(FrontendError) as refused:
            stream = cp.generate(
                "z", model=None, messages=[ChatMessage("user", "y" * 500)], chat=both, sampling=SamplingParams()
            )
            async for _ in stream:
                pass
        assert refused.value.param == "continue_final_message"


def test_the_thread_uses_the_tokenizers_gil_releasing_encode(smollm2_checkpoint):
    """encode_unlocked: the batch path, which releases the GIL (the single one holds it: the loop would stall all the
    same in a thread, scripts/tokenize_loop_lag.py); the same ids."""
    tokenizer = smollm2_checkpoint.tokenizer
    called = []

    class Recording:
        vocab_size, eos_token_id = tokenizer.vocab_size, tokenizer.eos_token_id

        def encode_unlocked(self, text, add_special_tokens=False):
            called.append(len(text))
            return tokenizer.encode_unlocked(text, add_special_tokens)

        def encode(self, text, add_special_tokens=False):
            raise AssertionError("the GIL-holding encode was called")

    assert tokenize_unlocked(Recording(), _msg(prompt=TEXT)) == tokenizer.encode(TEXT) and called == [len(TEXT)]
    with pytest.raises(ValueError, match="lone surrogate"):
        tokenizer.encode_unlocked("a\ud800b")  # as encode says it


async def test_a_zeromq_clients_long_prompt_is_tokenized_off_the_loop_and_served(fleet_with_agents, client):
    """Over the client socket (controlplane/client_requests.py): a long prompt goes through the worker thread, and is
    served with the same prompt tokens; a short one does not."""
    async with fleet_with_agents("a", offload_tokenize_chars=64) as cp, client(cp) as c:
        long = await c.generate("y" * 500, max_tokens=3)
        short = await c.generate("y" * 10, max_tokens=3)
        assert cp.client_requests.num_offloaded == 1 and cp.client_requests.pending == {}
        assert long.num_prompt_tokens == len(cp.tokenizer.encode("y" * 500))
        assert short.num_prompt_tokens == len(cp.tokenizer.encode("y" * 10))


def test_zoo_controlplane_sets_the_offload_threshold():
    """``--offload-tokenize-chars N`` reaches ControlPlaneConfig (0: every prompt on the loop); a negative one is
    refused as the config refuses it."""
    from zoo.cli import build_parser
    from zoo.serve import controlplane_from_args

    def config(*flags: str):
        return controlplane_from_args(build_parser().parse_args(["controlplane", "--fake-tokenizer", *flags])).config

    assert config().offload_tokenize_chars == 16_384
    assert config("--offload-tokenize-chars", "0").offload_tokenize_chars == 0
    with pytest.raises(ValueError, match="offload_tokenize_chars"):
        config("--offload-tokenize-chars", "-1")
