"""The speculator on the sans-IO scheduler with the paged fake runner: exactness, KV rollback, batch gate.

``PagedKVRunner`` (tests/engine/conftest.py) computes every token from the KV read back through the block
table, so a rolled-back block handed out wrongly, or a rejected draft's KV left where a real token's
belongs, changes every later token of that request.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.kv.block_manager import cdiv
from engine.request import RequestStatus
from engine.spec import Draft, SpecDecodeConfig, Speculator
from engine.spec.proposer import DraftRequest


class RandomProposer:
    """Drafts from a tiny alphabet (often right against a runner with the same vocabulary)."""

    name = "random"

    def __init__(self, vocab_size: int, seed: int) -> None:
        self.vocab_size = vocab_size
        self.rng = random.Random(seed)
        self.dropped: list[str] = []
        self.calls: list[list[str]] = []

    def propose(self, requests: list[DraftRequest]) -> dict[str, Draft]:
        self.calls.append([r.req_id for r in requests])
        out = {}
        for r in requests:
            n = self.rng.randint(0, r.num_spec_tokens)
            out[r.req_id] = Draft([self.rng.randrange(self.vocab_size) for _ in range(n)])
        return out

    def drop(self, req_ids) -> None:
        self.dropped.extend(req_ids)


def _drive(scheduler, runner, speculator=None, check=None, max_steps=5000):
    outputs: dict[str, list[int]] = {}
    steps = 0
    while scheduler.has_unfinished_requests():
        assert steps < max_steps
        if speculator is not None:
            speculator.propose(scheduler.running_requests())
        batch = scheduler.schedule()
        out = runner.execute(batch)
        updates = scheduler.update_from_output(batch, out)
        for update in updates:
            outputs.setdefault(update.req_id, []).extend(update.new_token_ids)
        if speculator is not None:  # as LLMEngine.finish_step
            speculator.observe(batch, out)
            speculator.drop([u.req_id for u in updates if u.finished] + batch.finished_req_ids)
        if check is not None:
            check(scheduler)
        steps += 1
    return outputs, steps


def _check_tables(scheduler) -> None:
    """After every step: a running request's table covers exactly its computed tokens (rejected drafts'
    blocks released), and the device pool's used blocks are exactly those some table or pin holds."""
    manager = scheduler.kv_cache_manager
    tables = manager.block_tables(manager.tiers[0])
    for request in scheduler.running_requests():
        table = tables.get(request.req_id, [])
        assert len(table) == cdiv(request.num_computed_tokens, manager.block_size), request
    held = {b for t in tables.values() for b in t} | set(manager.pinned_block_ids)
    pool = manager.pool(manager.tiers[0])
    in_use = {b for b in range(pool.num_blocks) if pool.ref_count(b) > 0}
    assert in_use == held


@settings(max_examples=60, deadline=None)
@given(
    prompts=st.lists(st.integers(1, 20), min_size=1, max_size=4),
    max_tokens=st.integers(1, 14),
    block_size=st.sampled_from([1, 2, 4]),
    num_device_blocks=st.integers(24, 64),
    k=st.integers(1, 5),
    seed=st.integers(0, 1000),
    prefix_caching=st.booleans(),
)
def test_rejected_drafts_are_rolled_back_and_output_is_unchanged(
    make_scheduler,
    make_request,
    kv_runner_cls,
    prompts,
    max_tokens,
    block_size,
    num_device_blocks,
    k,
    seed,
    prefix_caching,
):
    vocab = 3  # drafts from 3 tokens against a 3-token runner: about a third accepted, the rest rejected
    results = []
    for speculate in (False, True):
        scheduler = make_scheduler(
            block_size=block_size,
            num_device_blocks=num_device_blocks,
            num_host_blocks=64,
            enable_prefix_caching=prefix_caching,
            max_num_batched_tokens=32,
        )
        runner = kv_runner_cls.for_scheduler(scheduler, vocab_size=vocab)
        for i, n in enumerate(prompts):
            scheduler.add_request(make_request(f"r{i}", [(i + j) % vocab for j in range(n)], max_tokens=max_tokens))
        speculator = None
        if speculate:
            config = SpecDecodeConfig(num_spec_tokens=k, adaptive=False, max_batch_size=0)
            speculator = Speculator(RandomProposer(vocab, seed), config)
        outputs, _ = _drive(scheduler, runner, speculator, check=_check_tables if speculate else None)
        manager = scheduler.kv_cache_manager
        assert manager.num_free_device_blocks == manager.num_device_blocks  # nothing leaked
        results.append(outputs)
        if speculate:
            stats = speculator.make_stats()
            assert stats.num_accepted_tokens_total <= stats.num_draft_tokens_total
            assert sorted(set(speculator.proposer.dropped)) == sorted(outputs)  # every request forgotten
    assert results[0] == results[1]


def test_exact_drafts_cut_the_number_of_steps(make_scheduler, make_request, kv_runner_cls):
    """An oracle proposer (it knows the runner's greedy answer) makes every draft accepted."""
    scheduler = make_scheduler(block_size=4, max_num_batched_tokens=64)
    runner = kv_runner_cls.for_scheduler(scheduler)
    scheduler.add_request(make_request("r0", 6, max_tokens=25))
    plain, plain_steps = _drive(scheduler, runner)
    answer = plain["r0"]

    class Oracle:
        name = "oracle"

        def propose(self, requests):
            (r,) = requests
            done = len(r.token_ids) - 6
            return {r.req_id: Draft(answer[done : done + r.num_spec_tokens])}

        def drop(self, req_ids):
            pass

    scheduler = make_scheduler(block_size=4, max_num_batched_tokens=64)
    runner = kv_runner_cls.for_scheduler(scheduler)
    scheduler.add_request(make_request("r0", 6, max_tokens=25))
    speculator = Speculator(Oracle(), SpecDecodeConfig(num_spec_tokens=4, adaptive=False))
    spec, spec_steps = _drive(scheduler, runner, speculator)
    assert spec == plain
    stats = speculator.make_stats()
    # 24 tokens after the prefill: four rounds of 4 drafts + 1, then 3 + 1 (max_tokens leaves room for 3)
    assert stats.acceptance_rate == 1.0 and stats.num_draft_tokens_total == 19 and stats.num_drafts_total == 5
    assert spec_steps == 1 + 5  # prefill (+1 token), then 24 tokens in verification steps of 5
    assert plain_steps == 25


def test_no_drafts_when_the_batch_is_large_or_prefilling(make_scheduler, make_request, kv_runner_cls):
    scheduler = make_scheduler(block_size=4, max_num_batched_tokens=256, max_num_seqs=16)
    runner = kv_runner_cls.for_scheduler(scheduler)
    proposer = RandomProposer(97, 0)
    speculator = Speculator(proposer, SpecDecodeConfig(num_spec_tokens=3, adaptive=False, max_batch_size=2))
    for i in range(3):
        scheduler.add_request(make_request(f"r{i}", 5, max_tokens=6))
    speculator.propose(scheduler.running_requests())  # nothing running yet: nothing asked
    assert proposer.calls == []
    _drive(scheduler, runner, speculator)
    assert proposer.calls == []  # 3 running > max_batch_size 2 every step
    assert speculator.make_stats().num_steps_spec_off_total > 0

    scheduler.add_request(make_request("solo", 5, max_tokens=4))
    _drive(scheduler, runner, speculator)
    assert proposer.calls and all(ids == ["solo"] for ids in proposer.calls)
    assert all(len(c) <= 1 for c in proposer.calls)
    assert scheduler.get_request("solo") is None or scheduler.get_request("solo").status is not RequestStatus.RUNNING


def test_measured_costs_turn_k_down_when_verification_is_expensive(make_scheduler, make_request, kv_runner_cls):
    """A verifier whose step time grows a full decode step per draft token makes speculation pointless."""
    from engine.batch import RunnerOutput

    class CostlyRunner:
        def __init__(self, inner):
            self.inner = inner

        def execute(self, batch) -> RunnerOutput:
            out = self.inner.execute(batch)
            out.step_time_s = 0.1 * (1 + sum(len(r.spec_token_ids) for r in batch.requests))
            return out

    scheduler = make_scheduler(block_size=4, max_num_batched_tokens=64)
    runner = CostlyRunner(kv_runner_cls.for_scheduler(scheduler))
    speculator = Speculator(RandomProposer(97, 1), SpecDecodeConfig(num_spec_tokens=4, initial_acceptance=0.9))
    scheduler.add_request(make_request("r0", 4, max_tokens=60))
    _drive(scheduler, runner, speculator)
    assert speculator.verify_cost > 0.5
