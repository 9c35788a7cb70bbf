"""The Responses API's other request fields (gateway/openai_responses.py), with the official ``openai`` package against
the gateway on loopback: vLLM's sampling extensions reach the engine request, ``structured_outputs``, a partial
assistant message continued, ``reasoning.effort`` to the chat template, ``truncation: auto`` fitting the prompt to the
context, and each bad value a 400 naming its field."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import openai
import pytest

from transport.chat_wire import ChatMessage, ChatTemplateOptions

MODEL = "smol"


@pytest.fixture
def client(served: str) -> Iterator[openai.OpenAI]:
    with openai.OpenAI(base_url=f"{served}/v1", api_key="x", max_retries=0, timeout=30) as c:
        yield c


def test_vllms_sampling_extensions_reach_the_engine(client, frontend):
    extra = {"stop": ["\n\n"], "seed": 7, "presence_penalty": 0.5, "frequency_penalty": 0.25,
             "repetition_penalty": 1.1, "logit_bias": {"5": 2.0}, "ignore_eos": True, "skip_special_tokens": False,
             "include_stop_str_in_output": True}  # fmt: skip
    client.responses.create(model=MODEL, input="Hi?", extra_body=extra)
    s = frontend.calls[-1]["sampling"]
    assert (s.stop, s.seed, s.presence_penalty, s.frequency_penalty) == (("\n\n",), 7, 0.5, 0.25)
    assert (s.repetition_penalty, s.logit_bias, s.ignore_eos) == (1.1, ((5, 2.0),), True)
    assert (s.skip_special_tokens, s.include_stop_str_in_output, s.truncate_prompt_tokens) == (False, True, None)
    client.responses.create(model=MODEL, input="Hi?")
    s = frontend.calls[-1]["sampling"]  # the defaults
    assert (s.stop, s.seed, s.ignore_eos, s.repetition_penalty, s.skip_special_tokens) == ((), None, False, 1.0, True)
    assert frontend.calls[-1]["chat"] is None


def test_structured_outputs_and_its_clash_with_text_format(client, frontend, served):
    client.responses.create(
        model=MODEL, input="Yes or no?", extra_body={"structured_outputs": {"choice": ["yes", "no"]}}
    )
    assert frontend.calls[-1]["sampling"].structured_outputs.choice == ("yes", "no")
    body = {
        "model": MODEL,
        "input": "x",
        "structured_outputs": {"regex": "a+"},
        "text": {"format": {"type": "json_object"}},
    }
    r = httpx.post(f"{served}/v1/responses", json=body)
    assert r.status_code == 400 and r.json()["error"]["param"] == "structured_outputs"


def test_a_partial_assistant_message_is_continued_and_the_effort_reaches_the_template(client, frontend):
    partial = {"type": "message", "role": "assistant", "status": "incomplete",
               "content": [{"type": "output_text", "text": "The capital is"}]}  # fmt: skip
    reply = client.responses.create(
        model=MODEL, input=[{"role": "user", "content": "Capital of France?"}, partial], reasoning={"effort": "low"}
    )
    call = frontend.calls[-1]
    assert call["messages"][-1] == ChatMessage("assistant", "The capital is")
    assert call["chat"] == ChatTemplateOptions(
        add_generation_prompt=False,
        continue_final_message=True,
        template_kwargs={"reasoning_effort": "low", "enable_thinking": True},
    )
    assert reply.reasoning.effort == "low"
    done = {**partial, "status": "completed"}  # a finished assistant message is history: a new one is answered
    client.responses.create(
        model=MODEL, input=[{"role": "user", "content": "?"}, done, {"role": "user", "content": "!"}]
    )
    assert frontend.calls[-1]["chat"] is None
    client.responses.create(
        model=MODEL, input="?", reasoning={"effort": "none"}, extra_body={"chat_template_kwargs": {"x": 1}}
    )
    assert frontend.calls[-1]["chat"].template_kwargs == {"x": 1, "reasoning_effort": "none", "enable_thinking": False}


def test_truncation_auto_fits_the_prompt_to_the_context(client, frontend):
    frontend.model_max_len = lambda model: 100  # the longest context a node serving it takes
    reply = client.responses.create(model=MODEL, input="Hi?", max_output_tokens=30, truncation="auto")
    assert frontend.calls[-1]["sampling"].truncate_prompt_tokens == 70 and reply.truncation == "auto"
    client.responses.create(model=MODEL, input="Hi?", max_output_tokens=30)
    assert frontend.calls[-1]["sampling"].truncate_prompt_tokens is None  # "disabled", the default
    frontend.model_max_len = lambda model: None  # no node yet: the whole prompt, the intake judges it
    client.responses.create(model=MODEL, input="Hi?", max_output_tokens=30, truncation="auto")
    assert frontend.calls[-1]["sampling"].truncate_prompt_tokens is None


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"truncation": "sometimes"}, "truncation"),
        ({"max_tool_calls": 0}, "max_tool_calls"),
        ({"stop": 5}, "stop"),
        ({"logit_bias": {"x": 1.0}}, "logit_bias"),
        ({"repetition_penalty": -1}, "repetition_penalty"),
        ({"presence_penalty": 3}, "presence_penalty"),
        ({"structured_outputs": {"choice": []}}, "structured_outputs"),
        ({"chat_template_kwargs": {"add_generation_prompt": "no"}}, "chat_template_kwargs"),
        ({"reasoning": {"effort": 3}}, "reasoning.effort"),
    ],
)
def test_bad_values_are_400s_naming_the_field(served, frontend, extra, param):
    r = httpx.post(f"{served}/v1/responses", json={"model": MODEL, "input": "Hi?", **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert not frontend.calls


def test_openais_cache_hints_are_echoed_and_checked(client, served):
    response = client.responses.create(
        model=MODEL, input="Hi?", prompt_cache_key="tenant-7:docs", safety_identifier="user-9f2",
        prompt_cache_retention="24h",
    )  # fmt: skip
    assert (response.prompt_cache_key, response.safety_identifier) == ("tenant-7:docs", "user-9f2")
    assert response.prompt_cache_retention == "24h"
    chat = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi?"}], prompt_cache_key="k", safety_identifier="u"
    )
    assert chat.choices[0].message.content
    for path, base in (("/v1/responses", {"input": "Hi?"}), ("/v1/chat/completions", {"messages": [{"role": "user",
                       "content": "Hi?"}]})):  # fmt: skip
        for field, value in (("prompt_cache_retention", "forever"), ("safety_identifier", "x" * 65),
                             ("prompt_cache_key", "k" * 65)):  # fmt: skip
            reply = httpx.post(f"{served}{path}", json={**base, field: value}, timeout=30)
            assert reply.status_code == 400 and reply.json()["error"]["param"] == field, reply.text
