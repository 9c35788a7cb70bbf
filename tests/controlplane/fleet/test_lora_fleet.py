"""LoRA through a real fleet on loopback: a control plane with --lora-modules, a LoRA node and a base-only
node (torch, the tiny model), the ZeroMQ client and the OpenAI gateway selecting adapters by `model`, the
load/unload endpoints (bad paths, unknown names: OpenAI-shaped 4xx), and the node reporting its adapters."""

from __future__ import annotations

import contextlib

import anyio
import httpx
import pytest

from agent.agent_config import AgentConfig
from agent.node_agent import NodeAgent
from backends.checkpoint.peft_adapter import check_peft_directory, load_peft_adapter
from backends.checkpoint.peft_writer import random_peft_adapter
from backends.fake import ByteTokenizer, cpu_test_hardware
from backends.runner_driver import tiny_config
from backends.torch import TorchModelRunner
from client import AsyncZooClient
from controlplane.gateway import create_app
from controlplane.router.router_config import RouterConfig
from controlplane.server import ControlPlane, ControlPlaneConfig
from engine.config import CacheConfig, SchedulerConfig
from engine.llm_engine import LLMEngine
from engine.lora import LoraConfig, LoraRequest
from engine.sampling_params import SamplingParams

pytestmark = pytest.mark.anyio
MODEL = "tiny"
PROMPT = [5, 6, 7, 8, 9, 10]
MAX_TOKENS = 5


def _engine(model, lora: bool) -> LLMEngine:
    runner = TorchModelRunner(model, lora_config=LoraConfig(2, 8) if lora else None)
    return LLMEngine(runner, ByteTokenizer(), SchedulerConfig(max_model_len=128), CacheConfig(4, 64, 0))


@pytest.fixture
def adapters(tiny, tmp_path):
    config = tiny[0]
    return {
        name: str(random_peft_adapter(tmp_path / name, config, rank=4, target_modules=targets, seed=i, b_std=0.3))
        for i, (name, targets) in enumerate({"qv": ("q_proj", "v_proj"), "mlp": ("up_proj", "down_proj")}.items())
    }


def _expected(model, adapters) -> dict[str | None, tuple[list[int], str]]:
    """(greedy tokens, text) of PROMPT per adapter (None: base), from one engine alone."""
    engine = _engine(model, lora=True)
    for name, path in adapters.items():
        engine.add_lora(LoraRequest(name, path))
    params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
    ids = {engine.add_request(PROMPT, params, lora_name=name): name for name in [None, *adapters]}
    tokens: dict[str, list[int]] = {rid: [] for rid in ids}
    texts: dict[str, str] = {}
    while engine.has_unfinished_requests():
        for out in engine.step():
            tokens[out.req_id] += out.new_token_ids
            texts[out.req_id] = out.text
    return {name: (tokens[rid], texts[rid]) for rid, name in ids.items()}


@contextlib.asynccontextmanager
async def _fleet(tiny, adapters, nodes=(("base", False), ("lora", True)), engines=None, lora_check=None):
    """A control plane and ``nodes`` (node id, serves adapters); their engines go into ``engines`` if given;
    ``lora_check``: the control plane's check of an adapter's files (default: against the tiny model)."""
    config, _, model = tiny
    cp = ControlPlane(
        ControlPlaneConfig(
            agent_endpoint="tcp://127.0.0.1:0",
            client_endpoint="tcp://127.0.0.1:0",
            model_name=MODEL,
            router=RouterConfig(policy="round_robin"),
            heartbeat_interval_s=0.2,
            heartbeat_timeout_s=2.0,
            report_interval_s=0.05,
            lora_modules=[LoraRequest("qv", adapters["qv"])],
            allow_runtime_lora_updating=True,
        ),
        ByteTokenizer(),
        lora_check=lora_check or (lambda path: load_peft_adapter(path, config, 8)),
    )
    async with anyio.create_task_group() as tg:
        await tg.start(cp.run)
        for node_id, lora in nodes:
            engine = _engine(model, lora)
            if engines is not None:
                engines[node_id] = engine
            agent = NodeAgent(
                cp.agent_endpoint,
                engine,
                AgentConfig(node_id=node_id, model_name=MODEL, report_interval_s=0.05, profile_at_start=False),
                hardware=cpu_test_hardware(),
            )
            await tg.start(agent.run)
        await cp.wait_until(lambda: len(cp.registry) == len(nodes), 10)
        yield cp
        tg.cancel_scope.cancel()


def _assert_error(response: httpx.Response, status: int, words: str) -> None:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert words in error["message"]


async def test_adapters_are_served_through_the_fleet(tiny, adapters, tmp_path):
    expected = _expected(tiny[2], adapters)
    assert len({tuple(t) for t, _ in expected.values()}) == 3  # each adapter changes the answer
    async with _fleet(tiny, adapters) as cp, AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(cp)), base_url="http://zoo")
        # the ZeroMQ client selects the adapter by name; only the LoRA node can serve it
        for _ in range(2):
            done = await zoo.generate(prompt_token_ids=PROMPT, model="qv", max_tokens=MAX_TOKENS, temperature=0,
                                      ignore_eos=True)  # fmt: skip
            assert done.node_id == "lora" and done.token_ids == expected["qv"][0]
        base = await zoo.generate(prompt_token_ids=PROMPT, max_tokens=MAX_TOKENS, temperature=0, ignore_eos=True)
        assert base.token_ids == expected[None][0]

        models = (await http.get("/v1/models")).json()["data"]
        assert [m["id"] for m in models] == [MODEL, "qv"]
        assert models[1]["parent"] == MODEL and models[1]["root"] == adapters["qv"]
        assert (await http.get("/v1/models/qv")).json()["parent"] == MODEL

        load = "/v1/load_lora_adapter"
        _assert_error(await http.post(load, json={"lora_name": "x", "lora_path": str(tmp_path / "none")}), 400,
                      "is not a directory")  # fmt: skip
        big = random_peft_adapter(tmp_path / "big", tiny[0], rank=16, target_modules=("q_proj",))
        _assert_error(await http.post(load, json={"lora_name": "big", "lora_path": str(big)}), 400,
                      "exceeds the maximum LoRA rank 8")  # fmt: skip
        _assert_error(await http.post(load, json={"lora_name": "qv", "lora_path": adapters["mlp"]}), 400,
                      "already been loaded")  # fmt: skip
        _assert_error(await http.post(load, json={"lora_name": "mlp"}), 400, "lora_path")
        _assert_error(await http.post(load, content=b"{nope"), 400, "not valid JSON")
        r = await http.post(load, json={"lora_name": "mlp", "lora_path": adapters["mlp"]})
        assert r.status_code == 200 and "mlp" in r.text

        body = {"model": "mlp", "prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}
        r = await http.post("/v1/completions", json=body)
        assert r.status_code == 200, r.text
        assert r.json()["model"] == "mlp"
        assert r.json()["choices"][0]["text"] == expected["mlp"][1]

        # the node reports the adapters in its slots; the router sees them
        await cp.wait_until(lambda: {"qv", "mlp"} <= set(_view(cp, "lora").lora_resident), 10)

        unload = "/v1/unload_lora_adapter"
        _assert_error(await http.post(unload, json={"lora_name": "nope"}), 404, "cannot be found")
        assert (await http.post(unload, json={"lora_name": "mlp"})).status_code == 200
        _assert_error(await http.post("/v1/completions", json=body), 404, "is not served")
        assert [m["id"] for m in (await http.get("/v1/models")).json()["data"]] == [MODEL, "qv"]
        await http.aclose()


def _view(cp, node_id):
    return next(v for v in cp.registry.views() if v.node_id == node_id)


async def test_runtime_updates_are_off_unless_enabled(tiny, adapters):
    cp = ControlPlane(ControlPlaneConfig(agent_endpoint="tcp://127.0.0.1:0", model_name=MODEL), ByteTokenizer())
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(cp)), base_url="http://zoo")
    r = await http.post("/v1/load_lora_adapter", json={"lora_name": "qv", "lora_path": adapters["qv"]})
    _assert_error(r, 404, "Not Found")
    await http.aclose()


async def test_prefix_cache_never_mixes_adapters_end_to_end(tiny, adapters):
    """The same prompt as the base model, then under an adapter, through the ZeroMQ client, the control plane
    and one node: the adapter's request reuses none of the base request's cached blocks and gets the tokens it
    gets alone; the same adapter again reuses its own blocks."""
    prompt = list(range(20, 44))  # six full blocks of 4
    expected = {}
    for name in (None, "qv"):
        engine = _engine(tiny[2], lora=True)
        engine.add_lora(LoraRequest("qv", adapters["qv"]))
        params = SamplingParams(temperature=0, max_tokens=MAX_TOKENS, ignore_eos=True)
        engine.add_request(prompt, params, lora_name=name)
        expected[name] = [t for _ in range(MAX_TOKENS) for out in engine.step() for t in out.new_token_ids]
        assert not engine.has_unfinished_requests() and len(expected[name]) == MAX_TOKENS
    assert expected[None] != expected["qv"]
    engines = {}
    async with (
        _fleet(tiny, adapters, nodes=(("lora", True),), engines=engines) as cp,
        AsyncZooClient(cp.client_endpoint, timeout_s=20) as zoo,
    ):
        engine = engines["lora"]

        async def generate(model):
            done = await zoo.generate(prompt_token_ids=prompt, model=model, max_tokens=MAX_TOKENS, temperature=0,
                                      ignore_eos=True)  # fmt: skip
            return done.token_ids, engine.make_stats().prefix_cache_hits_total

        tokens, hits_base = await generate(None)
        assert tokens == expected[None]
        tokens, hits = await generate("qv")
        assert tokens == expected["qv"] and hits == hits_base  # no block of the base request was taken
        tokens, hits = await generate("qv")
        assert tokens == expected["qv"] and hits > hits_base  # its own blocks are
        tokens, hits_again = await generate(None)
        assert tokens == expected[None] and hits_again > hits  # and the base request's for the base model


async def test_an_adapter_the_node_refuses_fails_its_own_requests_only(tiny, adapters, tmp_path):
    """A control plane that cannot check shapes (it knows no base model's config: only the directory) accepts
    an adapter made for another base model; the node refuses it with a 400 naming the mismatch, and keeps
    serving the base model and the other adapters."""
    other = random_peft_adapter(tmp_path / "other", tiny_config(hidden_size=64), rank=4, target_modules=("q_proj",))
    expected = _expected(tiny[2], adapters)
    async with _fleet(tiny, adapters, nodes=(("lora", True),), lora_check=check_peft_directory) as cp:
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=create_app(cp)), base_url="http://zoo")
        r = await http.post("/v1/load_lora_adapter", json={"lora_name": "other", "lora_path": str(other)})
        assert r.status_code == 200, r.text
        body = {"prompt": PROMPT, "max_tokens": MAX_TOKENS, "temperature": 0, "ignore_eos": True}
        _assert_error(await http.post("/v1/completions", json={**body, "model": "other"}), 400,
                      "do not fit the base projection")  # fmt: skip
        for model, name in (("qv", "qv"), (MODEL, None)):
            r = await http.post("/v1/completions", json={**body, "model": model})
            assert r.status_code == 200 and r.json()["choices"][0]["text"] == expected[name][1], r.text
        await http.aclose()
