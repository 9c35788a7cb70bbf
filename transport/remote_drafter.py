"""RemoteProposer: drafts from a draft agent on another node, with a deadline (engine/spec/proposer.py).

The verifier's engine thread calls ``propose`` synchronously; this class owns one DEALER socket (used
from that thread only) to the draft agent's ROUTER (agent/draft_server.py)::

    verifier engine thread                              draft agent (its own process, its own GPU)
      DraftPropose(round n, items, drop_req_ids) ──────►  draft model: k greedy steps per request
      poll <= timeout_s  ◄──────────────────────────────  DraftReply(round n, drafts)
      late / other-round replies are read and dropped

A reply later than ``timeout_s`` (a slow, dead or restarted drafter) gives no drafts: the step decodes
plainly and the request never stalls; zmq reconnects by itself when the drafter comes back. Drafts are
greedy (deterministic), so verification is exact whatever the request's sampling. The whole context is
sent each round (simple and stateless on the wire; the drafter keeps its KV and recomputes only what
changed).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterable

import zmq

from engine.spec.proposer import Draft, DraftRequest
from transport.codec import WireError, decode, encode
from transport.messages import DraftItem, DraftPropose, DraftReply, ErrorReply
from transport.sockets import connect_dealer


class DrafterUnavailableError(ConnectionError):
    """The draft agent did not answer the pairing check in time."""


class RemoteProposer:
    name = "remote"

    def __init__(self, endpoint: str, timeout_s: float = 0.5) -> None:
        self.endpoint = endpoint
        self.timeout_s = timeout_s
        self._ctx = zmq.Context()
        self._sock = connect_dealer(self._ctx, endpoint)
        self._rounds = itertools.count(1)
        self._to_drop: list[str] = []
        self._live: set[str] = set()  # requests the drafter may hold state for (proposed, not yet dropped)
        self.num_timeouts = 0
        self.num_rounds = 0

    def pair(self, vocab_size: int, timeout_s: float = 30.0) -> int:
        """Check the drafter answers and shares the vocabulary; returns its vocabulary size. Raises
        DrafterUnavailableError, or ValueError when it refuses the pair."""
        reply = self._round(DraftPropose(vocab_size=vocab_size), timeout_s)
        if reply is None:
            raise DrafterUnavailableError(f"draft agent at {self.endpoint} did not answer in {timeout_s:g} s")
        if isinstance(reply, ErrorReply):
            raise ValueError(f"draft agent at {self.endpoint} refused the pair: {reply.message}")
        return reply.vocab_size

    def propose(self, requests: list[DraftRequest]) -> dict[str, Draft]:
        items = [DraftItem(r.req_id, list(r.token_ids), r.num_spec_tokens) for r in requests]
        self._live.update(r.req_id for r in requests)
        drop, self._to_drop = self._to_drop, []
        self.num_rounds += 1
        reply = self._round(DraftPropose(items=items, drop_req_ids=drop), self.timeout_s)
        if not isinstance(reply, DraftReply):
            self.num_timeouts += reply is None
            self._to_drop = drop + self._to_drop  # tell it next time
            return {}
        wanted = {r.req_id: r.num_spec_tokens for r in requests}
        return {
            req_id: Draft(list(ids[: wanted[req_id]]))
            for req_id, ids in reply.drafts.items()
            if req_id in wanted and ids
        }

    def drop(self, req_ids: Iterable[str]) -> None:
        ids = list(req_ids)
        self._live.difference_update(ids)
        self._to_drop.extend(ids)

    def close(self, linger_ms: int = 0) -> None:
        """Close the socket. With ``linger_ms`` > 0 (the node stops drafting here, the drafter lives on), the
        drafter is first told to forget every request it may still hold (its KV), best effort."""
        forget = sorted(self._live | set(self._to_drop))
        if linger_ms > 0 and forget:
            try:
                self._sock.send_multipart(encode(DraftPropose(drop_req_ids=forget)), flags=zmq.NOBLOCK)
            except zmq.ZMQError:
                linger_ms = 0
        self._sock.close(linger=linger_ms)
        self._ctx.term()

    def _round(self, msg: DraftPropose, timeout_s: float) -> DraftReply | ErrorReply | None:
        """Send one round and wait for its reply (others are dropped); None past the deadline."""
        msg.request_id = str(next(self._rounds))
        msg.sent_ns = time.monotonic_ns()
        try:
            self._sock.send_multipart(encode(msg), flags=zmq.NOBLOCK)
        except zmq.Again:
            return None  # not connected (yet): no drafts this step
        deadline = time.monotonic() + timeout_s
        while (left_ms := (deadline - time.monotonic()) * 1e3) > 0:
            if not self._sock.poll(max(1, int(left_ms)), zmq.POLLIN):
                break
            frames = self._sock.recv_multipart()
            try:
                reply, _ = decode(frames)
            except WireError:
                continue
            if reply.request_id == msg.request_id and isinstance(reply, (DraftReply, ErrorReply)):
                return reply
        return None
