"""VerifierPairing: the agent's event-loop side of a fleet pair (controlplane/spec_pairs.py decides it).

    control plane ──SpecPair(drafter, endpoint)──► handle: the newest order wins (older ones are dropped)
        run(): RemoteProposer(endpoint).pair(vocab) in a worker thread (the drafter answers, same vocabulary)
               ─► EngineThread.set_drafter(proposer): the engine drafts remotely from its next step
    SpecPair(endpoint "") ─► set_drafter(None): back to the node's own proposer or plain decode

A drafter that does not answer the pairing check, or refuses it (another vocabulary), is not used: the node
keeps decoding as it was and the reason is logged; its LoadReports keep saying no drafter, which the
control plane sees. Reuses transport/remote_drafter.py, so a drafter that dies later costs each step at
most ``draft_timeout_s`` until the control plane unpairs (and the adaptive k turns drafting down meanwhile).
"""

from __future__ import annotations

import logging

import anyio
import anyio.to_thread

from engine.spec import SpecDecodeConfig
from transport.messages import SpecPair
from transport.remote_drafter import DrafterUnavailableError, RemoteProposer

log = logging.getLogger(__name__)


class VerifierPairing:
    """thread: the agent's EngineThread; vocab_size: the served model's (checked by the drafter)."""

    def __init__(self, thread, vocab_size: int, draft_timeout_s: float = 0.25, pair_timeout_s: float = 5.0) -> None:
        self.thread = thread
        self.vocab_size = vocab_size
        self.draft_timeout_s = draft_timeout_s
        self.pair_timeout_s = pair_timeout_s
        self._send, self._orders = anyio.create_memory_object_stream[SpecPair](1)
        self.drafter_node_id = ""  # the drafter handed to the engine thread last
        self._endpoint = ""
        self.refused: dict[str, str] = {}  # drafter node id -> why the last pairing check failed

    def handle(self, msg: SpecPair) -> None:
        """From the dispatcher (sync): queue the order, replacing one not yet acted on."""
        try:
            self._send.send_nowait(msg)
        except anyio.WouldBlock:
            self._orders.receive_nowait()
            self._send.send_nowait(msg)

    async def run(self) -> None:
        async for msg in self._orders:
            await self._apply(msg)

    async def _apply(self, msg: SpecPair) -> None:
        if not msg.draft_endpoint:
            if self.drafter_node_id:
                log.info("unpaired from %s: %s", self.drafter_node_id, msg.reason)
                self.thread.set_drafter(None, None, "")
                self.drafter_node_id = self._endpoint = ""
            return
        if (msg.drafter_node_id, msg.draft_endpoint) == (self.drafter_node_id, self._endpoint):
            return  # already drafting there
        proposer = RemoteProposer(msg.draft_endpoint, self.draft_timeout_s)
        try:
            await anyio.to_thread.run_sync(proposer.pair, self.vocab_size, self.pair_timeout_s)
        except (DrafterUnavailableError, ValueError) as e:
            proposer.close()
            self.refused[msg.drafter_node_id] = str(e)
            log.warning("not drafting with %s: %s", msg.drafter_node_id, e)
            return
        spec = SpecDecodeConfig(
            method="remote",
            draft_endpoint=msg.draft_endpoint,
            draft_timeout_s=self.draft_timeout_s,
            num_spec_tokens=max(1, min(msg.num_spec_tokens, 32)),
        )
        log.info("drafting with %s at %s: %s", msg.drafter_node_id, msg.draft_endpoint, msg.reason)
        self.thread.set_drafter(proposer, spec, msg.drafter_node_id)
        self.drafter_node_id, self._endpoint = msg.drafter_node_id, msg.draft_endpoint
