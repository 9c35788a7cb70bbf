"""The worker threads that tokenize long prompts (controlplane/offload_tokenize.py TokenizeWorkers): the HTTP path and
the ZeroMQ clients' share them, at most ``threads`` prompts at once; a request waiting for its tokens is in flight
(/health, the stats, the control plane's /metrics)."""

from __future__ import annotations

import threading

import anyio
import pytest
from prometheus_client import generate_latest

from backends.fake import ByteTokenizer
from controlplane.client_requests import ClientRequests
from controlplane.control_plane_config import ControlPlaneConfig
from controlplane.frontend import FrontendError
from controlplane.offload_tokenize import TokenizeWorkers, pretokenize
from controlplane.server import ControlPlane
from engine.sampling_params import SamplingParams
from transport.dispatch import Incoming
from transport.messages import ClientGenerate

pytestmark = pytest.mark.anyio
LONG = "y" * 600


class GatedTokenizer(ByteTokenizer):
    """A byte tokenizer whose GIL-releasing encode waits for ``gate``; it records how many ran at once."""

    def __init__(self) -> None:
        self.gate, self.lock = threading.Event(), threading.Lock()
        self.running = self.most_at_once = self.calls = 0

    def encode_unlocked(self, text, add_special_tokens=False):
        with self.lock:
            self.calls += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
        try:
            assert self.gate.wait(10)
            return self.encode(text, add_special_tokens)
        finally:
            with self.lock:
                self.running -= 1


def _msg(request_id: str) -> ClientGenerate:
    return ClientGenerate(request_id=request_id, prompt=LONG, sampling=SamplingParams(max_tokens=2))


async def _until(predicate) -> None:
    with anyio.fail_after(10):
        while not predicate():
            await anyio.sleep(0.005)


async def test_the_http_and_zeromq_paths_share_the_threads_bound():
    tokenizer = GatedTokenizer()
    workers = TokenizeWorkers(tokenizer, threads=2)
    submitted, sent = [], []

    class Link:
        def send_nowait(self, msg, peer) -> None:
            sent.append(msg)

    def submit(msg, consumer, arrival_ns, token_ids=None):
        submitted.append((msg.request_id, token_ids))

    clients = ClientRequests(workers=workers, min_chars=500, max_pending=8, link=Link(), submit=submit,
                             cancel=lambda rid: False, count_refusal=sent.append, table={}, notify=lambda: None,
                             started_ns=0)  # fmt: skip
    http_done: list[dict] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(clients.serve)
        for i in range(3):  # three HTTP requests' long prompts
            tg.start_soon(lambda i=i: _append(http_done, pretokenize(workers, [_msg(f"h{i}")], min_chars=500)))
        for i in range(2):  # two ZeroMQ clients'
            clients.on_generate(Incoming(b"peer", _msg(f"z{i}"), [], 1))
        await _until(lambda: workers.num_waiting == 5 and tokenizer.running == 2)
        await anyio.sleep(0.05)
        assert tokenizer.running == 2 and tokenizer.calls == 2  # the others wait their turn, whichever path
        tokenizer.gate.set()
        await _until(lambda: len(http_done) == 3 and len(submitted) == 2)
        tg.cancel_scope.cancel()
    assert tokenizer.most_at_once == 2 and workers.num_waiting == 0 and workers.num_tokenized_total == 5
    assert all(ids == tokenizer.encode(LONG) for _, ids in submitted)
    assert workers.summary() == {"waiting": 0, "tokenized_total": 5, "threads": 2}


async def _append(out: list, awaitable) -> None:
    out.append(await awaitable)


async def test_a_prompt_not_wanted_at_its_turn_is_not_tokenized():
    tokenizer = GatedTokenizer()
    tokenizer.gate.set()
    workers = TokenizeWorkers(tokenizer, threads=1)
    assert await workers.tokenize(_msg("a"), wanted=lambda: False) is None
    assert tokenizer.calls == 0 and workers.num_tokenized_total == 0 and workers.num_waiting == 0
    assert await workers.tokenize(_msg("b"), wanted=lambda: True) == tokenizer.encode(LONG)
    with pytest.raises(ValueError, match="threads"):
        TokenizeWorkers(tokenizer, threads=0)


async def test_a_request_waiting_for_its_tokens_is_in_flight_in_health_stats_and_metrics():
    from observe.controlplane_exporter import ControlPlaneExporter

    tokenizer = GatedTokenizer()
    cp = ControlPlane(ControlPlaneConfig(agent_endpoint=None, client_endpoint=None, offload_tokenize_chars=500,
                                         model_name="fake-bytes"), tokenizer)  # fmt: skip
    exporter = ControlPlaneExporter(cp.stats)
    refused: list[FrontendError] = []

    async def consume() -> None:
        try:
            async for _ in cp.generate("r", model=None, prompt=LONG, sampling=SamplingParams(max_tokens=2)):
                pass
        except FrontendError as error:
            refused.append(error)

    async with anyio.create_task_group() as tg:
        tg.start_soon(consume)
        await _until(lambda: tokenizer.running == 1)
        assert cp.health()["inflight"] == 1 and cp.stats()["requests"]["inflight"] == 1
        assert cp.stats()["tokenizing"]["waiting"] == 1
        text = generate_latest(exporter.registry).decode()
        assert "zoo:controlplane_tokenize_waiting_requests 1.0" in text
        tokenizer.gate.set()
    assert len(refused) == 1  # then routed: no node here, so refused, and no longer in flight
    assert cp.health()["inflight"] == 0 and cp.stats()["tokenizing"]["tokenized_total"] == 1
    text = generate_latest(exporter.registry).decode()
    assert "zoo:controlplane_tokenize_waiting_requests 0.0" in text
    assert "zoo:controlplane_tokenize_offloaded_prompts_total 1.0" in text
