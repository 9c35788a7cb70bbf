"""The server's default sampling parameters (controlplane/gateway/sampling_defaults.py, vLLM's --generation-config and
--override-generation-config): a request that leaves a parameter out gets the default, on every generating route; its
own value, even 0, wins; a bad default is refused at start."""

from __future__ import annotations

import json

import anthropic
import openai
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from controlplane.gateway.sampling_defaults import sampling_defaults
from zoo.cli import build_parser
from zoo.gateway_args import gateway_config_from_args

QWEN = {"temperature": 0.7, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05, "max_new_tokens": 256,
        "do_sample": True, "eos_token_id": [151645, 151643]}  # fmt: skip


def test_the_generation_configs_six_keys_are_read_and_the_override_wins():
    defaults = sampling_defaults(QWEN, {"temperature": 0.6, "min_p": 0.05})
    assert defaults == {"temperature": 0.6, "top_p": 0.8, "top_k": 20, "repetition_penalty": 1.05,
                        "max_tokens": 256, "min_p": 0.05}  # fmt: skip
    assert sampling_defaults({"do_sample": True}, {}) == {}
    assert sampling_defaults({"temperature": None}, {}) == {}
    with pytest.raises(ValueError, match="unknown keys"):
        sampling_defaults({}, {"temp": 0.5})  # an operator's typo is refused, not ignored
    for bad in ({"temperature": -1.0}, {"top_p": 2.0}, {"max_new_tokens": 0}, {"top_k": "many"}, {"top_p": True}):
        with pytest.raises(ValueError):
            sampling_defaults({}, bad)


def test_every_generating_route_fills_what_a_request_leaves_out(make_frontend, serve):
    frontend = make_frontend()
    defaults = {"temperature": 0.6, "top_p": 0.9, "top_k": 20, "max_tokens": 100}
    with serve(create_app(frontend, config=GatewayConfig(sampling_defaults=defaults))) as url:
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        chat = {"model": "smol", "messages": [{"role": "user", "content": "x"}]}
        sdk.chat.completions.create(**chat)
        sampling = frontend.calls[-1]["sampling"]
        assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_tokens) == (0.6, 0.9, 20, 100)
        sdk.chat.completions.create(**chat, temperature=0.0, max_tokens=7, extra_body={"top_k": 5})
        sampling = frontend.calls[-1]["sampling"]
        assert (sampling.temperature, sampling.top_p, sampling.top_k, sampling.max_tokens) == (0.0, 0.9, 5, 7)
        sdk.completions.create(model="smol", prompt="x")
        sampling = frontend.calls[-1]["sampling"]
        assert (sampling.temperature, sampling.max_tokens) == (0.6, 16)  # a completion keeps OpenAI's 16, as vLLM
        sdk.responses.create(model="smol", input="x")
        sampling = frontend.calls[-1]["sampling"]
        assert (sampling.temperature, sampling.top_k, sampling.max_tokens) == (0.6, 20, 100)
        with anthropic.Anthropic(base_url=url, api_key="x", max_retries=0) as claude:
            claude.messages.create(model="smol", max_tokens=9, messages=[{"role": "user", "content": "x"}])
        sampling = frontend.calls[-1]["sampling"]
        assert (sampling.temperature, sampling.top_p, sampling.max_tokens) == (0.6, 0.9, 9)


def _config(*flags: str) -> GatewayConfig:
    return gateway_config_from_args(build_parser().parse_args(["controlplane", "--fake-tokenizer", *flags]))


def test_zoo_controlplane_reads_the_models_generation_config_and_the_override(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps(QWEN))
    from_model = _config("--model", str(tmp_path)).sampling_defaults  # auto: the --model folder's
    assert from_model["temperature"] == 0.7 and from_model["max_tokens"] == 256
    assert _config("--model", str(tmp_path)).chat_max_tokens == 256
    assert _config("--model", str(tmp_path), "--generation-config", "vllm").sampling_defaults == {}
    assert _config("--generation-config", str(tmp_path)).sampling_defaults == from_model
    both = _config("--generation-config", str(tmp_path), "--override-generation-config", '{"temperature": 0.5}')
    assert both.sampling_defaults == {**from_model, "temperature": 0.5}
    assert _config().sampling_defaults == {} and _config().chat_max_tokens == 512  # the GGUF default: none
    for flags in (
        ("--override-generation-config", '{"temp": 1}'),
        ("--override-generation-config", "[1, 2]"),
        ("--override-generation-config", "{not json"),
        ("--override-generation-config", "[" * 100_000),  # too deep for the parser: refused, not a traceback
        ("--override-generation-config", '{"top_p": 7}'),
        ("--generation-config", str(tmp_path / "missing")),
    ):
        with pytest.raises(SystemExit, match="generation-config"):
            _config(*flags)
    with pytest.raises(ValueError, match="sampling_defaults"):
        GatewayConfig(sampling_defaults={"seed": 1})
