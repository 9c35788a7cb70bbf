"""Speculative decoding on the torch backend: exact rejection sampling (chi-square on the tiny model),
the draft-model proposer, vocabulary checks, and greedy identity on the real model for every proposer."""

from __future__ import annotations

import math
from collections import Counter

import msgspec
import pytest
import torch

from backends.torch import TorchModelRunner, build_model, random_state_dict
from backends.torch.draft_proposer import DraftModelProposer, VocabMismatchError, check_vocab
from backends.torch.rejection_sampler import rejection_sample
from engine.batch import ScheduledRequest, SchedulerOutput
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.model_runner import KVCacheSpec
from engine.sampling_params import SamplingParams
from engine.spec import SpecDecodeConfig, Speculator
from engine.spec.ngram_proposer import NgramProposer


@pytest.fixture(autouse=True)
def _one_thread():
    """One intra-op thread: these steps are small, and on a shared host OpenMP barriers between two
    threads cost more than the work (20x here)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


class _IdTokenizer:
    """Token ids in, token ids out (the tiny model has no tokenizer)."""

    eos_token_id = None

    def __init__(self, vocab_size: int) -> None:
        self.vocab_size = vocab_size

    def encode(self, text, add_special_tokens=False):
        raise NotImplementedError

    def decode(self, ids, skip_special_tokens=True):
        return " ".join(map(str, ids))

    def apply_chat_template(self, messages, add_generation_prompt=True):
        raise NotImplementedError


def _generate_ids(engine: LLMEngine, prompts, params: SamplingParams) -> list[list[int]]:
    """Every generated token id of each prompt, in prompt order."""
    ids = [engine.add_request(p, params) for p in prompts]
    got: dict[str, list[int]] = {i: [] for i in ids}
    while engine.has_unfinished_requests():
        for out in engine.step():
            got[out.req_id].extend(out.new_token_ids)
    return [got[i] for i in ids]


def _chi2_critical(df: int, z: float = 3.09) -> float:
    """Upper 0.1 % point of chi-square(df), Wilson-Hilferty approximation (good to ~1 % for df >= 3)."""
    h = 2.0 / (9.0 * df)
    return df * (1.0 - h + z * math.sqrt(h)) ** 3


def _chi2(observed: Counter, expected: torch.Tensor, min_expected: float = 5.0) -> tuple[float, int]:
    """Pearson's statistic over the token cells, cells expecting < min_expected pooled into one."""
    total = float(expected.sum())
    stat, df = 0.0, -1
    pooled_obs, pooled_exp = 0.0, 0.0
    for token_id, e in enumerate(expected.tolist()):
        o = observed.get(token_id, 0)
        if e < min_expected:
            pooled_obs, pooled_exp = pooled_obs + o, pooled_exp + e
            continue
        stat += (o - e) ** 2 / e
        df += 1
    if pooled_exp > 0:
        stat += (pooled_obs - pooled_exp) ** 2 / max(pooled_exp, 1e-9)
        df += 1
    assert abs(sum(observed.values()) - total) < 1e-6 * total + 1
    return stat, df


def _context_probs(runner: TorchModelRunner, contexts: list[tuple[int, ...]], temperature: float) -> dict:
    """The target's next-token distribution after each context (softmax(logits / T))."""
    probs = {}
    for i in range(0, len(contexts), 64):
        chunk = contexts[i : i + 64]
        reqs = [
            ScheduledRequest(str(j), list(c), 0, list(range(j * 4, j * 4 + 4)), True, SamplingParams(temperature=0))
            for j, c in enumerate(chunk)
        ]
        logits = runner.compute_logits(SchedulerOutput(step_id=i, requests=reqs))
        for j, c in enumerate(chunk):
            probs[c] = (logits[str(j)][-1] / temperature).softmax(-1).double()
    return probs


@pytest.fixture(scope="module")
def tiny_pair(tiny):
    """(config, target model, a draft model with other random weights: its proposals are often rejected)."""
    config, _sd, target = tiny
    draft = build_model(config, "float32", state_dict=random_state_dict(config, seed=7, std=0.2))
    return config, target, draft


def test_sampled_output_follows_the_target_distribution(tiny_pair):
    """Chi-square: the first tokens a draft model's sampled drafts turn into are distributed as the target
    samples them, although the draft's own distribution differs (acceptance well below 1)."""
    config, target, draft = tiny_pair
    temperature = 1.0
    num_requests = 1500
    prompt = [5, 17, 33, 2]
    runner = TorchModelRunner(target)
    engine = LLMEngine(
        runner,
        _IdTokenizer(config.vocab_size),
        SchedulerConfig(max_num_batched_tokens=8192, max_num_seqs=num_requests, max_model_len=64),
        CacheConfig(block_size=4, num_device_blocks=num_requests * 4, num_host_blocks=0),
        detokenize=False,
    )
    proposer = DraftModelProposer(
        TorchModelRunner(draft), config.vocab_size, num_blocks=num_requests * 4, block_size=4, seed=3
    )
    spec = SpecDecodeConfig(method="model", num_spec_tokens=2, adaptive=False, max_batch_size=0)
    engine.speculator = Speculator(proposer, spec)
    params = SamplingParams(temperature=temperature, max_tokens=4, ignore_eos=True)
    tokens = [tuple(ids) for ids in _generate_ids(engine, [prompt] * num_requests, params)]
    stats = engine.make_spec_stats()
    assert stats.num_draft_tokens_total >= num_requests  # every request verified drafts
    assert 0.1 < stats.acceptance_rate < 0.9  # both the accept and the residual paths were taken

    verify_runner = TorchModelRunner(target)
    verify_runner.initialize_kv_cache(KVCacheSpec(64 * 4, 0, 4))
    # token 2 (the first verified one; drafts accepted or the residual) and token 3, given what came before
    for position in (1, 2):
        contexts = sorted({tuple(prompt) + t[:position] for t in tokens})
        probs = _context_probs(verify_runner, contexts, temperature)
        expected = sum(probs[tuple(prompt) + t[:position]] for t in tokens)
        observed = Counter(t[position] for t in tokens)
        stat, df = _chi2(observed, expected)
        assert stat < _chi2_critical(df), (position, stat, df)


def test_a_wrong_proposal_distribution_is_caught(tiny_pair):
    """The test's power: verifying with a q that is not the one the drafts came from skews the output,
    and the same chi-square check rejects it."""
    config, _target, _draft = tiny_pair
    gen = torch.Generator().manual_seed(0)
    p = torch.softmax(torch.randn(config.vocab_size, generator=gen) * 2, -1)
    q = torch.softmax(torch.randn(config.vocab_size, generator=gen) * 2, -1)
    n = 4000
    right, wrong = Counter(), Counter()
    uniform = torch.full_like(q, 1.0 / config.vocab_size)
    for _ in range(n):
        d = int(torch.multinomial(q, 1, generator=gen))
        u = torch.rand(3, generator=gen)
        right[rejection_sample(torch.stack([p, p]), [d], q[None], u)[0]] += 1
        wrong[rejection_sample(torch.stack([p, p]), [d], uniform[None], u)[0]] += 1
    stat, df = _chi2(right, p.double() * n)
    assert stat < _chi2_critical(df)
    stat, df = _chi2(wrong, p.double() * n)
    assert stat > _chi2_critical(df)


def test_vocab_mismatch_is_refused(tiny, smollm2_checkpoint):
    _config, _sd, model = tiny
    with pytest.raises(VocabMismatchError, match="97 tokens, the target's 49152"):
        DraftModelProposer(TorchModelRunner(model), 49152)

    class Shifted:
        vocab_size = smollm2_checkpoint.tokenizer.vocab_size
        eos_token_id = smollm2_checkpoint.tokenizer.eos_token_id

        def decode(self, ids, skip_special_tokens=True):
            return smollm2_checkpoint.tokenizer.decode([(ids[0] + 1) % self.vocab_size], skip_special_tokens)

    tok = smollm2_checkpoint.tokenizer
    with pytest.raises(VocabMismatchError, match="disagree on token id"):
        check_vocab(tok, Shifted(), tok.vocab_size, tok.vocab_size)
    check_vocab(tok, tok, tok.vocab_size, tok.vocab_size)


def _real_engine(model, checkpoint, speculator_for=None):
    runner = TorchModelRunner(model)
    engine = LLMEngine(
        runner,
        checkpoint.tokenizer,
        SchedulerConfig(max_num_batched_tokens=512, max_num_seqs=8, max_model_len=1024),
        CacheConfig(block_size=16, num_device_blocks=128, num_host_blocks=0),
    )
    if speculator_for is not None:
        engine.speculator = speculator_for(engine)
    return engine


def test_greedy_output_is_token_identical_on_the_real_model(smollm2_model, smollm2_checkpoint):
    """Plain decoding vs the n-gram proposer vs the draft-model proposer (the same weights, its own KV) vs
    the same draft model behind a draft agent on loopback (remote)."""
    from anyio.from_thread import start_blocking_portal

    from agent.draft_server import DraftServer
    from transport.remote_drafter import RemoteProposer

    tok = smollm2_checkpoint.tokenizer
    prompts = [
        "one two three four five one two three four five one two three",
        "The capital of France is",
    ]
    params = SamplingParams(temperature=0.0, max_tokens=12)
    spec = SpecDecodeConfig(num_spec_tokens=3, adaptive=False, max_batch_size=0)

    def draft_model() -> DraftModelProposer:
        runner = TorchModelRunner(smollm2_model)
        return DraftModelProposer(runner, tok.vocab_size, num_blocks=64, sample_drafts=False)

    baseline = _generate_ids(_real_engine(smollm2_model, smollm2_checkpoint), prompts, params)
    assert all(len(ids) == 12 for ids in baseline)
    with start_blocking_portal() as portal:
        server = DraftServer(draft_model(), tok.vocab_size)
        future, endpoint = portal.start_task(server.run)
        remote = RemoteProposer(endpoint, timeout_s=30.0)
        try:
            assert remote.pair(tok.vocab_size) == tok.vocab_size
            for name, proposer in (("ngram", NgramProposer(1, 3)), ("model", draft_model()), ("remote", remote)):
                engine = _real_engine(smollm2_model, smollm2_checkpoint, lambda e, p=proposer: Speculator(p, spec))
                assert _generate_ids(engine, prompts, params) == baseline, name
                stats = engine.make_spec_stats()
                assert stats.num_accepted_tokens_total > 0, name
                if name != "ngram":  # the same weights propose exactly what the target picks
                    assert stats.acceptance_rate > 0.9, name
            assert remote.num_timeouts == 0
        finally:
            remote.close()
            future.cancel()  # the draft agent stops


def test_a_predicted_output_cuts_the_steps_on_the_real_model_and_changes_no_token(smollm2_model, smollm2_checkpoint):
    """OpenAI's Predicted Outputs on SmolLM2 with the n-gram proposer: the greedy answer given back as the prediction
    (tokenized as the intake does) is drafted and accepted; one with a word changed costs a few plain steps; the
    output is the same token for token each time."""
    from engine.spec.prediction_drafts import tokenized

    tok = smollm2_checkpoint.tokenizer
    prompt = "The capital of France is"
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    spec = SpecDecodeConfig(num_spec_tokens=4, adaptive=False, max_batch_size=0)

    def run(prediction: str | None):
        engine = _real_engine(smollm2_model, smollm2_checkpoint, lambda e: Speculator(NgramProposer(1, 3), spec))
        asked = params if prediction is None else tokenized(tok, msgspec.structs.replace(params, prediction=prediction))
        req_id = engine.add_request(prompt, asked)
        ids, steps, last = [], 0, None
        while engine.has_unfinished_requests():
            steps += 1
            for last in engine.step():
                assert last.req_id == req_id
                ids.extend(last.new_token_ids)
        counts = (last.num_prediction_accepted_tokens, last.num_prediction_rejected_tokens)  # OpenAI's usage
        assert sum(counts) == len(asked.prediction_token_ids) and counts[0] <= len(ids)
        return ids, steps, engine.speculator

    plain, plain_steps, _ = run(None)
    text = tok.decode(plain, skip_special_tokens=True)
    exact, exact_steps, speculator = run(text)
    assert exact == plain and exact_steps < plain_steps / 2
    assert speculator.make_stats().num_prediction_accepted_tokens_total >= 16
    words = text.split(" ")
    middle = len(words) // 2
    edited = " ".join([*words[:middle], "elephant", *words[middle + 1 :]])
    after_edit, edit_steps, _ = run(edited)
    assert after_edit == plain and exact_steps <= edit_steps < plain_steps
