"""Model aliases through a fleet on loopback: an alias given as ``model`` over HTTP and over ZeroMQ runs on the
nodes of the model it stands for and the reply names that model; an alias of a model no node serves is a 404 over
HTTP and an UNKNOWN_MODEL error over ZeroMQ; a LoRA adapter cannot take an alias's name."""

from __future__ import annotations

import httpx
import pytest

from backends.fake import FAKE_MODEL_NAME
from client import AsyncZooClient, ZooUnknownModelError
from controlplane.gateway import create_app
from controlplane.lora_table import LoraTableError

pytestmark = pytest.mark.anyio

ALIASES = {"gpt-4o-mini": FAKE_MODEL_NAME, "old-name": "retired-model"}


@pytest.fixture
def fleet(fleet_with_agents):
    return lambda: fleet_with_agents("n0", model_aliases=dict(ALIASES))


async def test_an_alias_is_served_over_http_and_zeromq_and_the_reply_names_the_model(fleet):
    async with fleet() as cp, AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
        result = await zoo.generate("Hello", model="gpt-4o-mini", max_tokens=3, ignore_eos=True)
        assert len(result.token_ids) == 3
        with pytest.raises(ZooUnknownModelError, match="'retired-model' is not served \\('old-name' is an alias"):
            await zoo.generate("Hello", model="old-name", max_tokens=3)
        transport = httpx.ASGITransport(app=create_app(cp))
        async with httpx.AsyncClient(transport=transport, base_url="http://gw") as http:
            body = {"model": "gpt-4o-mini", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3}
            reply = await http.post("/v1/chat/completions", json=body)
            assert reply.status_code == 200 and reply.json()["model"] == FAKE_MODEL_NAME
            gone = await http.post("/v1/chat/completions", json={**body, "model": "old-name"})
            assert gone.status_code == 404 and gone.json()["error"]["code"] == "model_not_found"
            ids = [card["id"] for card in (await http.get("/v1/models")).json()["data"]]
            assert ids == [FAKE_MODEL_NAME, "gpt-4o-mini"]
        with pytest.raises(LoraTableError, match="model alias"):
            cp.load_lora_adapter("gpt-4o-mini", "/adapters/x")
