"""RemoteKV: what executes the REMOTE tier's moves for an engine (the agent's data plane does,
agent/kv_remote_io.py). The engine stays sans-IO: it hands the moves of each step to the mover, before the
runner sees the step, and the mover reports back through the scheduler's ``remote_*`` verbs.

    LLMEngine.start_step: schedule() ─► mover.swap_out(moves)  read these device blocks now (async send after)
                                        mover.swap_in(moves)   write fetched KV into these device blocks now
                                        mover.fetch(fetches)   ask peers for KV back (async)
                                        mover.drop(drops)      peers (and the mover) may forget these
                          ─► runner.execute(batch)
    later, the mover (on the engine's thread): scheduler.remote_stored / remote_fetched / remote_failed
"""

from __future__ import annotations

from typing import Protocol

from engine.batch import RemoteFetch, RemoteMove
from engine.kv.remote_tier import RemoteDrop


class RemoteKV(Protocol):
    def swap_out(self, moves: list[RemoteMove]) -> None:
        """Read each move's device blocks now (they are free after this call); ship them asynchronously and
        report ``remote_stored`` or ``remote_failed``. Must not raise for one bad move: report it failed."""
        ...

    def swap_in(self, moves: list[RemoteMove]) -> None:
        """Write each request's fetched KV into its device blocks now (it was reported ``remote_fetched``)."""
        ...

    def fetch(self, fetches: list[RemoteFetch]) -> None:
        """Ask peers for the KV back; report ``remote_fetched`` (bytes kept until ``swap_in``) or ``remote_failed``."""
        ...

    def drop(self, drops: list[RemoteDrop]) -> None:
        """The requests no longer need their remote KV: forget fetched bytes, tell the peers."""
        ...
