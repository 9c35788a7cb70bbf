"""The draft agent: a draft model behind a ROUTER socket, proposing for verifiers on other nodes.

The seed's weak-GPU-drafts-for-a-strong-GPU pattern: this process runs on the weak node (an L4, or here a
CPU process with few threads) and answers each ``DraftPropose`` with greedy drafts from its
``DraftModelProposer`` (its own paged KV per request, rolled back to what the verifier accepted). One
socket, one owner task: the actor reads, the draft model runs in a worker thread, the actor replies.
A malformed or unexpected message gets an ErrorReply and the loop goes on.
"""

from __future__ import annotations

import logging
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
    """proposer: a DraftModelProposer built with ``sample_drafts=False``; vocab_size: its vocabulary."""

    def __init__(self, proposer: Any, vocab_size: int, endpoint: str = "tcp://127.0.0.1:0") -> None:
        self.proposer = proposer
        self.vocab_size = vocab_size
        self.endpoint = endpoint
        self.num_rounds = 0

    async def run(self, *, task_status: anyio.abc.TaskStatus = anyio.TASK_STATUS_IGNORED) -> None:
        ctx = zmq.asyncio.Context()
        sock, bound = bind_router(ctx, self.endpoint, handover=True, max_msg_bytes=AGENT_MAX_MSG_BYTES)
        task_status.started(bound)
        try:
            while True:
                latest = await self._latest_rounds(sock)
                for peer, frames in latest.items():
                    reply = await self._handle(frames)
                    await sock.send_multipart([peer, *encode(reply)])
        finally:
            with anyio.CancelScope(shield=True):
                sock.close(linger=0)
                ctx.term()

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

    def _propose(self, msg: DraftPropose) -> dict[str, list[int]]:
        self.proposer.drop(msg.drop_req_ids)
        for item in msg.items:
            if any(not 0 <= t < self.vocab_size for t in item.token_ids) or not 1 <= item.num_spec_tokens <= 32:
                raise ValueError(f"{item.req_id}: token id outside the vocabulary or num_spec_tokens not in 1..32")
        wants = [DraftRequest(i.req_id, i.token_ids, i.num_spec_tokens, GREEDY) for i in msg.items if i.token_ids]
        return {req_id: d.token_ids for req_id, d in self.proposer.propose(wants).items()}
