"""Background responses on disk while they run, so a gateway restarted before one ended runs it again (``zoo
controlplane --files-dir``; gateway/background_responses.py runs them, gateway/responses_routes.py resumes them).

    DIR/background/bg_<digest>.json   {"owner", "response_id", "created_at", "body", "traffic_class", "tenant",
                                       "attempts"}: written when a background response is accepted, removed once it
                                       ends (completed, incomplete, failed, cancelled, deleted), and kept when the
                                       gateway stops first (the drain's time ran out, or a crash)

A restarted gateway reads the request body again, under the same response id and creation time, and runs it from
the start (a client polling ``GET /v1/responses/{id}`` sees it queued, then ended, as if nothing happened; a streamed
one's events from before the restart are gone, so its stream cannot be resumed). A response is run at most
``MAX_ATTEMPTS`` times: past that it is kept as failed, saying why. Files are named by the SHA-256 of the owner and
response id (as gateway/chat_completion_journal.py names its). A file that does not decode, or whose name is not its
owner's and id's digest, is logged and dropped. A write that fails (a full disk) is logged and counted
(``num_errors``); the response runs on, in memory only.
"""

from __future__ import annotations

import logging
import os
import time

import msgspec

from controlplane.gateway.file_store import write_atomic
from controlplane.gateway.record_dir import RecordDir, owned_name

log = logging.getLogger(__name__)

PREFIX = "bg_"
MAX_ATTEMPTS = 3  # runs of one response, its first included: a request that keeps outliving gateways fails then


class BackgroundRecord(msgspec.Struct, kw_only=True):
    owner: str | None
    response_id: str
    created_at: int
    body: str  # the request's JSON body, as sent
    traffic_class: str | None = None  # the x-zoo-class header it came with
    tenant: str | None = None  # its API key's tenant
    attempts: int = 1  # runs begun, this one included
    saved_ns: int = 0  # when it was accepted: the order load returns them in


def record_name(owner: str | None, response_id: str) -> str:
    return owned_name(PREFIX, owner, response_id)


class BackgroundJournal(RecordDir):
    def __init__(self, directory: str | os.PathLike) -> None:
        super().__init__(directory, "background", PREFIX, ".json")

    def save(self, record: BackgroundRecord) -> None:
        """Write (or rewrite) a running response's record."""
        if not record.saved_ns:
            record = msgspec.structs.replace(record, saved_ns=time.time_ns())
        name = record_name(record.owner, record.response_id)
        try:
            write_atomic(self.path(name), msgspec.json.encode(record))
        except OSError as e:
            self.failed(name, e)

    def forget(self, owner: str | None, response_id: str) -> None:
        """The response ended: its record goes."""
        self.drop(record_name(owner, response_id))

    def load(self) -> list[BackgroundRecord]:
        """The records of responses that were running when the gateway stopped, oldest first."""
        records = []
        for path in self.paths():
            try:
                record = msgspec.json.decode(path.read_bytes(), type=BackgroundRecord)
            except (OSError, msgspec.MsgspecError) as e:
                log.warning("background responses: dropping the unreadable record %s: %s", path, e)
                self.drop(path.stem)
                continue
            if record_name(record.owner, record.response_id) != path.stem:
                log.warning("background responses: dropping %s (its name is not its owner's and id's)", path)
                self.drop(path.stem)
                continue
            records.append(record)
        return sorted(records, key=lambda r: (r.saved_ns, r.response_id))
