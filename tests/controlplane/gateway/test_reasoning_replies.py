"""A reasoning model's replies through the gateway (``GatewayConfig.reasoning_parser``, gateway/reasoning_parsers.py):
chat completions carry the thinking as ``reasoning`` (and ``reasoning_content``), whole and streamed alike, tool calls
read from the answer alone; the Responses API answers a reasoning item before the message. Read with the openai SDK
over real HTTP."""

from __future__ import annotations

import json

import openai
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig

THOUGHT = ["<think>", "Two", " and two", " make four.", "</th", "ink>", "\n\n", "4"]
MODEL = "smol"


def _app(frontend, parser: str | None = "deepseek_r1"):
    return create_app(frontend, config=GatewayConfig(reasoning_parser=parser))


def _sdk(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0)


def test_a_chat_reply_carries_the_reasoning_apart_from_the_content(make_frontend, script, serve):
    frontend = make_frontend(chunks=script(*THOUGHT))
    with serve(_app(frontend)) as url:
        sdk = _sdk(url)
        whole = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "2+2?"}])
        message = whole.choices[0].message
        assert message.content == "\n\n4"
        assert message.model_extra["reasoning"] == "Two and two make four."
        assert message.model_extra["reasoning_content"] == message.model_extra["reasoning"]  # vLLM's earlier name
        assert whole.usage.completion_tokens == len(THOUGHT)
        # the tokens while still thinking: <think>, the three thoughts, and "</th" (the end is known at "ink>")
        assert whole.usage.completion_tokens_details.reasoning_tokens == 5
        usage = {"include_usage": True}
        question = [{"role": "user", "content": "2+2?"}]
        stream = sdk.chat.completions.create(model=MODEL, messages=question, stream=True, stream_options=usage)
        reasoning, content, reasoning_tokens = "", "", []
        for chunk in stream:
            if chunk.usage is not None:
                reasoning_tokens.append(chunk.usage.completion_tokens_details.reasoning_tokens)
            for choice in chunk.choices:
                delta = choice.delta
                reasoning += (delta.model_extra or {}).get("reasoning") or ""
                content += delta.content or ""
                assert "</" not in (delta.content or "") and "think>" not in (delta.content or "")
        assert (reasoning, content) == ("Two and two make four.", "\n\n4")  # as the whole reply
        assert reasoning_tokens == [5]  # in the final usage chunk


def test_without_a_parser_or_with_include_reasoning_false(make_frontend, script, serve):
    frontend = make_frontend(chunks=script(*THOUGHT))
    with serve(_app(frontend, parser=None)) as url:
        message = _sdk(url).chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
        assert message.choices[0].message.content == "".join(THOUGHT)  # not split: the text as the model wrote it
        assert "reasoning" not in (message.choices[0].message.model_extra or {})
    with serve(_app(frontend)) as url:
        sdk = _sdk(url)
        body = {"include_reasoning": False}
        message = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], extra_body=body)
        assert message.choices[0].message.content == "\n\n4"  # the answer alone, the thinking dropped
        assert "reasoning" not in (message.choices[0].message.model_extra or {})
        stream = sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], stream=True, extra_body=body
        )
        deltas = [c.choices[0].delta for c in stream if c.choices]
        assert "".join(d.content or "" for d in deltas) == "\n\n4"
        assert not any((d.model_extra or {}).get("reasoning") for d in deltas)


def test_qwen3_with_thinking_off_is_all_content_and_a_reply_cut_short_is_all_reasoning(make_frontend, script, serve):
    frontend = make_frontend(chunks=script("4", " apples"))
    with serve(_app(frontend, parser="qwen3")) as url:
        sdk = _sdk(url)
        off = {"chat_template_kwargs": {"enable_thinking": False}}
        message = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], extra_body=off)
        assert message.choices[0].message.content == "4 apples"
        assert "reasoning" not in (message.choices[0].message.model_extra or {})
        message = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
        assert message.choices[0].message.content is None  # thinking on, no </think>: cut short while thinking
        assert message.choices[0].message.model_extra["reasoning"] == "4 apples"


def test_tool_calls_are_read_from_the_answer_never_from_the_reasoning(make_frontend, script, serve):
    call = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
    thinking = ["<think>", "I could write ", call, " but first", "</think>"]
    frontend = make_frontend(chunks=script(*thinking, call))
    tools = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
    with serve(_app(frontend)) as url:
        sdk = _sdk(url)
        reply = sdk.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}], tools=tools)
        message = reply.choices[0].message
        assert [c.function.name for c in message.tool_calls] == ["get_weather"]  # the answer's one call
        assert json.loads(message.tool_calls[0].function.arguments) == {"city": "Paris"}
        assert message.model_extra["reasoning"] == "I could write " + call + " but first"
        assert reply.choices[0].finish_reason == "tool_calls"
        stream = sdk.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "x"}], tools=tools, stream=True
        )
        names = [
            c.function.name
            for chunk in stream
            for choice in chunk.choices
            for c in choice.delta.tool_calls or ()
            if c.function and c.function.name
        ]
        assert names == ["get_weather"]


def test_the_responses_api_answers_a_reasoning_item_before_the_message(make_frontend, script, serve):
    frontend = make_frontend(chunks=script(*THOUGHT))
    with serve(_app(frontend)) as url:
        sdk = _sdk(url)
        response = sdk.responses.create(model=MODEL, input="2+2?")
        kinds = [item.type for item in response.output]
        assert kinds == ["reasoning", "message"]
        assert response.output[0].content[0].text == "Two and two make four."
        assert response.output_text == "\n\n4"
        # the tokens while still thinking: <think>, the three thoughts, and "</th" (the end is known at "ink>")
        assert response.usage.output_tokens_details.reasoning_tokens == 5
        events = list(sdk.responses.create(model=MODEL, input="2+2?", stream=True))
        deltas = "".join(e.delta for e in events if e.type == "response.reasoning_text.delta")
        done = [e.text for e in events if e.type == "response.reasoning_text.done"]
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
        assert (deltas, done, text) == ("Two and two make four.", ["Two and two make four."], "\n\n4")
        final = next(e.response for e in events if e.type == "response.completed")
        assert [item.type for item in final.output] == ["reasoning", "message"]
        follow = sdk.responses.create(model=MODEL, input="and 3+3?", previous_response_id=response.id)
        history = frontend.calls[-1]["messages"]
        assert history[-2].role == "assistant" and history[-2].content == "\n\n4"  # the answer, not the thinking
        assert follow.status == "completed"


def test_zoo_controlplane_sets_the_reasoning_parser_and_refuses_one_it_does_not_have():
    from zoo.cli import build_parser
    from zoo.serve import gateway_config_from_args

    def config(*flags: str) -> GatewayConfig:
        return gateway_config_from_args(build_parser().parse_args(["controlplane", "--fake-tokenizer", *flags]))

    assert config().reasoning_parser is None
    assert config("--reasoning-parser", "qwen3").reasoning_parser == "qwen3"
    with pytest.raises(SystemExit):
        config("--reasoning-parser", "granite")  # argparse's choices
    with pytest.raises(ValueError, match="reasoning_parser"):
        GatewayConfig(reasoning_parser="granite")


def test_anthropics_messages_api_answers_a_thinking_block_first_and_takes_one_back(make_frontend, script, serve):
    import anthropic

    frontend = make_frontend(chunks=script(*THOUGHT))
    with serve(_app(frontend)) as url, anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as sdk:
        question = [{"role": "user", "content": "2+2?"}]
        message = sdk.messages.create(model=MODEL, max_tokens=16, messages=question)
        assert [b.type for b in message.content] == ["thinking", "text"]
        assert message.content[0].thinking == "Two and two make four." and message.content[0].signature == ""
        assert message.content[1].text == "\n\n4"
        with sdk.messages.stream(model=MODEL, max_tokens=16, messages=question) as stream:
            events = list(stream)
            final = stream.get_final_message()
        thinking = "".join(e.delta.thinking for e in events if e.type == "content_block_delta"
                           and e.delta.type == "thinking_delta")  # fmt: skip
        assert thinking == "Two and two make four."
        assert [b.type for b in final.content] == ["thinking", "text"] and final.content[1].text == "\n\n4"
        again = [*question, {"role": "assistant", "content": [b.model_dump() for b in message.content]},
                 {"role": "user", "content": "and 3+3?"}]  # fmt: skip
        sdk.messages.create(model=MODEL, max_tokens=16, messages=again)  # the thinking sent back, as Anthropic asks
        history = frontend.calls[-1]["messages"]
        assert history[-2].role == "assistant" and history[-2].content == "\n\n4"


def test_a_chats_reasoning_effort_reaches_the_template_and_none_turns_qwen3s_thinking_off(make_frontend, script, serve):
    frontend = make_frontend(chunks=script("4"))
    with serve(_app(frontend, parser="qwen3")) as url:
        sdk = _sdk(url)
        ask = {"model": MODEL, "messages": [{"role": "user", "content": "x"}]}
        high = sdk.chat.completions.create(**ask, reasoning_effort="high")
        assert frontend.calls[-1]["chat"].template_kwargs == {"reasoning_effort": "high", "enable_thinking": True}
        assert high.choices[0].message.content is None  # thinking on, no </think>: all reasoning
        off = sdk.chat.completions.create(**ask, reasoning_effort="none")
        assert frontend.calls[-1]["chat"].template_kwargs == {"reasoning_effort": "none", "enable_thinking": False}
        assert off.choices[0].message.content == "4"  # the template closed the think block: all answer
        mine = {"chat_template_kwargs": {"enable_thinking": True}}  # the request's own kwargs win
        sdk.chat.completions.create(**ask, reasoning_effort="none", extra_body=mine)
        assert frontend.calls[-1]["chat"].template_kwargs == {"reasoning_effort": "none", "enable_thinking": True}


def test_anthropics_thinking_switch_reaches_the_template(make_frontend, script, serve):
    import anthropic

    frontend = make_frontend(chunks=script("4"))
    app = _app(frontend, parser="qwen3")
    with serve(app) as url, anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as sdk:
        ask = {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": "x"}]}
        off = sdk.messages.create(**ask, thinking={"type": "disabled"})
        assert frontend.calls[-1]["chat"].template_kwargs == {"enable_thinking": False}
        assert [(b.type, b.text) for b in off.content] == [("text", "4")]
        on = sdk.messages.create(**{**ask, "max_tokens": 2048}, thinking={"type": "enabled", "budget_tokens": 1024})
        assert frontend.calls[-1]["chat"].template_kwargs == {"enable_thinking": True}
        assert [b.type for b in on.content] == ["thinking"]  # no </think> came: the reply was all thinking
        with pytest.raises(anthropic.BadRequestError, match=r"thinking\.type"):
            sdk.messages.create(**ask, thinking={"type": "sometimes"})


def test_a_responses_reasoning_item_sent_back_is_taken_and_a_conversation_goes_on(make_frontend, script, serve):
    """The stateless pattern (the previous output sent back as input) and a conversation that kept a reasoning item:
    the next turn is served, its prompt the answers alone."""
    frontend = make_frontend(chunks=script(*THOUGHT))
    with serve(_app(frontend)) as url:
        sdk = _sdk(url)
        first = sdk.responses.create(model=MODEL, input="2+2?", store=False)
        again = [{"role": "user", "content": "2+2?"}, *[item.model_dump() for item in first.output]]
        second = sdk.responses.create(model=MODEL, input=[*again, {"role": "user", "content": "and 3+3?"}])
        assert second.status == "completed"
        assert [(m.role, m.content) for m in frontend.calls[-1]["messages"]] == [
            ("user", "2+2?"), ("assistant", "\n\n4"), ("user", "and 3+3?")
        ]  # fmt: skip
        conversation = sdk.conversations.create()
        sdk.responses.create(model=MODEL, input="2+2?", conversation=conversation.id)
        sdk.responses.create(model=MODEL, input="and 3+3?", conversation=conversation.id)
        assert [(m.role, m.content) for m in frontend.calls[-1]["messages"]] == [
            ("user", "2+2?"), ("assistant", "\n\n4"), ("user", "and 3+3?")
        ]  # fmt: skip
