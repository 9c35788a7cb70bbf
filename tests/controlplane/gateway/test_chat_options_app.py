"""vLLM's chat options on the gateway (gateway/openai_schema.py ``chat_options``, backends/chat_render.py):
``add_generation_prompt``, ``continue_final_message`` (a prefilled reply) and ``chat_template_kwargs`` reach the
frontend as the wire's ChatTemplateOptions, /tokenize renders them as a generation would, and bad ones are 400s
naming the field."""

from __future__ import annotations

import json

import pytest

from transport.chat_wire import ChatTemplateOptions

MODEL = "smol"
PREFILLED = [{"role": "user", "content": "Name a colour."}, {"role": "assistant", "content": "My favourite is"}]


@pytest.mark.anyio
async def test_a_plain_chat_sends_no_options(client, frontend):
    r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": PREFILLED[:1]})
    assert r.status_code == 200, r.text
    assert frontend.calls[0]["chat"] is None


@pytest.mark.anyio
async def test_continue_final_message_reaches_the_frontend(client, frontend):
    body = {"model": MODEL, "messages": PREFILLED, "continue_final_message": True, "add_generation_prompt": False}
    r = await client.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    assert frontend.calls[0]["chat"] == ChatTemplateOptions(add_generation_prompt=False, continue_final_message=True)


@pytest.mark.anyio
async def test_chat_template_kwargs_carry_variables_and_may_set_the_flags_as_in_vllm(client, frontend):
    kwargs = {"enable_thinking": False, "continue_final_message": True, "add_generation_prompt": False}
    body = {"model": MODEL, "messages": PREFILLED, "chat_template_kwargs": kwargs}
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    assert frontend.calls[0]["chat"] == ChatTemplateOptions(
        add_generation_prompt=False, continue_final_message=True, template_kwargs={"enable_thinking": False}
    )


@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"chat_template_kwargs": {"add_generation_prompt": "no"}}, "chat_template_kwargs"),
        ({"chat_template_kwargs": [1]}, "chat_template_kwargs"),
        ({"continue_final_message": "yes"}, "continue_final_message"),
        ({"chat_template": "{{ messages }}"}, "chat_template"),  # vLLM's default: a request's template untrusted
    ],
)
@pytest.mark.anyio
async def test_malformed_options_are_400s_naming_the_field(client, frontend, extra, param):
    r = await client.post("/v1/chat/completions", json={"model": MODEL, "messages": PREFILLED, **extra})
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == param
    assert not frontend.calls


@pytest.mark.anyio
async def test_tokenize_renders_the_options_as_the_intake_does(client):
    new_reply = (await client.post("/tokenize", json={"messages": PREFILLED[:1]})).json()
    cont = {"messages": PREFILLED, "continue_final_message": True, "add_generation_prompt": False}
    prefilled = (await client.post("/tokenize", json=cont)).json()
    # the byte tokenizer's template: the new reply's header, then the prefilled text, left open
    assert prefilled["tokens"] == new_reply["tokens"] + [b + 3 for b in b"My favourite is"]
    both = (await client.post("/tokenize", json={**cont, "add_generation_prompt": True})).json()
    assert both["error"]["param"] == "continue_final_message"
    reserved = (await client.post("/tokenize", json={**cont, "chat_template_kwargs": {"tools": []}})).json()
    assert reserved["error"]["param"] == "chat_template_kwargs"


@pytest.mark.anyio
async def test_echo_starts_the_reply_with_the_prefilled_message_as_vllm_does(client):
    body = {"model": MODEL, "messages": PREFILLED, "continue_final_message": True, "add_generation_prompt": False}
    plain = (await client.post("/v1/chat/completions", json=body)).json()["choices"][0]["message"]["content"]
    echoed = (await client.post("/v1/chat/completions", json={**body, "echo": True})).json()
    assert echoed["choices"][0]["message"]["content"] == "My favourite is" + plain
    streamed = await client.post("/v1/chat/completions", json={**body, "echo": True, "stream": True})
    events = [json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")]
    deltas = [e["choices"][0]["delta"] for e in events if e["choices"]]
    assert deltas[0] == {"role": "assistant", "content": ""} and deltas[1] == {"content": "My favourite is"}
    assert "".join(d.get("content", "") for d in deltas) == "My favourite is" + plain
    user_last = {"model": MODEL, "messages": PREFILLED[:1], "echo": True}  # vLLM: only the assistant's is echoed
    reply = (await client.post("/v1/chat/completions", json=user_last)).json()
    assert reply["choices"][0]["message"]["content"] == plain
