"""Sampling on the JAX runner: seeded requests reproduce whatever the batch, top-k 1 is greedy,
top-p keeps the nucleus, the per-request RNG is dropped when the request finishes."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from backends.jax import Sampler
from engine.sampling_params import SamplingParams

SEEDED = SamplingParams(temperature=1.0, seed=1234, max_tokens=64)


def _generate(runner, kit, prompts: dict[str, tuple[list[int], SamplingParams]], steps: int, seed: int = 0):
    alloc = kit.BlockAllocator(64, seed=seed)
    seqs = [kit.Seq(req_id, list(p), params) for req_id, (p, params) in prompts.items()]
    for step in range(steps):
        sched = [s.schedule(alloc, 4) for s in seqs]
        out = runner.execute(kit.make_step(step, sched, finished_req_ids=[]))
        for s, r in zip(seqs, sched):
            s.advance(r, out.sampled_token_ids[s.req_id])
    return {s.req_id: s.token_ids for s in seqs}


def test_seeded_sampling_is_reproducible_whatever_the_batch(tiny, kit):
    config, sd, _model = tiny
    prompt = [4, 9, 16, 25]
    alone = _generate(kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS), kit, {"s": (prompt, SEEDED)}, 10)
    crowd = {
        "u": ([1, 2, 3], SamplingParams(temperature=1.0)),
        "s": (prompt, SEEDED),
        "g": ([7, 8], SamplingParams(temperature=0.0)),
    }
    runner = kit.make_jax_runner(config, sd, buckets=kit.TINY_BUCKETS, num_device_blocks=64)
    together = _generate(runner, kit, crowd, 10, seed=9)
    assert together["s"] == alone["s"]
    other_seed = {"s": (prompt, SamplingParams(temperature=1.0, seed=99, max_tokens=64))}
    assert _generate(runner, kit, other_seed, 10) != alone  # (random weights: near-flat distributions)


def _rows(logits: np.ndarray, params: list[SamplingParams], sampler: Sampler | None = None):
    sampler = sampler or Sampler(seed=0)
    rows = list(range(len(params)))
    return sampler.sample(jnp.asarray(logits), rows, [f"r{i}" for i in rows], params)


def test_top_k_one_is_greedy_and_top_p_keeps_the_nucleus():
    rng = np.random.default_rng(0)
    logits = rng.standard_normal((4, 300)).astype(np.float32) * 3
    out = _rows(logits, [SamplingParams(temperature=1.5, top_k=1)] * 4)
    assert out.token_ids == logits.argmax(-1).tolist()
    # top_p small enough that only the most likely token is in the nucleus
    peaked = logits.copy()
    peaked[:, 7] += 30
    out = _rows(peaked, [SamplingParams(temperature=1.0, top_p=0.5)] * 4)
    assert out.token_ids == [7] * 4
    # top-k 5: every draw lies in the row's 5 most likely tokens
    sampler = Sampler(seed=3)
    top5 = set(np.argsort(-logits[0])[:5].tolist())
    for _ in range(20):
        out = _rows(logits[:1], [SamplingParams(temperature=2.0, top_k=5)], sampler)
        assert out.token_ids[0] in top5


def test_top_p_past_the_candidates_falls_back_to_a_full_sort():
    # a flat distribution over 1,000 tokens: 256 candidates hold ~26% of the mass, top_p asks 90%
    logits = np.zeros((1, 1000), dtype=np.float32)
    sampler = Sampler(seed=5)
    draws = {_rows(logits, [SamplingParams(top_p=0.9)], sampler).token_ids[0] for _ in range(40)}
    assert max(draws) >= 256  # candidates are tokens 0..255 (lax.top_k breaks ties by index)


def test_finished_request_drops_its_rng():
    logits = np.zeros((1, 50), dtype=np.float32)
    sampler = Sampler(seed=0)
    first = [_rows(logits, [SEEDED], sampler).token_ids[0] for _ in range(5)]
    again = [_rows(logits, [SEEDED], sampler).token_ids[0] for _ in range(5)]
    assert again != first  # the generator of "r0" advanced
    sampler.drop(["r0"])
    assert [_rows(logits, [SEEDED], sampler).token_ids[0] for _ in range(5)] == first


def test_logits_processing_matches_the_formula_and_the_torch_sampler():
    """The same plan (penalties, a bias, min_tokens' ban) gives the torch sampler's processed logits, greedy pick
    and raw logprobs; min_p keeps what it keeps there."""
    import torch

    from backends.jax.sampler import apply_logits_plan, apply_logits_plan_jit
    from backends.logits_adjust import LogitsAdjuster
    from backends.runner_driver import sampled_step
    from backends.sample_slots import SampleSlot
    from backends.torch.sampler import Sampler as TorchSampler
    from backends.torch.sampler import apply_logits_plan as torch_apply
    from engine.request import Request
    from tests.backends.test_logits_adjust import apply_plan

    params = SamplingParams(
        temperature=0.0,
        repetition_penalty=1.3,
        frequency_penalty=0.7,
        logit_bias={40: 3.0},
        min_tokens=4,
        logprobs=2,
        allowed_token_ids=[2, 6, 9, 40, 77, 123],
    )
    request = Request("a", [5, 6, 7, 40], params, 0.0, eos_token_id=2)
    request.append_output_token_ids([6, 6, 9])
    r = sampled_step(request)
    plan = LogitsAdjuster().plan([SampleSlot(r, 2, 1)], 300)
    logits = np.random.default_rng(5).standard_normal((4, 300)).astype(np.float32) * 3
    logits[2, 2] = 50.0  # EOS the most likely: banned
    want = apply_plan(logits, plan)
    np.testing.assert_allclose(np.asarray(apply_logits_plan(jnp.asarray(logits), plan)), want, rtol=1e-5, atol=1e-5)
    jitted = apply_logits_plan_jit(jnp.asarray(logits), plan)  # the accelerator's path, run here on the CPU
    np.testing.assert_allclose(np.asarray(jitted), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(torch_apply(torch.from_numpy(logits), plan).numpy(), want, rtol=1e-5, atol=1e-5)
    jax_out = Sampler(seed=0).sample(jnp.asarray(logits), [2], ["a"], [params], plan)
    torch_plan = LogitsAdjuster().plan([SampleSlot(r, 0, 1)], 300)
    torch_out = TorchSampler(torch.device("cpu")).sample(torch.from_numpy(logits[2:3]), ["a"], [params], torch_plan)
    assert jax_out.token_ids == torch_out.token_ids == [int(want[2].argmax())] != [2]
    assert jax_out.logprobs[0].top[0][0] == torch_out.logprobs[0].top[0][0] == 2  # raw: EOS still on top

    peaked = np.log(np.array([[0.5, 0.3, 0.15, 0.05] + [1e-9] * 296], dtype=np.float32))
    min_p = SamplingParams(temperature=1.0, min_p=0.5)
    sampler = Sampler(seed=1)
    draws = {sampler.sample(jnp.asarray(peaked), [0], ["m"], [min_p]).token_ids[0] for _ in range(40)}
    assert draws == {0, 1}


def test_a_plan_of_bans_alone_is_applied():
    """A plan with no sparse entries, only an allowed set (or a grammar's ban), still bans: the JAX sampler once
    skipped any plan whose sparse part was empty, so ``allowed_token_ids`` alone changed nothing there."""
    from backends.logits_adjust import LogitsAdjuster
    from backends.runner_driver import sampled_step
    from backends.sample_slots import SampleSlot
    from engine.request import Request

    params = SamplingParams(temperature=0, max_tokens=4, allowed_token_ids=[7, 9])
    r = sampled_step(Request("a", [5, 6], params, 0.0, eos_token_id=2))
    plan = LogitsAdjuster().plan([SampleSlot(r, 1, 1)], 300)
    assert plan is not None and len(plan) == 0 and not plan.empty
    logits = np.random.default_rng(3).standard_normal((2, 300)).astype(np.float32)
    logits[1, 9] = 2.0
    logits[1, 100] = 40.0  # the raw argmax: not allowed
    out = Sampler(seed=0).sample(jnp.asarray(logits), [1], ["a"], [params], plan)
    assert out.token_ids == [9]
