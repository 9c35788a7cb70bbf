"""What the engine hands a sampler for logits processing: the request's own token list where a penalty reads it,
the stop tokens while min_tokens is not reached; no drafts for such requests; stop strings after min_tokens."""

from __future__ import annotations

from backends.fake.byte_tokenizer import ByteTokenizer
from engine.detokenizer import IncrementalDetokenizer
from engine.spec import SpecDecodeConfig, Speculator
from tests.engine.spec.test_speculator import RandomProposer, _drive


def test_the_scheduler_hands_the_history_and_the_ban(make_scheduler, make_request, constant_runner_cls):
    scheduler = make_scheduler()
    runner = constant_runner_cls(7)
    penalised = make_request("p", [1, 2, 3], max_tokens=4, frequency_penalty=0.5, min_tokens=2, eos_token_id=9)
    plain = make_request("q", [4, 5], max_tokens=4)
    biased = make_request("b", [4, 5], max_tokens=4, logit_bias={3: 1.0}, ignore_eos=True, min_tokens=1)
    for r in (penalised, plain, biased):
        scheduler.add_request(r)
    seen = []
    while scheduler.has_unfinished_requests():
        out = scheduler.schedule()
        seen.append({r.req_id: r.logits_inputs for r in out.requests})
        scheduler.update_from_output(out, runner.execute(out))
    first, second, third = seen[:3]
    assert first["q"] is None  # nothing to process: no inputs at all
    assert first["p"].history is penalised.all_token_ids  # the request's own list, never copied
    assert first["p"].banned_token_ids == (9,)  # EOS, none out yet
    assert second["p"].banned_token_ids == (9,)  # one out of min_tokens 2
    assert third["p"].banned_token_ids == ()
    assert first["b"].history is None and first["b"].banned_token_ids == ()  # a bias reads no history; ignore_eos


def test_no_drafts_for_requests_that_process_their_logits(make_scheduler, make_request, kv_runner_cls):
    scheduler = make_scheduler(block_size=4, max_num_batched_tokens=256, max_num_seqs=16)
    runner = kv_runner_cls.for_scheduler(scheduler)
    proposer = RandomProposer(97, 0)
    speculator = Speculator(proposer, SpecDecodeConfig(num_spec_tokens=3, adaptive=False))
    scheduler.add_request(make_request("plain", 5, max_tokens=6))
    scheduler.add_request(make_request("penalised", 5, max_tokens=6, presence_penalty=1.0))
    scheduler.add_request(make_request("min_p", 5, max_tokens=6, min_p=0.1))
    _drive(scheduler, runner, speculator)
    assert proposer.calls and all(ids == ["plain"] for ids in proposer.calls)


def test_stop_strings_count_only_after_min_tokens():
    tokenizer = ByteTokenizer()
    ids = tokenizer.encode("ab!cd!ef")
    eager = IncrementalDetokenizer(tokenizer, ["!"])
    eager.add_tokens(ids)
    assert (eager.text, eager.stop_string) == ("ab", "!")
    patient = IncrementalDetokenizer(tokenizer, ["!"], min_tokens=4)  # the first "!" is the 3rd token
    patient.add_tokens(ids)
    assert (patient.text, patient.stop_string) == ("ab!cd", "!")
