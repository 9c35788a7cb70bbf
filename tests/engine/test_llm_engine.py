"""LLMEngine with a scripted fake runner and a byte tokenizer: streaming, stop strings, EOS, aborts,
bad prompts, metrics on a manual clock."""

from __future__ import annotations

import pytest

from engine.batch import RunnerOutput, SchedulerOutput
from engine.clock import ManualClock
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.model_runner import KVCacheSpec, ModelRunner
from engine.prompt import PromptError, check_token_ids
from engine.request import FinishReason
from engine.sampling_params import SamplingParams

EOS = 0


class ByteTokenizer:
    """Token id = byte value; id 0 is EOS (a special token, dropped when decoding)."""

    eos_token_id = EOS
    vocab_size = 256

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode())

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return bytes(i for i in ids if i != EOS or not skip_special_tokens).decode("utf-8", errors="replace")

    def apply_chat_template(self, messages, add_generation_prompt: bool = True) -> str:
        return "".join(f"<{m['role']}>{m['content']}" for m in messages) + (
            "<assistant>" if add_generation_prompt else ""
        )


class ScriptedRunner:
    """Each request samples the bytes of ``script`` in order (then repeats its last byte); one step
    advances the clock by ``step_s``."""

    def __init__(self, script: bytes, clock: ManualClock, step_s: float = 0.01) -> None:
        self.script, self.clock, self.step_s = script, clock, step_s
        self.spec: KVCacheSpec | None = None
        self.sampled: dict[str, int] = {}
        self.finished_req_ids: list[str] = []

    @property
    def max_model_len(self) -> int:
        return 4096

    def kv_bytes_per_block(self, block_size: int) -> int:
        return block_size

    def initialize_kv_cache(self, spec: KVCacheSpec) -> None:
        self.spec = spec

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        self.clock.advance(self.step_s)
        self.finished_req_ids += batch.finished_req_ids
        out = {}
        for r in batch.requests:
            if r.sample:
                i = self.sampled.get(r.req_id, 0)
                out[r.req_id] = [self.script[min(i, len(self.script) - 1)]]
                self.sampled[r.req_id] = i + 1
        return RunnerOutput(sampled_token_ids=out, step_time_s=self.step_s)


def _engine(script: bytes, **sched) -> tuple[LLMEngine, ScriptedRunner, ManualClock]:
    clock = ManualClock()
    runner = ScriptedRunner(script, clock)
    engine = LLMEngine(
        runner,
        ByteTokenizer(),
        SchedulerConfig(max_num_batched_tokens=64, max_num_seqs=8, max_model_len=256, **sched),
        CacheConfig(block_size=4, num_device_blocks=64, num_host_blocks=16),
        clock=clock,
    )
    return engine, runner, clock


def test_runner_fake_satisfies_the_protocol():
    assert isinstance(ScriptedRunner(b"x", ManualClock()), ModelRunner)


def test_stream_deltas_concatenate_to_the_text_and_eos_is_not_text():
    engine, _, _ = _engine(b"Bonjour!\x00")
    rid = engine.add_request("hi", SamplingParams(temperature=0, max_tokens=50))
    deltas, final = [], None
    while engine.has_unfinished_requests():
        for out in engine.step():
            assert out.req_id == rid
            deltas.append(out.new_text)
            final = out
    assert "".join(deltas) == "Bonjour!" == final.text
    assert final.finish_reason is FinishReason.STOP and final.stop_reason == EOS
    assert final.num_output_tokens == 9  # the EOS token counts as generated
    assert final.num_prompt_tokens == 2


def test_stop_string_finishes_the_request_and_frees_its_blocks():
    engine, runner, _ = _engine(b"one, two, three, four")
    (out,) = engine.generate(["count"], SamplingParams(temperature=0, max_tokens=50, stop=[", th"]))
    assert out.text == "one, two"
    assert out.finish_reason is FinishReason.STOP and out.stop_reason == ", th"
    assert not engine.has_unfinished_requests()
    assert engine.make_stats().kv_usage == 0.0
    engine.step()  # the next step tells the runner to drop the request's state
    assert out.req_id in runner.finished_req_ids


def test_max_tokens_finishes_with_length():
    engine, _, _ = _engine(b"abcdefgh")
    (out,) = engine.generate(["x"], SamplingParams(temperature=0, max_tokens=3))
    assert out.text == "abc"
    assert out.finish_reason is FinishReason.LENGTH


def test_abort_drops_the_request():
    engine, _, _ = _engine(b"abcdefgh")
    keep = engine.add_request("keep", SamplingParams(temperature=0, max_tokens=4))
    gone = engine.add_request("gone", SamplingParams(temperature=0, max_tokens=4))
    engine.step()
    engine.abort([gone])
    final = engine.run_until_done()
    assert set(final) == {keep}
    assert final[keep].text == "abcd"


@pytest.mark.parametrize(
    ("prompt", "match"),
    [("", "empty"), ([5, 300], "out of range"), ([-1], "out of range"), ("x" * 300, "context holds 256")],
)
def test_bad_prompt_is_rejected_and_nothing_is_queued(prompt, match):
    engine, _, _ = _engine(b"ok")
    with pytest.raises(PromptError, match=match):
        engine.add_request(prompt, SamplingParams())
    assert not engine.has_unfinished_requests()
    engine.add_request("fine", SamplingParams(temperature=0, max_tokens=2))
    assert engine.run_until_done()


def test_duplicate_request_id_is_rejected():
    engine, _, _ = _engine(b"ok")
    engine.add_request("a", SamplingParams(), req_id="r1")
    with pytest.raises(ValueError, match="r1"):
        engine.add_request("b", SamplingParams(), req_id="r1")


def test_metrics_on_the_manual_clock():
    engine, _, clock = _engine(b"abcd")
    clock.advance(1.0)
    (out,) = engine.generate(["hey"], SamplingParams(temperature=0, max_tokens=4))
    m = out.metrics
    assert m.arrival_time_s == 1.0
    assert m.ttft_s == pytest.approx(0.01)  # one step: the whole prompt, then the first token
    assert m.tpot_s == pytest.approx(0.01)
    assert m.e2e_s == pytest.approx(0.04)
    assert m.queue_time_s == pytest.approx(0.0)
    assert engine.busy_time_s == pytest.approx(0.04)


def test_chat_prompt_uses_the_template():
    engine, _, _ = _engine(b"!")
    ids = engine.encode_chat([{"role": "user", "content": "yo"}])
    assert bytes(ids) == b"<user>yo<assistant>"


def test_step_records_split_prefill_and_decode_work():
    engine, _, _ = _engine(b"abcdef")
    engine.generate(["hello"], SamplingParams(temperature=0, max_tokens=3))
    records = engine.take_step_records()
    assert [(r.num_prefill_tokens, r.num_decode_requests) for r in records] == [(5, 0), (0, 1), (0, 1)]
    assert all(r.step_time_s == pytest.approx(0.01) for r in records)
    assert engine.take_step_records() == []


class _Tuple(tuple):
    """A tuple subclass that, iterated, yields other items than the tuple holds (what a check reads)."""

    def __iter__(self):
        return iter([10**9] * len(self))


def test_prompt_ids_are_checked_by_the_engine_after_an_earlier_check():
    """The control plane's intake checks a prompt, then the node's engine checks it again (the same object in the
    fleet simulator): a list changed in between, another tuple, or a tuple subclass's other items, is refused."""
    engine, _, _ = _engine(b"ok")
    vocab_size = engine.tokenizer.vocab_size
    listed = [5, 6, 7]
    check_token_ids(listed, vocab_size)
    listed[1] = vocab_size
    with pytest.raises(PromptError, match="out of range"):
        engine.add_request(listed, SamplingParams())
    checked = (5, 6, 7)
    check_token_ids(checked, vocab_size)
    with pytest.raises(PromptError, match="out of range"):
        engine.add_request((5, vocab_size, 7), SamplingParams())
    sub = _Tuple((5, 6, 7))
    check_token_ids(sub, vocab_size)  # its items pass ...
    with pytest.raises(PromptError, match="out of range"):
        engine.add_request(sub, SamplingParams())  # ... but the engine queues what it yields: checked again
    assert not engine.has_unfinished_requests()
    engine.add_request(checked, SamplingParams(temperature=0, max_tokens=2))  # the checked tuple itself: queued
    assert engine.run_until_done()


def test_include_stop_str_in_output_reaches_the_detokenizer():
    """The trivial engine writes "z" after "z"."""
    from backends.fake import build_trivial_engine

    engine = build_trivial_engine()
    texts = {}
    for include in (False, True):
        engine.add_request([104, 105], SamplingParams(max_tokens=8, stop=("zz",), include_stop_str_in_output=include))
        (out,) = engine.run_until_done().values()
        texts[include] = (out.text, out.finish_reason)
    assert texts[False][0] == "" and texts[True][0] == "zz"
    assert texts[False][1] == texts[True][1] == FinishReason.STOP
