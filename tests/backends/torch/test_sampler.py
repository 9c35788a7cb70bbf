"""Sampler: greedy, top-k, top-p, seeds independent of the batch, logprobs; logits processing (penalties,
logit_bias, min_tokens' ban: backends/logits_adjust.py's plan) and min_p."""

from __future__ import annotations

import math

import torch

from backends.torch.sampler import Sampler, apply_logits_plan, apply_min_p, apply_top_k_top_p
from engine.sampling_params import SamplingParams

V = 50


def _logits(num_rows: int, seed: int = 0) -> torch.Tensor:
    return 3.0 * torch.randn(num_rows, V, generator=torch.Generator().manual_seed(seed))


def test_greedy_is_argmax_and_top_k_1_equals_greedy():
    logits = _logits(6)
    sampler = Sampler(torch.device("cpu"))
    greedy = sampler.sample(logits, [f"r{i}" for i in range(6)], [SamplingParams(temperature=0.0)] * 6)
    assert greedy.token_ids == logits.argmax(-1).tolist()
    top1 = sampler.sample(logits, [f"r{i}" for i in range(6)], [SamplingParams(temperature=1.3, top_k=1)] * 6)
    assert top1.token_ids == greedy.token_ids
    assert greedy.logprobs == [None] * 6


def test_seeded_sampling_reproducible_and_batch_independent():
    logits = _logits(4, seed=1)
    seeded = SamplingParams(temperature=1.0, seed=1234)
    other = SamplingParams(temperature=0.7, top_p=0.9)

    def run(rows: list[int], params: list[SamplingParams], steps: int = 5) -> list[int]:
        sampler = Sampler(torch.device("cpu"), seed=99)
        picked = []
        for _ in range(steps):
            out = sampler.sample(logits[rows], [f"q{r}" for r in rows], params)
            picked.append(out.token_ids[rows.index(2)])
        return picked

    alone = run([2], [seeded])
    in_batch = run([0, 1, 2, 3], [other, other, seeded, SamplingParams(temperature=2.0, seed=7)])
    shuffled = run([3, 2, 0], [other, seeded, other])
    assert alone == in_batch == shuffled
    assert len(set(alone)) > 1  # it really samples


def test_generator_dropped_on_finish():
    sampler = Sampler(torch.device("cpu"))
    logits = _logits(1)
    p = [SamplingParams(temperature=1.0, seed=5)]
    first = [sampler.sample(logits, ["a"], p).token_ids[0] for _ in range(6)]
    sampler.drop(["a"])
    again = [sampler.sample(logits, ["a"], p).token_ids[0] for _ in range(6)]
    assert first == again


def test_top_p_masking_on_hand_made_distribution():
    probs = torch.tensor([[0.5, 0.2, 0.15, 0.1, 0.05]])
    logits = probs.log()
    # tokens strictly before reaching 0.8 mass are 0.5, 0.2 (cum 0.7 < 0.8) -> keep 0, 1, 2
    kept = apply_top_k_top_p(logits, [0], [0.8])
    assert torch.isfinite(kept).tolist() == [[True, True, True, False, False]]
    kept = apply_top_k_top_p(logits, [0], [0.5])
    assert torch.isfinite(kept).tolist() == [[True, False, False, False, False]]
    # top-k 4 then top-p 0.9 of the renormalised (0.5, 0.2, 0.15, 0.1)/0.95 -> keep 4
    kept = apply_top_k_top_p(logits, [4], [0.9])
    assert torch.isfinite(kept).tolist() == [[True, True, True, True, False]]
    # kept logits are unchanged
    assert torch.equal(kept[0, :4], logits[0, :4])

    sampler = Sampler(torch.device("cpu"))
    params = [SamplingParams(temperature=1.0, top_p=0.8, seed=s) for s in range(200)]
    out = sampler.sample(logits.expand(200, -1), [f"s{i}" for i in range(200)], params)
    assert set(out.token_ids) == {0, 1, 2}


def test_candidate_top_k_top_p_equals_full_sort():
    """Rows whose nucleus does not fit in the candidates (flat rows) take the full-sort fallback."""
    g = torch.Generator().manual_seed(4)
    logits = torch.cat([0.01 * torch.randn(3, 3000, generator=g), 8.0 * torch.randn(3, 3000, generator=g)])
    top_k = [0, 300, 0, 0, 40, 0]
    top_p = [0.9, 0.95, 1.0, 0.5, 0.8, 0.99]
    fast = apply_top_k_top_p(logits, top_k, top_p, num_candidates=64)
    full = apply_top_k_top_p(logits, top_k, top_p, num_candidates=3000)
    assert torch.equal(fast, full)
    assert torch.equal(fast[2], logits[2])
    kept = torch.isfinite(fast).sum(-1).tolist()
    assert 2000 < kept[0] < 3000 and 250 < kept[1] < 300 and kept[4] <= 40


def test_sampled_frequencies_follow_temperature():
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0]]).expand(4000, -1)
    sampler = Sampler(torch.device("cpu"), seed=3)
    out = sampler.sample(logits, ["x"] * 4000, [SamplingParams(temperature=0.5)] * 4000)
    freq = torch.bincount(torch.tensor(out.token_ids), minlength=4).float() / 4000
    expected = (logits[0] / 0.5).softmax(-1)
    assert (freq - expected).abs().max() < 0.03


def test_logprobs_normalised_with_top_alternatives():
    logits = _logits(3, seed=2)
    params = [SamplingParams(temperature=0.0, logprobs=5), SamplingParams(temperature=0.0), SamplingParams(logprobs=0)]
    out = Sampler(torch.device("cpu")).sample(logits, ["a", "b", "c"], params)
    lp = logits.log_softmax(-1)
    a = out.logprobs[0]
    assert a.token_id == out.token_ids[0] == int(logits[0].argmax())
    assert math.isclose(a.logprob, float(lp[0].max()), abs_tol=1e-5)
    assert len(a.top) == 5 and a.top[0][0] == a.token_id
    assert [t for t, _ in a.top] == lp[0].topk(5).indices.tolist()
    assert all(x >= y for (_, x), (_, y) in zip(a.top, a.top[1:]))
    assert math.isclose(sum(math.exp(v) for v in lp[0].tolist()), 1.0, abs_tol=1e-4)
    assert out.logprobs[1] is None
    c = out.logprobs[2]
    assert c.top == [] and c.logprob <= 0.0
    assert math.isclose(c.logprob, float(lp[2, c.token_id]), abs_tol=1e-5)


def _plan_for(params: SamplingParams, prompt: list[int], output: list[int], eos: int = 2):
    from backends.logits_adjust import LogitsAdjuster
    from backends.runner_driver import sampled_step
    from backends.sample_slots import SampleSlot
    from engine.request import Request

    request = Request("a", prompt, params, 0.0, eos_token_id=eos)
    request.append_output_token_ids(output)
    return LogitsAdjuster().plan([SampleSlot(sampled_step(request), 0, 1)], V)


def test_penalties_and_bias_change_the_greedy_pick_and_the_logprobs_stay_raw():
    logits = torch.zeros(1, V)
    logits[0, 7], logits[0, 3] = 5.0, 4.0
    sampler = Sampler(torch.device("cpu"))
    greedy = SamplingParams(temperature=0.0, frequency_penalty=2.0, logprobs=1, max_tokens=8)
    # token 7 already out once: 5 - 2 = 3 < 4, so 3 wins
    out = sampler.sample(logits, ["a"], [greedy], _plan_for(greedy, [1, 2], [7]))
    assert out.token_ids == [3]
    assert out.logprobs[0].top[0][0] == 7  # the model's own distribution, before any processing
    biased = SamplingParams(temperature=0.0, logit_bias={11: 100.0}, max_tokens=8)
    assert sampler.sample(logits, ["b"], [biased], _plan_for(biased, [1], [])).token_ids == [11]


def test_min_tokens_bans_eos_and_stop_ids_until_reached():
    logits = torch.zeros(1, V)
    logits[0, 2], logits[0, 9], logits[0, 4] = 9.0, 8.0, 1.0  # EOS (2) then a stop id (9) most likely
    params = SamplingParams(temperature=1.0, min_tokens=3, stop_token_ids=[9], max_tokens=8, seed=0)
    sampler = Sampler(torch.device("cpu"))
    for n in range(3):
        draws = {
            sampler.sample(logits, ["a"], [params], _plan_for(params, [1], [4] * n)).token_ids[0] for _ in range(20)
        }
        assert not draws & {2, 9}
    assert _plan_for(params, [1], [4] * 3) is None  # reached: nothing banned


def test_allowed_token_ids_confine_greedy_and_sampling():
    logits = _logits(1, seed=7)
    params = SamplingParams(temperature=0.0, allowed_token_ids=[4, 9, 30], max_tokens=8)
    plan = _plan_for(params, [1], [])
    sampler = Sampler(torch.device("cpu"))
    assert sampler.sample(logits, ["a"], [params], plan).token_ids == [max((4, 9, 30), key=lambda t: logits[0, t])]
    hot = SamplingParams(temperature=5.0, allowed_token_ids=[4, 9, 30], max_tokens=8, seed=1)
    draws = {sampler.sample(logits, ["h"], [hot], _plan_for(hot, [1], [])).token_ids[0] for _ in range(30)}
    assert draws <= {4, 9, 30} and len(draws) > 1


def test_min_p_keeps_the_tokens_near_the_most_likely():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05] + [1e-9] * (V - 4)]))
    x = apply_min_p(logits, torch.tensor([0.2]))
    assert torch.isfinite(x[0, :3]).all() and not torch.isfinite(x[0, 3:]).any()  # 0.05 < 0.2 * 0.5
    sampler = Sampler(torch.device("cpu"))
    params = SamplingParams(temperature=1.0, min_p=0.5, seed=3)  # keeps 0.5 and 0.3 only
    draws = {sampler.sample(logits, ["m"], [params]).token_ids[0] for _ in range(40)}
    assert draws == {0, 1}


def test_the_plan_applied_on_the_device_equals_the_formula():
    from tests.backends.test_logits_adjust import apply_plan

    params = SamplingParams(repetition_penalty=1.5, presence_penalty=0.5, logit_bias={3: -2.0}, max_tokens=8)
    plan = _plan_for(params, [3, 4, 5], [5, 6, 6])
    logits = _logits(1, seed=4)
    got = apply_logits_plan(logits, plan)
    torch.testing.assert_close(got.double(), torch.from_numpy(apply_plan(logits.numpy(), plan)), rtol=1e-6, atol=1e-6)
