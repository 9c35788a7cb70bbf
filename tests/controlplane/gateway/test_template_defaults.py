"""vLLM's ``--default-chat-template-kwargs`` and ``--enable-force-include-usage`` (GatewayConfig's
``default_chat_template_kwargs`` and ``force_include_usage``): every chat route renders with the server's template
variables under its own, a reasoning parser reading the result; streamed replies end with usage when forced. Read with
the openai and anthropic SDKs over real HTTP."""

from __future__ import annotations

import anthropic
import httpx
import openai
import pytest

from backends.fake.byte_tokenizer import ByteTokenizer
from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from zoo.cli import build_parser
from zoo.gateway_args import gateway_config_from_args

MODEL = "smol"
QUESTION = [{"role": "user", "content": "2+2?"}]
DEFAULTS = {"enable_thinking": False, "style": "terse"}


class SpyTokenizer(ByteTokenizer):
    """A byte tokenizer that keeps the template variables of each chat it renders."""

    def __init__(self) -> None:
        super().__init__()
        self.variables: list[dict | None] = []

    def apply_chat_template(self, messages, add_generation_prompt=True, tools=None, template_kwargs=None, **more):
        self.variables.append(template_kwargs)
        return super().apply_chat_template(messages, add_generation_prompt, tools, template_kwargs, **more)


def test_every_chat_route_renders_with_the_servers_variables_under_its_own(make_frontend, script, serve):
    frontend = make_frontend(chunks=script("<think>", "hm", "</think>", "4"), tokenizer=SpyTokenizer())
    config = GatewayConfig(default_chat_template_kwargs=DEFAULTS, reasoning_parser="qwen3")
    with serve(create_app(frontend, config=config)) as url:
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        plain = sdk.chat.completions.create(model=MODEL, messages=QUESTION)
        assert frontend.calls[-1]["chat"].template_kwargs == DEFAULTS
        # qwen3 with thinking off by the server's default: the reply is not split (the template closed the block)
        assert plain.choices[0].message.content == "<think>hm</think>4"
        mine = {"chat_template_kwargs": {"enable_thinking": True}}
        split = sdk.chat.completions.create(model=MODEL, messages=QUESTION, extra_body=mine)
        assert frontend.calls[-1]["chat"].template_kwargs == {"enable_thinking": True, "style": "terse"}
        assert (split.choices[0].message.content, split.choices[0].message.model_extra["reasoning"]) == ("4", "hm")
        sdk.chat.completions.create(model=MODEL, messages=QUESTION, reasoning_effort="high")  # the effort wins too
        assert frontend.calls[-1]["chat"].template_kwargs["enable_thinking"] is True
        sdk.responses.create(model=MODEL, input="2+2?")
        assert frontend.calls[-1]["chat"].template_kwargs == DEFAULTS
        sdk.completions.create(model=MODEL, prompt="2+2?")  # no chat: no template
        assert frontend.calls[-1].get("chat") is None
        with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude:
            claude.messages.create(model=MODEL, max_tokens=8, messages=QUESTION)
            assert frontend.calls[-1]["chat"].template_kwargs == DEFAULTS
            thinking = {"type": "enabled", "budget_tokens": 1024}
            claude.messages.create(model=MODEL, max_tokens=2048, messages=QUESTION, thinking=thinking)
            assert frontend.calls[-1]["chat"].template_kwargs == {"enable_thinking": True, "style": "terse"}
            claude.messages.count_tokens(model=MODEL, messages=QUESTION)
            assert frontend.tokenizer.variables[-1] == DEFAULTS
        tokenized = httpx.post(url + "/tokenize", json={"model": MODEL, "messages": QUESTION})
        assert tokenized.status_code == 200 and frontend.tokenizer.variables[-1] == DEFAULTS


def _stream_usage(url: str, route: str) -> list:
    sdk = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
    if route == "chat":
        stream = sdk.chat.completions.create(model=MODEL, messages=QUESTION, stream=True)
    else:
        stream = sdk.completions.create(model=MODEL, prompt="x", stream=True)
    return [chunk.usage for chunk in stream if chunk.usage is not None]


@pytest.mark.parametrize("route", ["chat", "completions"])
def test_a_forced_usage_ends_every_stream(make_frontend, script, serve, route):
    frontend = make_frontend(chunks=script("a", "b"))
    with serve(create_app(frontend, config=GatewayConfig(force_include_usage=True))) as url:
        usages = _stream_usage(url, route)
        assert len(usages) == 1 and usages[0].completion_tokens == 2  # the last chunk, not asked for
    with serve(create_app(make_frontend(chunks=script("a", "b")))) as url:
        assert _stream_usage(url, route) == []  # OpenAI's default: only when stream_options asks


def _config(*flags: str) -> GatewayConfig:
    return gateway_config_from_args(build_parser().parse_args(["controlplane", "--fake-tokenizer", *flags]))


def test_the_flags_make_the_config_and_bad_values_stop_the_start():
    config = _config("--default-chat-template-kwargs", '{"enable_thinking": false}', "--enable-force-include-usage")
    assert config.default_chat_template_kwargs == {"enable_thinking": False} and config.force_include_usage
    assert _config().default_chat_template_kwargs == {} and not _config().force_include_usage
    for raw in ("{not json", "[1]", '{"add_generation_prompt": false}', "[" * 100_000):
        with pytest.raises(SystemExit, match="--default-chat-template-kwargs"):
            _config("--default-chat-template-kwargs", raw)
    with pytest.raises(ValueError, match="default_chat_template_kwargs"):
        GatewayConfig(default_chat_template_kwargs={"continue_final_message": True})
