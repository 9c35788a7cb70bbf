"""Speculative pairs with real processes: a verifier agent (the real model, described as an H100) and a drafting
agent (a fake runner described as an L4, drafting with the real model: ``--can-draft``). On one CPU both step
at the same speed, so the cost model predicts no gain: the control plane is told to pair anyway
(``min_gain=-10``, as to measure a pair's acceptance). It pairs them, the verifier drafts remotely with the
greedy tokens unchanged and reports the acceptance; the drafter is killed mid-request: the pair is broken,
the request completes with the same tokens. (Pairing only when faster: tests/controlplane/test_spec_pairs.py.)"""

from __future__ import annotations

import anyio
import pytest

from controlplane.spec_pairs import SpecPairConfig

pytestmark = [pytest.mark.anyio, pytest.mark.slow]

JOIN_TIMEOUT_S = 180.0
NUM_TOKENS = 24
MODEL = "SmolLM2-135M-Instruct"
VERIFIER = ("--gpu-profile", "h100-sxm", "--max-model-len", "512", "--num-threads", "1", "--num-device-blocks", "128",
            "--num-host-blocks", "0")  # fmt: skip
DRAFTER = ("--gpu-profile", "l4", "--can-draft", "smollm2-135m", "--draft-num-threads", "1")


async def test_the_control_plane_pairs_a_weak_drafter_and_unpairs_it_when_it_dies(
    controlplane, spawn_agent, client, smollm2_checkpoint
):
    tok = smollm2_checkpoint.tokenizer
    prompt = tok.encode("The history of the printing press begins in 1440, when Johannes Gutenberg")
    greedy = dict(prompt_token_ids=prompt, max_tokens=NUM_TOKENS, temperature=0.0, ignore_eos=True)
    config = dict(model_name=MODEL, heartbeat_timeout_s=1.5, spec_pairs=SpecPairConfig(hold_s=0.0, min_gain=-10.0))
    async with controlplane("round_robin", tokenizer=tok, **config) as cp:
        spawn_agent(cp.agent_endpoint, "big", *VERIFIER, fake=False)
        await cp.wait_until(lambda: "big" in cp.registry, JOIN_TIMEOUT_S)
        async with client(cp, timeout_s=90) as c:
            reference = await c.generate(model=MODEL, **greedy)  # alone: plain decoding
            small = spawn_agent(cp.agent_endpoint, "small", *DRAFTER)
            pairs = cp.spec_pairs
            try:
                await cp.wait_until(lambda: pairs.summary()["active"] == {"big": "small"}, JOIN_TIMEOUT_S)
            except TimeoutError:
                raise AssertionError(f"not paired: {pairs.summary()}\n{pairs.nodes()}\n{small.output()}") from None
            assert pairs.policy.pairs == {"big": "small"}
            prediction = pairs.policy.predictions["big"]
            assert prediction.tpot_plain_s > 0 and prediction.tpot_paired_s > 0  # TPOT without and with the pair
            assert cp.registry.hello("small").draft_step_ms > 0  # the drafter measured its draft step
            paired = await c.generate(model=MODEL, **greedy)
            assert paired.token_ids == reference.token_ids
            await cp.wait_until(lambda: pairs.summary()["acceptance"].get("big", -1) > 0.5, 30)  # measured

            stream = await c.generate(model=MODEL, **greedy, stream=True)
            first = await stream.__anext__()
            small.kill()  # the drafter dies mid-request
            with anyio.fail_after(90):
                chunks = [first, *[chunk async for chunk in stream]]
            assert [t for ch in chunks for t in ch.token_ids] == reference.token_ids
            await cp.wait_until(lambda: pairs.summary()["active"] == {} and pairs.policy.pairs == {}, 30)
            assert pairs.policy.num_unpairs_total == 1
            after = await c.generate(model=MODEL, **greedy)
            assert after.token_ids == reference.token_ids
        stats = cp.stats()
        assert stats["requests"]["failed"] == 0 and stats["spec_pairs"]["num_pairs_total"] == 1
