"""The REMOTE tier under KV pressure (engine/kv/remote_tier.py, engine/scheduler_remote.py): a fake mover holds
the moved KV "at a peer" and hypothesis decides when each asynchronous move completes, fails, or when the peer
dies. A ``PagedKVRunner`` reads every token's context back through the block tables, so a wrong remote move
changes the output. Invariants checked after every step: no device or host block leaked or owned twice, each
request's KV in at most one tier, and every request's greedy output equal to an unpressured run's."""

from __future__ import annotations

import random

from hypothesis import event, given, settings
from hypothesis import strategies as st

from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.kv import Tier
from engine.kv.remote_tier import RemoteState
from engine.request import RequestStatus
from engine.scheduler import Scheduler


def _scheduler(remote_swap: str, num_device_blocks: int = 10, num_host_blocks: int = 0) -> Scheduler:
    scheduler = Scheduler(
        SchedulerConfig(max_num_batched_tokens=16, max_num_seqs=16, max_model_len=256),
        CacheConfig(
            block_size=4,
            num_device_blocks=num_device_blocks,
            num_host_blocks=num_host_blocks,
            enable_prefix_caching=False,
            remote_swap=remote_swap,
        ),
        ManualClock(),
    )
    scheduler.remote_available = remote_swap != "off"
    return scheduler


def _workload(make_request):
    return [
        make_request(f"r{i}", prompt=[10 * i + j for j in range(4 + i)], max_tokens=12 + i, arrival_time_s=float(i))
        for i in range(6)
    ]


class FakeMover:
    """The peer's store and the network, on the PagedKVRunner's device blocks. Moves complete when ``settle``
    says so (hypothesis draws the choices)."""

    def __init__(self, scheduler: Scheduler, runner) -> None:
        self.scheduler = scheduler
        self.runner = runner
        self.sending: dict[str, list] = {}  # req id → the blocks' contents, on their way to the peer
        self.held: dict[str, list] = {}  # at the peer, by handle (= req id)
        self.fetching: set[str] = set()
        self.ready: dict[str, list] = {}  # back here, waiting for device blocks
        self.num_out = self.num_in = self.num_failed = 0

    def apply(self, batch) -> None:
        for move in batch.remote_swap_out:  # before the runner: read the blocks now
            self.sending[move.req_id] = [list(self.runner.device[b]) for b in move.block_ids]
            self.num_out += 1
        for move in batch.remote_swap_in:
            contents = self.ready.pop(move.req_id)
            assert len(contents) == len(move.block_ids)
            for block_id, values in zip(move.block_ids, contents):
                self.runner.device[block_id] = list(values)
            self.num_in += 1
        for fetch in batch.remote_fetch:
            assert fetch.peer_id == "peer" and fetch.handle in self.held
            self.fetching.add(fetch.req_id)
        for drop in self.scheduler.kv_cache_manager.remote.take_drops():
            self.sending.pop(drop.req_id, None)
            self.held.pop(drop.req_id, None)
            self.fetching.discard(drop.req_id)
            self.ready.pop(drop.req_id, None)

    def settle(self, choose) -> None:
        """Complete, fail or leave pending each move in flight (``choose()`` → "wait" | "ok" | "fail" | "kill";
        "kill": the peer dies with everything it holds)."""
        s = self.scheduler
        if self.held and choose() == "kill":
            for req_id in list(self.held):
                del self.held[req_id]
                self.fetching.discard(req_id)
                assert s.remote_failed(req_id)
                self.num_failed += 1
        for req_id in list(self.sending):
            outcome = choose()
            if outcome == "ok":
                self.held[req_id] = self.sending.pop(req_id)
                assert s.remote_stored(req_id, "peer", req_id)
            elif outcome == "fail":
                del self.sending[req_id]
                assert s.remote_failed(req_id)
                self.num_failed += 1
        for req_id in list(self.fetching):
            outcome = choose()
            if outcome == "ok":
                self.fetching.discard(req_id)
                self.ready[req_id] = self.held.pop(req_id)
                assert s.remote_fetched(req_id)
            elif outcome == "fail":
                self.fetching.discard(req_id)
                self.held.pop(req_id)
                assert s.remote_failed(req_id)
                self.num_failed += 1


def _check_invariants(scheduler: Scheduler, runner_pins: list[int]) -> None:
    manager = scheduler.kv_cache_manager
    for tier in (Tier.DEVICE, Tier.HOST):
        tables = manager.block_tables(tier)
        owned = [b for t in tables.values() for b in t] + (runner_pins if tier is Tier.DEVICE else [])
        assert len(owned) == len(set(owned)), f"a {tier.value} block is owned twice"
        assert manager.pool(tier).num_used_blocks == len(owned), f"a {tier.value} block leaked"
    device, host = manager.block_tables(Tier.DEVICE), manager.block_tables(Tier.HOST)
    remote = {e.req_id for e in manager.remote.entries()}
    assert not (set(device) & set(host) or set(device) & remote or set(host) & remote), "KV in two tiers"
    for req_id in remote:
        request = scheduler.get_request(req_id)
        assert request is not None and request.status is RequestStatus.SWAPPED
    for request in scheduler._swapped:
        assert request.req_id in host or request.req_id in remote
    for request in scheduler._running:
        assert request.req_id in device


def _reference(make_request, kv_runner_cls, run):
    scheduler = _scheduler("off", num_device_blocks=1024)
    for request in _workload(make_request):
        scheduler.add_request(request)
    return run(scheduler, kv_runner_cls.for_scheduler(scheduler)).outputs


def _run_pressured(scheduler, make_request, kv_runner_cls, choose):
    runner = kv_runner_cls.for_scheduler(scheduler)
    mover = FakeMover(scheduler, runner)
    for request in _workload(make_request):
        scheduler.add_request(request)
    outputs: dict[str, list[int]] = {}
    for _ in range(5000):
        if not scheduler.has_unfinished_requests():
            break
        mover.settle(choose)
        batch = scheduler.schedule()
        mover.apply(batch)
        _check_invariants(scheduler, scheduler.kv_cache_manager.pinned_block_ids)
        for update in scheduler.update_from_output(batch, runner.execute(batch)):
            outputs.setdefault(update.req_id, []).extend(update.new_token_ids)
    assert not scheduler.has_unfinished_requests(), "no progress"
    manager = scheduler.kv_cache_manager
    assert manager.num_free_device_blocks == manager.num_device_blocks and not manager.remote
    return outputs, mover


@settings(max_examples=30, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    weights=st.tuples(*[st.integers(0, 4)] * 3, st.integers(0, 1)),  # wait, ok, fail, kill
    mode=st.sampled_from(["fallback", "prefer"]),
    num_host_blocks=st.sampled_from([0, 3]),
)
def test_remote_swap_keeps_every_output_and_owns_every_block_once(
    seed, weights, mode, num_host_blocks, make_request, kv_runner_cls, run
):
    rng = random.Random(seed)
    weights = (weights[0], weights[1] + 1, *weights[2:])  # moves do complete sometimes

    def choose():
        return rng.choices(["wait", "ok", "fail", "kill"], weights)[0]

    reference = _reference(make_request, kv_runner_cls, run)
    scheduler = _scheduler(mode, num_host_blocks=num_host_blocks)
    outputs, mover = _run_pressured(scheduler, make_request, kv_runner_cls, choose)
    assert outputs == reference
    assert mover.num_out > 0  # the pressure did send KV to the peer
    event(f"failed moves: {min(mover.num_failed, 3)}+")


def test_every_move_succeeding_swaps_out_and_in_without_recompute(make_request, kv_runner_cls, run):
    reference = _reference(make_request, kv_runner_cls, run)
    scheduler = _scheduler("fallback")

    outputs, mover = _run_pressured(scheduler, make_request, kv_runner_cls, lambda: "ok")
    assert outputs == reference
    assert mover.num_out == mover.num_in > 0 and mover.num_failed == 0
    assert scheduler.make_stats().num_recomputed_tokens_total == 0


def test_a_failed_move_falls_back_to_recompute(make_request, kv_runner_cls, run):
    reference = _reference(make_request, kv_runner_cls, run)
    scheduler = _scheduler("fallback")

    outputs, mover = _run_pressured(scheduler, make_request, kv_runner_cls, lambda: "fail")
    assert outputs == reference
    assert mover.num_failed == mover.num_out > 0 and mover.num_in == 0
    assert scheduler.make_stats().num_recomputed_tokens_total > 0


def test_without_a_mover_victims_recompute(make_request, kv_runner_cls, run):
    scheduler = _scheduler("fallback")
    scheduler.remote_available = False
    outputs, mover = _run_pressured(scheduler, make_request, kv_runner_cls, lambda: "ok")
    assert mover.num_out == 0 and outputs == _reference(make_request, kv_runner_cls, run)


def test_waiting_on_remote_and_abort_leaves_a_drop_notice(make_request):
    scheduler = _scheduler("prefer", num_device_blocks=4)
    a, b = make_request("a", prompt=8, max_tokens=20), make_request("b", prompt=8, max_tokens=20, arrival_time_s=1.0)
    scheduler.add_request(a)
    scheduler.add_request(b)
    batch = scheduler.schedule()  # both prefill: 2 + 2 blocks
    from engine.batch import RunnerOutput

    scheduler.update_from_output(batch, RunnerOutput({"a": [1], "b": [1]}))
    batch = scheduler.schedule()  # both need a third block: b goes remote
    assert [m.req_id for m in batch.remote_swap_out] == ["b"] and len(batch.remote_swap_out[0].block_ids) == 2
    assert scheduler.kv_cache_manager.tier_of("b") is Tier.REMOTE
    assert scheduler.kv_cache_manager.remote.get("b").state is RemoteState.SENDING
    scheduler.finish_requests(["a"], "abort")
    assert scheduler.is_waiting_on_remote()  # b's bytes are on the wire; nothing else to run
    assert scheduler.remote_stored("b", "peer", "h1") and not scheduler.is_waiting_on_remote()
    batch = scheduler.schedule()
    assert [(f.req_id, f.peer_id, f.handle) for f in batch.remote_fetch] == [("b", "peer", "h1")]
    scheduler.finish_requests(["b"], "abort")
    (drop,) = scheduler.kv_cache_manager.remote.take_drops()
    assert (drop.req_id, drop.peer_id, drop.handle) == ("b", "peer", "h1")
    assert not scheduler.remote_fetched("b") and not scheduler.remote_failed("b")  # late reports are ignored
