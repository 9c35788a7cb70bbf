"""vLLM's ``--response-role``: a chat reply's role when its prompt ends with a new message's header; a request that
continues its last message gets that message's role (vLLM's ``get_chat_request_role``). And
``--exclude-tools-when-tool-choice-none``, taken: tool_choice none always leaves the tools out."""

from __future__ import annotations

import httpx
import msgspec
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from zoo.cli import build_parser
from zoo.gateway_args import gateway_config_from_args

pytestmark = pytest.mark.anyio


async def _roles(frontend, config: GatewayConfig, body: dict) -> tuple[str, str]:
    """The whole reply's message role and the streamed reply's role delta."""
    transport = httpx.ASGITransport(app=create_app(frontend, config=config))
    async with httpx.AsyncClient(transport=transport, base_url="http://gateway") as c:
        whole = (await c.post("/v1/chat/completions", json=body)).json()
        streamed = await c.post("/v1/chat/completions", json={**body, "stream": True})
    events = [line.removeprefix("data: ") for line in streamed.text.splitlines() if line.startswith("data: {")]
    first = msgspec.json.decode(events[0])
    return whole["choices"][0]["message"]["role"], first["choices"][0]["delta"]["role"]


async def test_the_servers_role_unless_the_request_continues_its_last_message(frontend):
    bot = GatewayConfig(response_role="bot")
    ask = {"model": "smol", "messages": [{"role": "user", "content": "hi"}]}
    assert await _roles(frontend, GatewayConfig(), ask) == ("assistant", "assistant")
    assert await _roles(frontend, bot, ask) == ("bot", "bot")
    prefilled = [*ask["messages"], {"role": "assistant", "content": "Well,"}]
    body = {**ask, "messages": prefilled, "add_generation_prompt": False, "continue_final_message": True}
    assert await _roles(frontend, bot, body) == ("assistant", "assistant")  # the message it continues
    body = {**ask, "add_generation_prompt": False}  # no new header: the last message's role, as vLLM's
    assert await _roles(frontend, bot, body) == ("user", "user")


def _config(*flags: str) -> GatewayConfig:
    return gateway_config_from_args(build_parser().parse_args(["controlplane", "--fake-tokenizer", *flags]))


def test_the_flags():
    assert _config().response_role == "assistant"
    assert _config("--response-role", "model", "--exclude-tools-when-tool-choice-none").response_role == "model"
    for bad in ("", "a b", "x" * 65, "ro\nle"):
        with pytest.raises(SystemExit, match="--response-role"):
            _config("--response-role", bad)
