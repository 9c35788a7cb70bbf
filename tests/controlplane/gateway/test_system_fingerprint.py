"""A reply's ``system_fingerprint`` (controlplane/gateway/system_fingerprint.py): the serving node's configuration in
each mode, the same for nodes alike, none for a reply whose choices ran on different ones; read with the openai SDK."""

from __future__ import annotations

import msgspec
import openai
import pytest

from controlplane.gateway import create_app
from controlplane.gateway.gateway_config import GatewayConfig
from controlplane.gateway.openai_reply import OpenAIReply
from controlplane.gateway.system_fingerprint import (
    MAX_REMEMBERED_NODES,
    FingerprintConfig,
    SystemFingerprints,
    render,
)
from transport.messages import HardwareInfo, KVInfo, NodeHello, TokenChunk
from zoo.cli import build_parser
from zoo.gateway_args import gateway_config_from_args

DIGEST = "3f2a9c1e55aa0b17"
H100 = HardwareInfo("NVIDIA H100 80GB HBM3", "H100", "9.0", 80.0, 3350.0, 989.0, "gpu-table")


def _hello(node_id: str = "n0", *, digest: str = DIGEST, backend: str = "torch", gpu: str = "H100") -> NodeHello:
    return NodeHello(
        node_id=node_id,
        model="smol",
        backend=backend,
        hardware=msgspec.structs.replace(H100, gpu_type=gpu),
        kv=KVInfo(num_device_blocks=8, num_host_blocks=0, block_size=16, bytes_per_block=1024),
        max_model_len=1024,
        power_score=1.0,
        config_digest=digest,
    )


def test_each_mode_renders_the_nodes_configuration():
    hello = _hello()
    assert render(FingerprintConfig(), hello) == "zoo-torch-h100-3f2a9c1e"
    assert render(FingerprintConfig("hash"), hello) == "zoo-3f2a9c1e"
    assert render(FingerprintConfig("custom", "fp_ours"), hello) == "fp_ours"
    assert render(FingerprintConfig("none"), hello) is None
    # a peer's strings as short safe labels; a digest that is not one (an older agent's ""): none
    odd = _hello(backend="Torch 2.13!", gpu="A100 40GB/SXM" + "x" * 100)
    assert render(FingerprintConfig(), odd) == f"zoo-torch-2.13-a100-40gb-sxm{'x' * 11}-3f2a9c1e"
    for digest in ("", "xyz", "3F2A9C1E", "abc"):
        assert render(FingerprintConfig(), _hello(digest=digest)) is None


@pytest.mark.parametrize(
    "mode, value, error",
    [
        ("fast", None, "must be one of"),
        ("custom", None, "needs one"),
        ("full", "fp", "goes with --fingerprint-mode custom"),
        ("custom", "", "1..256"),
        ("custom", "x" * 257, "1..256"),
    ],
)
def test_a_bad_mode_or_value_is_refused(mode, value, error):
    with pytest.raises(ValueError, match=error):
        FingerprintConfig(mode, value)


def test_a_node_that_left_keeps_its_fingerprint_within_the_bound():
    live = {"n0": _hello("n0")}
    fingerprints = SystemFingerprints(FingerprintConfig(), live.get)
    assert fingerprints.of_node("n0") == "zoo-torch-h100-3f2a9c1e"
    del live["n0"]
    assert fingerprints.of_node("n0") == "zoo-torch-h100-3f2a9c1e"  # its reply finished as it left
    assert fingerprints.of_node("never") is None
    for i in range(MAX_REMEMBERED_NODES):
        live[f"m{i}"] = _hello(f"m{i}")
        fingerprints.of_node(f"m{i}")
    assert fingerprints.of_node("n0") is None  # the oldest forgotten
    live["m0"] = _hello("m0", digest="0" * 16)  # a node restarted with another configuration
    assert fingerprints.of_node("m0") == "zoo-torch-h100-00000000"


def _chunk(request_id: str, node_id: str, *, last: bool) -> TokenChunk:
    return TokenChunk(
        request_id=request_id, token_ids=[7], text="a", finished=last, finish_reason="stop" if last else None,
        num_prompt_tokens=3, num_output_tokens=1, node_id=node_id,
    )  # fmt: skip


def test_choices_on_different_configurations_have_none_alike_ones_share_it():
    live = {"a": _hello("a"), "b": _hello("b", backend="jax", gpu="L4"), "c": _hello("c")}
    fingerprints = SystemFingerprints(FingerprintConfig(), live.get)

    def reply(nodes: list[str]) -> tuple[dict, list[dict]]:
        ids = [f"r-{i}" for i in range(len(nodes))]
        r = OpenAIReply(chat=True, request_id="r", model="smol", created=0, include_usage=True, choice_ids=ids,
                        fingerprints=fingerprints)  # fmt: skip
        streamed = [obj for i, n in enumerate(nodes) for obj in r.chunk_objects(_chunk(ids[i], n, last=True))]
        return r.full_object(), [*streamed, r.usage_object()]

    full, streamed = reply(["a", "b"])
    assert full["system_fingerprint"] is None and streamed[-1]["system_fingerprint"] is None
    fps = {obj["choices"][0]["index"]: obj["system_fingerprint"] for obj in streamed[:-1]}
    assert fps == {0: "zoo-torch-h100-3f2a9c1e", 1: "zoo-jax-l4-3f2a9c1e"}  # each chunk its own node's
    full, streamed = reply(["a", "c"])
    assert full["system_fingerprint"] == streamed[-1]["system_fingerprint"] == "zoo-torch-h100-3f2a9c1e"


def test_the_sdk_reads_the_serving_nodes_fingerprint_whole_and_streamed(make_frontend, script, serve):
    chunks = [msgspec.structs.replace(c, node_id="n0") for c in script("Hi", "!")]
    frontend = make_frontend(chunks=chunks)
    frontend.node_hello = {"n0": _hello()}.get  # the control plane's live hellos
    with serve(create_app(frontend)) as url:
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        chat = sdk.chat.completions.create(model="smol", messages=[{"role": "user", "content": "hi"}])
        assert chat.system_fingerprint == "zoo-torch-h100-3f2a9c1e"
        text = sdk.completions.create(model="smol", prompt="hi")
        assert text.system_fingerprint == "zoo-torch-h100-3f2a9c1e"
        stream = sdk.chat.completions.create(
            model="smol", messages=[{"role": "user", "content": "hi"}], stream=True
        )  # the role delta too: it is sent with the first tokens' node known
        assert {c.system_fingerprint for c in stream} == {"zoo-torch-h100-3f2a9c1e"}
    config = GatewayConfig(fingerprint=FingerprintConfig("none"))
    with serve(create_app(frontend, config=config)) as url:
        sdk = openai.OpenAI(base_url=url + "/v1", api_key="x", max_retries=0)
        assert sdk.completions.create(model="smol", prompt="hi").system_fingerprint is None


def _config(*flags: str) -> GatewayConfig:
    return gateway_config_from_args(build_parser().parse_args(["controlplane", "--fake-tokenizer", *flags]))


def test_the_flags_make_the_config_and_a_bad_pair_stops_the_start():
    assert _config().fingerprint == FingerprintConfig("full")
    assert _config("--fingerprint-mode", "hash").fingerprint == FingerprintConfig("hash")
    custom = _config("--fingerprint-mode", "custom", "--fingerprint-value", "fp_1")
    assert custom.fingerprint == FingerprintConfig("custom", "fp_1")
    with pytest.raises(SystemExit, match="--fingerprint-value goes with"):
        _config("--fingerprint-value", "fp_1")
    with pytest.raises(SystemExit, match="--fingerprint-mode must be one of"):
        _config("--fingerprint-mode", "fast")
