"""GET /tokenizer_info (gateway/tokenizer_info.py): vLLM's keys from SmolLM2's own tokenizer, the chat template
that renders the fleet's chats, the context a node serves; off by default (404), as vLLM's; 501 without a
tokenizer."""

from __future__ import annotations

import dataclasses

import httpx
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig

pytestmark = pytest.mark.anyio


def _client(frontend, enabled: bool = True) -> httpx.AsyncClient:
    app = create_app(frontend, config=GatewayConfig(tokenizer_info_endpoint=enabled))
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://gw")


async def test_smollm2s_special_tokens_added_tokens_and_chat_template(make_frontend, smollm2_checkpoint):
    tokenizer = smollm2_checkpoint.tokenizer
    async with _client(make_frontend(tokenizer=tokenizer, max_model_len=8192)) as http:
        reply = await http.get("/tokenizer_info")
    assert reply.status_code == 200
    info = reply.json()
    assert info["tokenizer_class"] == "Tokenizer" and info["vocab_size"] == tokenizer.vocab_size
    assert info["model_max_length"] == 8192
    assert (info["eos_token"], info["eos_token_id"]) == ("<|im_end|>", tokenizer.eos_token_id)
    assert info["bos_token"] == tokenizer.backend_tokenizer.id_to_token(tokenizer.bos_token_id)
    im_start = tokenizer.token_to_id("<|im_start|>")
    assert info["added_tokens_decoder"][str(im_start)] == {"content": "<|im_start|>", "special": True}
    assert "<|im_start|>" in info["additional_special_tokens"]
    assert info["chat_template"] == tokenizer.chat_template and "<|im_start|>" in info["chat_template"]


async def test_a_minimal_tokenizer_answers_what_it_has(make_frontend):
    async with _client(make_frontend()) as http:  # the byte tokenizer: no added tokens, no chat template
        info = (await http.get("/tokenizer_info")).json()
    assert info["tokenizer_class"] == "ByteTokenizer" and info["eos_token_id"] == 2 and info["pad_token_id"] is None
    assert info["added_tokens_decoder"] == {} and "chat_template" not in info


async def test_off_unless_turned_on_and_501_without_a_tokenizer(make_frontend):
    async with _client(make_frontend(), enabled=False) as http:
        assert (await http.get("/tokenizer_info")).status_code == 404
    frontend = make_frontend()
    frontend = dataclasses.replace(frontend, tokenizer=None)
    async with _client(frontend) as http:
        reply = await http.get("/tokenizer_info")
    assert reply.status_code == 501 and reply.json()["error"]["message"] == "This server has no tokenizer"
