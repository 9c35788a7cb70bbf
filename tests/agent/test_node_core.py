"""NodeCore, the sans-IO node loop: bookkeeping, what leaves the node, observations on a manual clock."""

from __future__ import annotations

import dataclasses

import pytest

from agent.node_core import FinishedRequest, NodeCore
from backends.fake import ByteTokenizer, TrivialRunner, cpu_test_hardware
from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.sampling_params import SamplingParams

Z = TrivialRunner().token_id  # the one token the trivial runner samples ("z")


def _core(
    *,
    observe: bool = False,
    node_id: str = "n0",
    token_budget: int = 64,
    max_model_len: int = 64,
    block_size: int = 4,
    num_device_blocks: int = 64,
    num_host_blocks: int = 0,
    prefix_hash_algo: str = "sha256",
) -> tuple[NodeCore, ManualClock]:
    """A NodeCore around a trivial engine on a ManualClock (time moves only when the test advances it)."""
    clock = ManualClock()
    engine = LLMEngine(
        TrivialRunner(max_model_len=max_model_len),
        ByteTokenizer(),
        SchedulerConfig(max_num_batched_tokens=token_budget, max_num_seqs=8, max_model_len=max_model_len),
        CacheConfig(
            block_size=block_size,
            num_device_blocks=num_device_blocks,
            num_host_blocks=num_host_blocks,
            prefix_hash_algo=prefix_hash_algo,
        ),
        clock,
    )
    return NodeCore(engine, node_id, observe=observe), clock


def _prompt(n: int) -> list[int]:
    return [3 + i % 200 for i in range(n)]


def _params(max_tokens: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=max_tokens)


def _pending_fields(core: NodeCore) -> tuple[int, int]:
    report = core.load_report()
    return report.queued_prefill_tokens, report.decode_batch_size


def _observed_step(core: NodeCore):
    """One step through start_step/finish_step, then its observation (as the agent's engine thread does)."""
    pending = core.start_step()
    assert pending is not None
    outputs = core.finish_step(pending)
    return outputs, core.observation(outputs, pending.step_time_s)


# -- steps --------------------------------------------------------------------------------------------


def test_start_and_finish_step_run_a_request_to_its_length():
    core, _ = _core()
    core.add("a", _prompt(5), _params(3))
    assert core.has_work()
    tokens, finals = [], []
    for _ in range(10):
        pending = core.start_step()
        if pending is None:
            break
        for o in core.finish_step(pending):
            assert o.req_id == "a"
            tokens += o.new_token_ids
            if o.finished:
                finals.append(o)
    assert tokens == [Z, Z, Z]
    (final,) = finals
    assert final.finish_reason.value == "length" and final.num_output_tokens == 3 and final.num_prompt_tokens == 5
    assert not core.has_work()


def test_start_step_is_none_when_there_is_nothing_to_run():
    core, _ = _core()
    assert core.start_step() is None
    assert core.step() == []
    core.add("a", _prompt(4), _params(1))
    assert [o.finished for o in core.step()] == [True]
    # at most one more step, which only tells the runner to forget the finished request
    for _ in range(2):
        pending = core.start_step()
        if pending is None:
            break
        assert pending.batch.is_empty and core.finish_step(pending) == []
    assert core.start_step() is None


def test_step_is_finish_step_of_start_step():
    by_step, _ = _core(node_id="n")
    by_halves, _ = _core(node_id="n")
    for core in (by_step, by_halves):
        core.add("a", _prompt(9), _params(3))
        core.add("b", _prompt(4), _params(2))

    def run_by_halves():
        pending = by_halves.start_step()
        return [] if pending is None else by_halves.finish_step(pending)

    for _ in range(6):
        whole, halves = by_step.step(), run_by_halves()
        assert [by_step.token_chunk(o) for o in whole] == [by_halves.token_chunk(o) for o in halves]
        assert by_step.num_inflight == by_halves.num_inflight
        assert by_step.num_finished_total == by_halves.num_finished_total
        assert _pending_fields(by_step) == _pending_fields(by_halves)
    assert by_step.num_finished_total == 2 and by_step.num_inflight == 0


# -- bookkeeping --------------------------------------------------------------------------------------


def test_prompt_tokens_stay_queued_until_the_first_token_then_the_request_decodes():
    core, _ = _core(token_budget=8)  # a 20-token prompt takes three steps: 8 + 8 + 4 (the last samples)
    core.add("a", _prompt(20), _params(2))
    assert core.num_inflight == 1 and _pending_fields(core) == (20, 0)
    assert core.step() == []
    assert _pending_fields(core) == (20, 0)
    assert core.step() == []
    assert _pending_fields(core) == (20, 0)
    (first,) = core.step()
    assert first.new_token_ids == [Z] and not first.finished
    assert _pending_fields(core) == (0, 1) and core.num_inflight == 1 and core.num_finished_total == 0
    (last,) = core.step()
    assert last.finished
    assert _pending_fields(core) == (0, 0) and core.num_inflight == 0 and core.num_finished_total == 1
    assert core.load_report().num_requests_finished_total == 1


def test_queued_prompt_tokens_add_up_over_requests():
    core, _ = _core()
    core.add("a", _prompt(20), _params(4))
    core.add("b", _prompt(7), _params(4))
    assert core.num_inflight == 2 and _pending_fields(core) == (27, 0)
    core.step()  # both prompts fit the budget: both get their first token
    assert _pending_fields(core) == (0, 2)
    core.add("c", _prompt(5), _params(4))
    assert core.num_inflight == 3 and _pending_fields(core) == (5, 2)


def test_a_load_report_names_its_node_and_the_engine_counts():
    core, _ = _core(node_id="node-3")
    core.add("a", _prompt(5), _params(4))
    core.add("b", _prompt(5), _params(4))
    report = core.load_report()
    assert report.node_id == "node-3" and report.num_waiting == 2 and report.num_running == 0
    core.step()
    report = core.load_report()
    assert report.num_waiting == 0 and report.num_running == 2 and report.num_free_device_blocks < 64


# -- abort --------------------------------------------------------------------------------------------


def test_abort_forgets_the_request_and_ignores_unknown_ids():
    core, _ = _core()
    core.add("a", _prompt(5), _params(4))
    core.add("b", _prompt(6), _params(4))
    core.step()  # both decode now
    core.abort(["a", "never-added"])
    assert core.num_inflight == 1 and core.num_finished_total == 0
    assert _pending_fields(core) == (0, 1)
    assert core.engine.num_unfinished_requests == 1
    seen = set()
    while core.has_work():
        seen |= {o.req_id for o in core.step()}
    assert seen == {"b"} and core.num_inflight == 0 and core.num_finished_total == 1


def test_abort_of_unknown_or_finished_ids_changes_nothing():
    core, _ = _core()
    core.add("a", _prompt(4), _params(1))
    core.step()  # "a" finished
    core.add("b", _prompt(4), _params(3))
    core.abort(["a", "x"])
    assert core.num_inflight == 1 and core.num_finished_total == 1 and _pending_fields(core) == (4, 0)


def test_abort_all_forgets_prompts_and_decoding_requests():
    core, _ = _core(token_budget=8)
    core.add("a", _prompt(4), _params(8))
    core.step()  # "a" decodes
    core.add("b", _prompt(20), _params(8))  # "b" still has its prompt to compute
    core.step()
    assert _pending_fields(core) == (20, 1) and core.num_inflight == 2
    core.abort_all()
    assert core.num_inflight == 0 and _pending_fields(core) == (0, 0) and core.num_finished_total == 0
    assert not core.has_work()
    for _ in range(3):
        assert core.step() == []


def test_an_id_listed_twice_is_aborted_once():
    core, _ = _core()
    core.add("a", _prompt(4), _params(4))
    core.add("b", _prompt(4), _params(4))
    core.abort(["a", "a"])
    assert core.num_inflight == 1 and core.engine.num_unfinished_requests == 1


# -- bad prompts --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("prompt", "core_kwargs"),
    [
        ([], {}),
        ([ByteTokenizer.vocab_size], {}),
        ([5, -1, 6], {}),
        (_prompt(64), {"max_model_len": 64}),  # no room left for one output token
        (_prompt(20), {"num_device_blocks": 4}),  # 5 blocks of 4 tokens; the device holds 4
    ],
    ids=["empty", "id-past-the-vocabulary", "negative-id", "too-long", "more-kv-than-the-device"],
)
def test_a_bad_prompt_raises_and_changes_nothing(prompt, core_kwargs):
    core, _ = _core(**core_kwargs)
    with pytest.raises(ValueError):
        core.add("a", prompt, _params(2))
    assert core.num_inflight == 0 and _pending_fields(core) == (0, 0)
    assert not core.has_work() and core.start_step() is None
    assert core.load_report().num_waiting == 0
    core.add("a", _prompt(3), _params(1))  # the id was not taken
    assert core.num_inflight == 1 and _pending_fields(core) == (3, 0)


def test_a_duplicate_id_raises_and_keeps_the_first_request():
    core, _ = _core()
    core.add("a", _prompt(5), _params(2))
    with pytest.raises(ValueError):
        core.add("a", _prompt(9), _params(2))
    assert core.num_inflight == 1 and _pending_fields(core) == (5, 0)
    (out,) = core.step()
    assert out.num_prompt_tokens == 5


# -- what leaves the node -----------------------------------------------------------------------------


def test_token_chunk_carries_the_step_delta_and_the_node():
    core, _ = _core(node_id="node-7")
    core.add("a", _prompt(5), _params(2))
    (first,) = core.step()
    chunk = core.token_chunk(first)
    assert (chunk.request_id, chunk.node_id, chunk.token_ids, chunk.text) == ("a", "node-7", [Z], "z")
    assert (chunk.finished, chunk.finish_reason) == (False, None)
    assert (chunk.num_prompt_tokens, chunk.num_output_tokens, chunk.logprobs) == (5, 1, None)
    (last,) = core.step()
    chunk = core.token_chunk(last)
    assert (chunk.token_ids, chunk.finished, chunk.finish_reason) == ([Z], True, "length")
    assert isinstance(chunk.finish_reason, str) and chunk.num_output_tokens == 2


def test_hello_carries_the_kv_geometry_context_and_a_power_score():
    core, _ = _core(node_id="node-1", block_size=8, num_device_blocks=48, num_host_blocks=16, max_model_len=96)
    hello = core.hello(model="fake-bytes", backend="fake", hardware=cpu_test_hardware(), cell="edge", pid=42)
    assert (hello.node_id, hello.model, hello.backend, hello.cell, hello.pid) == (
        "node-1",
        "fake-bytes",
        "fake",
        "edge",
        42,
    )
    assert (hello.kv.num_device_blocks, hello.kv.num_host_blocks, hello.kv.block_size) == (48, 16, 8)
    assert hello.kv.bytes_per_block == core.engine.runner.kv_bytes_per_block(8) == 64 * 8
    assert hello.max_model_len == 96
    assert hello.hardware == cpu_test_hardware()
    assert hello.power_score > 0
    assert hello.kv.prefix_hash_algo == "sha256"  # the default, said
    assert hello.speculative == ""  # it does not speculate: a predicted output is not drafted from here


def test_hello_says_the_node_speculates():
    from engine.spec.ngram_proposer import NgramProposer
    from engine.spec.spec_config import SpecDecodeConfig
    from engine.spec.speculator import Speculator

    core, _ = _core()
    core.engine.speculator = Speculator(NgramProposer(), SpecDecodeConfig(method="ngram"))
    assert core.hello(model="m", backend="fake", hardware=cpu_test_hardware(), cell="c").speculative == "ngram"


def test_hello_says_how_the_node_names_its_prefix_blocks():
    core, _ = _core(prefix_hash_algo="xxhash")
    hello = core.hello(model="m", backend="fake", hardware=cpu_test_hardware(), cell="c")
    assert hello.kv.prefix_hash_algo == "xxhash" == core.engine.scheduler.kv_cache_manager.hash_algo


# -- observations -------------------------------------------------------------------------------------


def test_observation_gives_exact_inter_token_gaps_including_the_last_token():
    core, clock = _core(observe=True)
    core.add("a", _prompt(5), _params(3))
    clock.advance(0.125)
    _, first = _observed_step(core)  # t = 0.125: the first token has no gap
    assert first.inter_token_s == [] and first.finished == []
    clock.advance(0.5)
    _, second = _observed_step(core)  # t = 0.625
    assert second.inter_token_s == [0.5] and second.finished == []
    clock.advance(0.25)
    outputs, last = _observed_step(core)  # t = 0.875: the finishing token's gap counts too
    assert [o.finished for o in outputs] == [True]
    assert core.num_inflight == 0  # bookkeeping closed before the observation was taken
    assert last.inter_token_s == [0.25]
    (finished,) = last.finished
    assert dataclasses.replace(finished, metrics=None) == FinishedRequest(
        queue_time_s=0.125,
        ttft_s=0.125,
        e2e_s=0.875,
        num_prompt_tokens=5,
        num_output_tokens=3,
        finish_reason="length",
        request_id="a",
    )
    m = finished.metrics  # the engine's stamps, for the node's span (observe/node_spans.py)
    assert (m.arrival_time_s, m.first_scheduled_time_s, m.first_token_time_s) == (0.0, 0.125, 0.125)
    assert (m.last_token_time_s, m.finished_time_s) == (0.875, 0.875)


def test_observation_has_one_finished_request_per_finish_and_a_gap_per_token():
    core, clock = _core(observe=True)
    core.add("a", _prompt(5), _params(2))
    core.add("b", _prompt(6), _params(2))
    core.add("c", _prompt(7), _params(1))
    _, first = _observed_step(core)  # "c" ends with its first token: no gap
    assert first.inter_token_s == []
    assert [(f.num_prompt_tokens, f.num_output_tokens) for f in first.finished] == [(7, 1)]
    clock.advance(1.0)
    _, second = _observed_step(core)
    assert second.inter_token_s == [1.0, 1.0]
    assert sorted((f.num_prompt_tokens, f.num_output_tokens, f.e2e_s) for f in second.finished) == [
        (5, 2, 1.0),
        (6, 2, 1.0),
    ]
    assert second.stats.num_running == 0 and second.swaps == []


def test_a_reused_id_starts_without_the_old_requests_token_time():
    core, clock = _core(observe=True)
    core.add("a", _prompt(5), _params(2))
    _observed_step(core)
    clock.advance(1.0)
    _, finished = _observed_step(core)
    assert [f.num_output_tokens for f in finished.finished] == [2]
    core.add("b", _prompt(4), _params(4))
    _, first_b = _observed_step(core)  # may also retire "a" in the runner
    core.abort(["b"])
    assert core.step() == []  # tells the runner; the scheduler keeps a finished id until its next step
    clock.advance(2.0)
    core.add("a", _prompt(5), _params(2))
    core.add("b", _prompt(5), _params(2))
    outputs, obs = _observed_step(core)
    assert sorted(o.req_id for o in outputs) == ["a", "b"]
    assert first_b.inter_token_s == [] and obs.inter_token_s == []  # first tokens: no gap from the old requests


def test_stats_observation_is_the_snapshot_alone():
    core, _ = _core(observe=True)
    core.add("a", _prompt(5), _params(2))
    core.step()
    obs = core.stats_observation()
    assert obs.stats == core.engine.make_stats() and obs.stats.num_running == 1
    assert (obs.inter_token_s, obs.finished, obs.swaps) == ([], [], [])


def test_profile_measures_the_node_before_it_serves_and_leaves_nothing_behind():
    from backends.sim.engine import build_sim_engine

    engine = build_sim_engine("sim:llama-3-8b", "l4", realtime=False, clock=ManualClock())
    core = NodeCore(engine, "n")
    prefill_tok_per_s, decode_step_ms = core.profile()
    assert prefill_tok_per_s > 0 and decode_step_ms > 0
    assert not core.has_work() and core.num_inflight == 0 and core.num_finished_total == 0
    assert core.engine.make_stats().num_prompt_tokens_total == 0  # the profile is no traffic
    hello = core.hello(model="m", backend="sim", hardware=cpu_test_hardware(), cell="c")
    assert (hello.prefill_tok_per_s, hello.decode_step_ms) == (prefill_tok_per_s, decode_step_ms)
    report = core.load_report()
    assert (report.prefill_tok_per_s, report.decode_step_ms) == (prefill_tok_per_s, decode_step_ms)
    assert report.recent_step_ms == [] and report.num_requests_received_total == 0
    core.add("a", list(range(10, 20)), SamplingParams(max_tokens=2))
    assert core.load_report().num_requests_received_total == 1
    with pytest.raises(RuntimeError, match="idle"):
        core.profile()


def test_a_decoder_with_a_tpot_target_is_reported_by_its_progress(monkeypatch):
    """From its first token on, a request added with a TPOT target is one of the decoders the load report counts by
    slack (engine/decode_slack.py): its first token's time and step count, its decode steps and target; the report
    passes the node's step count and clock now, its measured step and a chunk of its token budget. Without a target,
    or once it finished, it is not counted."""
    import agent.node_core as node_core

    seen = []

    def capture(decoders, now_s, num_steps, step_s, chunk_s):
        seen.append((list(decoders), now_s, num_steps, step_s, chunk_s))
        return (1,) + (0,) * 59

    monkeypatch.setattr(node_core, "slack_histogram", capture)
    core, clock = _core(token_budget=64)
    core.add("a", _prompt(8), _params(11), slo_tpot_s=0.1)
    core.add("b", _prompt(8), _params(11))  # no target
    assert core.load_report().decode_slack_hist == [] and not seen  # nothing decodes yet
    clock.advance(0.5)
    core.step()  # both prompts: their first tokens at 0.5 s, step 1
    clock.advance(0.5)
    core.step()
    report = core.load_report()
    decoders, now_s, num_steps, step_s, chunk_s = seen[-1]
    assert decoders == [(0.5, 1, 10, 0.1)] and (now_s, num_steps) == (1.0, 2)
    assert step_s == pytest.approx(report.decode_token_step_ms / 1e3) and step_s > 0
    assert chunk_s == pytest.approx(64 / report.prefill_tok_per_s)
    assert report.decode_slack_hist == [1] + [0] * 59
    for _ in range(9):
        core.step()
    seen.clear()
    assert core.load_report().decode_slack_hist == [] and not seen  # finished: none left


def test_a_requests_tpot_target_is_known_until_it_leaves():
    """What a hand-off carries to the decode node (sim/split.py): the target ``add`` was given, before and after the
    first token; 0 for a request without one, or one no longer here."""
    core, _ = _core()
    core.add("t", _prompt(4), _params(5), slo_tpot_s=0.05)
    core.add("plain", _prompt(4), _params(5))
    assert (core.tpot_target("t"), core.tpot_target("plain")) == (0.05, 0.0)
    core.step()  # both take their first token: "t" is a decoder now
    assert core.tpot_target("t") == 0.05
    core.abort(["t"])
    assert core.tpot_target("t") == 0.0 and core.tpot_target("never") == 0.0


def test_the_last_token_chunk_carries_the_requests_phases_on_this_node():
    core, clock = _core()
    core.add("a", _prompt(5), _params(2))
    clock.advance(0.25)  # queued this long
    (first,) = core.step()  # scheduled, and its first token, at 0.25
    assert core.token_chunk(first).timing is None  # not finished: no phases yet
    clock.advance(0.5)
    (last,) = core.step()
    timing = core.token_chunk(last).timing
    assert timing is not None
    assert (timing.queue_s, timing.prefill_s, timing.decode_s, timing.num_output_tokens) == (0.25, 0.0, 0.5, 2)
