"""The draft agent: a draft model behind a ROUTER socket, proposing for verifiers on other nodes.

The seed's weak-GPU-drafts-for-a-strong-GPU pattern: this process runs on the weak node (an L4, or here a
CPU process with few threads) and answers each ``DraftPropose`` with greedy drafts from its
``DraftModelProposer`` (its own paged KV per request, rolled back to what the verifier accepted). One
socket, one owner task: the actor reads, the draft model runs in a worker thread, the actor replies.
A malformed or unexpected message gets an ErrorReply and the loop goes on; a reply to a verifier that has gone
is dropped (counted in ``num_unsent``), never ending the loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread
import zmq
import zmq.asyncio

from engine.sampling_params import SamplingParams
from engine.spec.proposer import DraftRequest
from transport.codec import WireError, decode, encode
from transport.messages import DraftPropose, DraftReply, ErrorCode, ErrorReply
from transport.sockets import AGENT_MAX_MSG_BYTES, bind_router

log = logging.getLogger(__name__)

GREEDY = SamplingParams(temperature=0.0)


class DraftServer:
    """proposer: a DraftModelProposer built with ``sample_drafts=False``; vocab_size: its vocabulary.

    A node agent hosting one (``zoo agent --can-draft NAME``) builds it lazily: ``load()`` returns
    ``(proposer, vocab_size, vocab_id)`` and runs in a worker thread at ``setup()``; ``draft_models`` are the
    names it advertises in its NodeHello, ``vocab_id`` its tokenizer's (engine/spec/vocab_id.py).
    ``run`` = ``setup`` (load, bind) then ``serve`` (the loop); an agent calls the two apart.
    """

    def __init__(
        self,
        proposer: Any,
        vocab_size: int,
        endpoint: str = "tcp://127.0.0.1:0",
        *,
        draft_models: tuple[str, ...] = (),
        vocab_id: str = "",
        load: Callable[[], tuple[Any, int, str]] | None = None,
    ) -> None:
        self.proposer = proposer
        self.vocab_size = vocab_size
        self.endpoint = endpoint
        self.draft_models = tuple(draft_models)
        self.vocab_id = vocab_id
        self._load = load
        self._ctx: zmq.asyncio.Context | None = None
        self._sock: zmq.asyncio.Socket | None = None
        self.num_rounds = 0
        self.num_unsent = 0  # replies to verifiers that had gone
        self.draft_step_ms = 0.0  # measured at setup() (``profile``): time per drafted token; 0: not measured

    async def run(self, *, task_status: anyio.abc.TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
        bound = await self.setup()
        task_status.started(bound)
        await self.serve()

    async def setup(self) -> str:
        """Load the draft model (when lazy) and bind; returns the bound endpoint (also ``self.endpoint``)."""
        if self.proposer is None and self._load is not None:
            self.proposer, self.vocab_size, self.vocab_id = await anyio.to_thread.run_sync(self._load)
            self.draft_step_ms = await anyio.to_thread.run_sync(self.profile)
        if self._sock is None:
            self._ctx = zmq.asyncio.Context()
            self._sock, self.endpoint = bind_router(
                self._ctx, self.endpoint, handover=True, max_msg_bytes=AGENT_MAX_MSG_BYTES
            )
        return self.endpoint

    async def serve(self) -> None:
        ctx, sock = self._ctx, self._sock
        try:
            while True:
                latest = await self._latest_rounds(sock)
                for peer, frames in latest.items():
                    reply = await self._handle(frames)
                    try:
                        await sock.send_multipart([peer, *encode(reply)], flags=zmq.NOBLOCK)
                    except zmq.ZMQError as e:  # the verifier left (or stopped reading): its reply is moot
                        self.num_unsent += 1
                        log.debug("draft reply %s not sent: %s", reply.request_id, e)
        finally:
            with anyio.CancelScope(shield=True):
                sock.close(linger=0)
                ctx.term()
                self._ctx = self._sock = None

    async def _latest_rounds(self, sock: zmq.asyncio.Socket) -> dict[bytes, list[bytes]]:
        """The newest message of each peer among those waiting: a verifier that gave up on a round has
        already sent the next, so older ones are skipped unanswered (it drops late replies anyway)."""
        peer, *frames = await sock.recv_multipart()
        latest = {peer: frames}
        while True:
            try:
                peer, *frames = await sock.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return latest
            latest[peer] = frames

    async def _handle(self, frames: list[bytes]) -> DraftReply | ErrorReply:
        try:
            msg, _ = decode(frames)
        except WireError as e:
            return ErrorReply(request_id=e.request_id, code=e.code, message=str(e))
        if not isinstance(msg, DraftPropose):
            return ErrorReply(
                request_id=msg.request_id, code=ErrorCode.INVALID_REQUEST, message="expected DraftPropose"
            )
        if msg.vocab_size and msg.vocab_size != self.vocab_size:
            return ErrorReply(
                request_id=msg.request_id,
                code=ErrorCode.INVALID_REQUEST,
                message=f"vocabulary of {msg.vocab_size} tokens, the draft model's has {self.vocab_size}",
                param="vocab_size",
            )
        try:
            drafts = await anyio.to_thread.run_sync(self._propose, msg)
        except Exception as e:  # a bad item (e.g. a token id outside the vocabulary) must not end the loop
            log.warning("draft round %s failed: %s", msg.request_id, e)
            return ErrorReply(request_id=msg.request_id, code=ErrorCode.INVALID_REQUEST, message=str(e)[:200])
        self.num_rounds += 1
        return DraftReply(request_id=msg.request_id, drafts=drafts, vocab_size=self.vocab_size)

    def profile(self, num_spec_tokens: int = 4) -> float:
        """Milliseconds per drafted token of one steady-state round (the context grown by one token, then
        ``num_spec_tokens`` draft steps), on a made-up request: what the control plane's cost model prices a
        draft step at (controlplane/spec_cost.py)."""
        context = [(7 * i + 3) % self.vocab_size for i in range(32)]
        self.proposer.propose([DraftRequest("zoo-profile", context, num_spec_tokens, GREEDY)])  # its prefill
        context.append(11 % self.vocab_size)
        start = time.perf_counter()
        self.proposer.propose([DraftRequest("zoo-profile", context, num_spec_tokens, GREEDY)])
        elapsed_s = time.perf_counter() - start
        self.proposer.drop(["zoo-profile"])
        return 1e3 * elapsed_s / num_spec_tokens

    def _propose(self, msg: DraftPropose) -> dict[str, list[int]]:
        self.proposer.drop(msg.drop_req_ids)
        for item in msg.items:
            if any(not 0 <= t < self.vocab_size for t in item.token_ids) or not 1 <= item.num_spec_tokens <= 32:
                raise ValueError(f"{item.req_id}: token id outside the vocabulary or num_spec_tokens not in 1..32")
        wants = [DraftRequest(i.req_id, i.token_ids, i.num_spec_tokens, GREEDY) for i in msg.items if i.token_ids]
        return {req_id: d.token_ids for req_id, d in self.proposer.propose(wants).items()}


def load_draft_proposer(
    model: str | None,
    dtype: str = "float32",
    device: str = "cpu",
    num_threads: int | None = None,
    num_blocks: int = 1024,
    block_size: int = 16,
) -> tuple[Any, int, str]:
    """A draft model from a checkpoint (None: the default model): ``(proposer, vocab_size, vocab_id)``."""
    from backends.checkpoint import load_checkpoint
    from backends.torch import TorchModelRunner
    from backends.torch.draft_proposer import DraftModelProposer
    from engine.spec.vocab_id import vocab_id

    checkpoint = load_checkpoint(model)
    runner = TorchModelRunner(checkpoint, dtype=dtype, device=device, num_threads=num_threads, progress=False)
    proposer = DraftModelProposer(
        runner,
        runner.config.vocab_size,
        num_blocks=num_blocks,
        block_size=block_size,
        num_threads=num_threads,
        sample_drafts=False,
    )
    return proposer, checkpoint.tokenizer.vocab_size, vocab_id(checkpoint.tokenizer)
