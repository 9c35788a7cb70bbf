"""vLLM's beam search (``use_beam_search``; gateway/beam_search.py, beam_search_route.py): its rule on a toy model
whose greedy path is not its best, the steps it sends the fleet, the reply's shape for chats and completions, and
the fields it refuses."""

from __future__ import annotations

import json
import math

import httpx
import pytest

from backends.fake import ByteTokenizer
from controlplane.gateway import create_app
from controlplane.gateway.beam_search import Beam, BeamSearch, BeamSpec, beam_score
from transport.messages import TokenChunk

EOS = ByteTokenizer.eos_token_id
A, B, C = (ByteTokenizer().encode(ch)[0] for ch in "abc")
# the toy model: the next token's probabilities after the last one (anything else: START). Greedy takes "a" (0.5)
# and then finds only 0.3s; the beam through "b" (0.4) then "c" (0.9) is better.
START = {A: 0.5, B: 0.4, EOS: 0.1}
NEXT = {A: {A: 0.3, B: 0.3, C: 0.3, EOS: 0.1}, B: {C: 0.9, EOS: 0.1}, C: {EOS: 0.9, A: 0.1}}


def _logprobs(last: int) -> dict[int, float]:
    return {t: math.log(p) for t, p in NEXT.get(last, START).items()}


class ToyFrontend:
    """A frontend whose every request is answered by the toy model: one token (the likeliest) with its ``logprobs``
    alternatives, and the prompt's tokens when asked."""

    def __init__(self) -> None:
        self.tokenizer = ByteTokenizer()
        self.model_names = ["toy"]
        self.calls: list[dict] = []

    def generate(self, request_id, *, model, sampling, prompt=None, messages=None, prompt_token_ids=None,
                 return_prompt_token_ids=False, **more):  # fmt: skip
        if messages is not None:
            prompt_token_ids = self.tokenizer.encode(self.tokenizer.apply_chat_template(
                [{"role": m.role, "content": m.content} for m in messages]))  # fmt: skip
        elif prompt is not None:
            prompt_token_ids = self.tokenizer.encode(prompt)
        self.calls.append({"request_id": request_id, "prompt_token_ids": prompt_token_ids, "sampling": sampling})
        return self._stream(request_id, list(prompt_token_ids), sampling, return_prompt_token_ids)

    async def _stream(self, request_id, tokens, sampling, return_prompt_token_ids):
        options = sorted(_logprobs(tokens[-1]).items(), key=lambda kv: -kv[1])
        top = options[: sampling.logprobs]
        yield TokenChunk(
            request_id=request_id, token_ids=[top[0][0]], text="", finished=True, finish_reason="length",
            num_prompt_tokens=len(tokens), num_output_tokens=1, logprobs=[(top[0][0], top[0][1], top)],
            prompt_token_ids=tokens if return_prompt_token_ids else None,
        )  # fmt: skip

    def health(self) -> dict:
        return {"status": "ok", "nodes": 1}


def test_the_search_finds_the_beam_greedy_misses_and_ranks_by_vllms_score():
    search = BeamSearch([7], BeamSpec(2), max_tokens=3, eos_token_id=EOS)
    while not search.done:
        search.advance([_logprobs(beam.tokens[-1]) for beam in search.live])
    best = search.best()
    assert search.output_tokens(best[0]) == [B, C] and best[0].finish_reason == "stop"
    assert math.isclose(best[0].cum_logprob, math.log(0.4 * 0.9 * 0.9))
    scores = [beam_score(b, EOS, 1.0) for b in best]
    assert scores == sorted(scores, reverse=True) and len(best) == 2
    # the length penalty: the same log-probability over a longer beam ranks higher with a larger penalty
    short, long = Beam([7, A], -2.0), Beam([7, A, A, A], -2.0)
    assert beam_score(long, EOS, 1.0) > beam_score(short, EOS, 1.0)
    assert beam_score(Beam([7, A, EOS], -2.0, "stop"), EOS, 1.0) == beam_score(short, EOS, 1.0)  # end not counted


def test_ignore_eos_keeps_beams_going_and_include_stop_str_keeps_the_end_token():
    search = BeamSearch([7], BeamSpec(1), max_tokens=3, eos_token_id=EOS, ignore_eos=True)
    while not search.done:
        search.advance([_logprobs(beam.tokens[-1]) for beam in search.live])
    (best,) = search.best()
    assert len(search.output_tokens(best)) == 3 and best.finish_reason == "length"
    search = BeamSearch([7], BeamSpec(2), max_tokens=4, eos_token_id=EOS, include_stop_str_in_output=True)
    while not search.done:
        search.advance([_logprobs(beam.tokens[-1]) for beam in search.live])
    best = search.best()[0]
    assert best.tokens[-1] == EOS and search.output_tokens(best) == [B, C]  # the text leaves it out


async def _post(frontend, path: str, body: dict) -> httpx.Response:
    transport = httpx.ASGITransport(app=create_app(frontend))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        return await c.post(path, json=body)


@pytest.mark.anyio
async def test_a_completion_and_a_chat_answer_the_n_best_beams():
    frontend = ToyFrontend()
    body = {"model": "toy", "prompt": "x", "max_tokens": 3, "n": 2, "use_beam_search": True, "temperature": 0}
    reply = (await _post(frontend, "/v1/completions", body)).json()
    assert [c["text"] for c in reply["choices"]] == ["bc", reply["choices"][1]["text"]]
    assert [c["index"] for c in reply["choices"]] == [0, 1] and reply["choices"][0]["finish_reason"] == "stop"
    x = ByteTokenizer().encode("x")
    assert reply["usage"]["prompt_tokens"] == len(x)
    assert reply["usage"]["completion_tokens"] == sum(len(c["text"]) for c in reply["choices"])  # one byte a token
    # the steps: the prompt once, then one one-token request per live beam, each with 2 n log-probabilities
    assert all(call["sampling"].max_tokens == 1 and call["sampling"].logprobs == 4 for call in frontend.calls)
    assert frontend.calls[0]["prompt_token_ids"] == x and len(frontend.calls) == 1 + 2 + 2
    assert frontend.calls[1]["prompt_token_ids"][:1] == x
    chat = {"model": "toy", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "n": 2,
            "use_beam_search": True, "length_penalty": 0.5}  # fmt: skip
    reply = (await _post(ToyFrontend(), "/v1/chat/completions", chat)).json()
    best, second = reply["choices"]
    assert best["message"] == {"role": "assistant", "content": "bc"} and reply["object"] == "chat.completion"
    assert second["message"]["content"] != "bc"


@pytest.mark.anyio
@pytest.mark.parametrize(
    "extra, param",
    [
        ({"stream": True}, "stream"),
        ({"n": 11}, "n"),
        ({"logprobs": 2}, "logprobs"),
        ({"stop": ["x"]}, "stop"),
        ({"logit_bias": {"5": 1}}, "logit_bias"),
        ({"prompt": ["x", "y"]}, "prompt"),
        ({"echo": True}, "echo"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"use_beam_search": False, "length_penalty": 2.0}, "length_penalty"),
        ({"length_penalty": "INF"}, "length_penalty"),
        ({"length_penalty": -11}, "length_penalty"),
        ({"max_tokens": 1025}, "max_tokens"),  # length ** -1e308 would be 0: a division by zero
    ],
)
async def test_what_a_beam_search_does_not_apply_is_refused_by_name(extra, param):
    frontend = ToyFrontend()
    body = {"model": "toy", "prompt": "x", "max_tokens": 2, "use_beam_search": True, **extra}
    transport = httpx.ASGITransport(app=create_app(frontend))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        text = json.dumps(body).replace('"INF"', "1e400")  # a number JSON cannot hold as a finite float
        response = await c.post("/v1/completions", content=text, headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param and not frontend.calls


@pytest.mark.anyio
async def test_a_beam_stops_at_the_contexts_end():
    frontend = ToyFrontend()
    frontend.model_max_len = lambda model: 3  # the prompt's 1 token and 2 more
    body = {"model": "toy", "prompt": "x", "max_tokens": 5, "n": 2, "use_beam_search": True, "ignore_eos": True}
    reply = (await _post(frontend, "/v1/completions", body)).json()
    assert [len(c["text"]) for c in reply["choices"]] == [2, 2]
    assert {c["finish_reason"] for c in reply["choices"]} == {"length"}
