"""DrafterSwitch: the engine thread's side of a fleet pair: which proposer the engine drafts with.

    SpecPair(endpoint) ─► agent: RemoteProposer paired ─► EngineThread.set_drafter ─► switch(): a Speculator
        over the remote proposer replaces the node's own (remembered) from the next step on
    SpecPair("")       ─► switch(None): the node's own speculator again (``--speculative``), or plain decode

Runs on the engine thread only (between steps), so no step ever sees half a switch; requests' drafts of the
step before were consumed by it (the scheduler clears them), so nothing is verified against the old
proposer. The spec-decode totals carry over (counters never go back); ``report`` stamps each LoadReport with
the drafter in use and the acceptance rate measured since the last switch (what the control plane's cost
model reads).
"""

from __future__ import annotations

import logging

from engine.llm_engine import LLMEngine
from engine.spec.speculator import Speculator
from transport.messages import LoadReport

log = logging.getLogger(__name__)

_UNSET = object()


class DrafterSwitch:
    def __init__(self) -> None:
        self.drafter_node_id = ""
        self._own: object = _UNSET  # the node's own speculator (None: it decodes plainly), at the first switch
        self._base_counts = (0, 0)  # (draft tokens, accepted) totals at the last switch
        self.num_switches = 0

    def switch(self, engine: LLMEngine, proposer, spec, drafter_node_id: str) -> None:
        old = engine.speculator
        if self._own is _UNSET:
            self._own = old
        new = self._own if proposer is None else Speculator(proposer, spec, engine.clock)
        if old is not None and new is not None and new is not old:
            new.continue_counts(old.make_stats())
        if old is not None and old is not self._own and old is not new:
            _close(old.proposer)
        engine.speculator = new
        self.drafter_node_id = drafter_node_id if proposer is not None else ""
        stats = new.make_stats() if new is not None else None
        self._base_counts = (stats.num_draft_tokens_total, stats.num_accepted_tokens_total) if stats else (0, 0)
        self.num_switches += 1
        log.info("drafting with %s", self.drafter_node_id or ("the node's own proposer" if new else "nothing"))

    def report(self, report: LoadReport, engine: LLMEngine) -> LoadReport:
        report.spec_drafter = self.drafter_node_id
        speculator = engine.speculator
        if speculator is not None:
            stats = speculator.make_stats()
            drafted = stats.num_draft_tokens_total - self._base_counts[0]
            if drafted > 0:
                report.spec_acceptance_rate = (stats.num_accepted_tokens_total - self._base_counts[1]) / drafted
        return report


def _close(proposer) -> None:
    close = getattr(proposer, "close", None)
    if close is not None:
        try:
            close(linger_ms=100)  # a RemoteProposer tells its drafter to forget this node's requests
        except Exception:  # a socket already gone: nothing left to release
            log.debug("closing the previous proposer failed", exc_info=True)
