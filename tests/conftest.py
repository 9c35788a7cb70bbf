"""Session-wide fixtures: the real default model is loaded at most once per test session."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    # Triton reads TRITON_INTERPRET once, when it is first imported, and any test module may import it first
    # (transformers and peft can): a CPU-only session runs Triton kernels under the interpreter from the start
    os.environ.setdefault("TRITON_INTERPRET", "1")

from backends.checkpoint import default_model_path


@pytest.fixture(scope="session")
def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF; `make test` installs it, so its absence is an error, not a skip."""
    return Path(default_model_path())


@pytest.fixture(scope="session")
def smollm2_checkpoint(smollm2_gguf_path):
    from backends.checkpoint import load_checkpoint

    return load_checkpoint(smollm2_gguf_path)


@pytest.fixture(scope="session")
def smollm2_model(smollm2_checkpoint):
    """Our fp32 LlamaModel of SmolLM2, built once (runners share it)."""
    from backends.torch import build_model

    return build_model(smollm2_checkpoint, "float32", progress=False)


@pytest.fixture(scope="session")
def hf_reference(smollm2_gguf_path):
    """transformers' own model of the same GGUF (the independent reference), fp32."""
    from bench.hf_reference import load_hf_reference

    return load_hf_reference(smollm2_gguf_path)


@pytest.fixture(scope="session")
def tiny():
    """(config, HF-named fp32 torch state dict, torch LlamaModel) of a 2-layer random Llama, shared by
    the torch and JAX backend tests."""
    from backends.runner_driver import tiny_config
    from backends.torch import build_model, random_state_dict

    config = tiny_config()
    sd = random_state_dict(config, seed=1, std=0.2)
    return config, sd, build_model(config, "float32", state_dict=sd)


class FakeRouterPeer:
    """A bare ROUTER socket on a free loopback port, playing the control plane for one agent or client under
    test: ``expect(type)`` reads until a message of that type arrives (every message read is kept in
    ``seen``); ``send(msg, peer)`` answers the last peer heard unless told another."""

    def __init__(self) -> None:
        import zmq
        import zmq.asyncio

        self.ctx = zmq.asyncio.Context()
        self.sock = self.ctx.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind("tcp://127.0.0.1:0")
        self.endpoint = self.sock.getsockopt_string(zmq.LAST_ENDPOINT)
        self.peer = b""
        self.seen: list = []

    async def recv(self):
        from transport.codec import decode

        self.peer, *frames = await self.sock.recv_multipart()
        msg, _ = decode(frames)
        self.seen.append(msg)
        return msg

    async def expect(self, cls, timeout_s: float = 10.0, where=lambda m: True):
        """(peer, the next message of type ``cls`` that ``where`` accepts)."""
        import anyio

        with anyio.fail_after(timeout_s):
            while True:
                msg = await self.recv()
                if isinstance(msg, cls) and where(msg):
                    return self.peer, msg

    async def send(self, msg, peer: bytes | None = None) -> None:
        from transport.codec import encode

        await self.sock.send_multipart([self.peer if peer is None else peer, *encode(msg)])

    def close(self) -> None:
        self.sock.close(linger=0)
        self.ctx.term()


@pytest.fixture
def router_peer():
    """A FakeRouterPeer, closed after the test."""
    peer = FakeRouterPeer()
    try:
        yield peer
    finally:
        peer.close()
