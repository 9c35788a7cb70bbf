"""Batches on disk, so a restarted gateway resumes them (``zoo controlplane --files-dir``; gateway/batch_runner.py).

    DIR/batches/batch_<id>.json      the batch's state, rewritten (atomically) at each change of status
    DIR/batches/batch_<id>.results   one line per request answered:  b"1" or b"0" (2xx or not) + its output line

The results file is appended as each request finishes and is the truth about what is done: a resumed batch
recounts its completed and failed requests and its usage from it, runs only the requests it lacks, and its output
and error files are written from it at the end (then it is removed). A torn last line (a crash while writing it)
is skipped, so that request runs again. The input file is the file store's (gateway/file_store.py), on disk too.
"""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import msgspec

from controlplane.gateway.batches import TERMINAL, Batch, add_usage
from controlplane.gateway.file_store import write_atomic

log = logging.getLogger(__name__)

_BATCH_ID = re.compile(r"batch_[0-9a-f]{32}")


class _Answered(msgspec.Struct):
    custom_id: str
    response: dict | None = None


class BatchJournal:
    def __init__(self, directory: str | os.PathLike) -> None:
        self.directory = Path(directory) / "batches"
        self.directory.mkdir(parents=True, exist_ok=True)

    def save(self, batch: Batch) -> None:
        write_atomic(self.directory / f"{batch.id}.json", msgspec.json.encode(batch))

    def record(self, batch_id: str, ok: bool, line: bytes) -> None:
        """A request's output line (ending in a newline), once it is answered."""
        with open(self.directory / f"{batch_id}.results", "ab") as f:
            f.write((b"1" if ok else b"0") + line)

    def finished(self, batch_id: str) -> None:
        """The batch is over and its files are written: its results are in them."""
        (self.directory / f"{batch_id}.results").unlink(missing_ok=True)

    def drop(self, batch_id: str) -> None:
        """The batch is forgotten (dropped from the runner's bounds)."""
        self.finished(batch_id)
        (self.directory / f"{batch_id}.json").unlink(missing_ok=True)

    def load(self) -> list[tuple[Batch, dict[str, tuple[bool, bytes]]]]:
        """Every batch on disk, oldest first, each with the requests its results file says are answered (custom_id
        -> (2xx, output line)); its counts and usage recounted from them when it had not finished."""
        batches = []
        for path in self.directory.glob("batch_*.json"):
            try:
                batch = msgspec.json.decode(path.read_bytes(), type=Batch)
            except (OSError, msgspec.MsgspecError):
                log.warning("batches: skipping the unreadable record %s", path)
                continue
            if not _BATCH_ID.fullmatch(batch.id) or path.stem != batch.id:
                log.warning("batches: skipping %s (its id is not its name)", path)
                continue
            batches.append(batch)
        out = []
        for batch in sorted(batches, key=lambda b: (b.created_at, b.id)):
            done = self._answered(batch.id)
            if batch.status not in TERMINAL:  # its journal is the truth about what it answered
                batch.completed = batch.failed = 0
                batch.usage = dict.fromkeys(batch.usage, 0)
                for ok, line in done.values():
                    if ok:
                        batch.completed += 1
                        add_usage(batch, (msgspec.json.decode(line, type=_Answered).response or {}).get("body"))
                    else:
                        batch.failed += 1
            out.append((batch, done))
        return out

    def _answered(self, batch_id: str) -> dict[str, tuple[bool, bytes]]:
        path = self.directory / f"{batch_id}.results"
        try:
            text = path.read_bytes()
        except FileNotFoundError:
            return {}
        done: dict[str, tuple[bool, bytes]] = {}
        for raw in text.splitlines(keepends=True):
            if len(raw) < 2 or raw[:1] not in (b"0", b"1") or not raw.endswith(b"\n"):
                continue  # a torn line: that request runs again
            try:
                answered = msgspec.json.decode(raw[1:], type=_Answered)
            except msgspec.MsgspecError:
                continue
            done[answered.custom_id] = (raw[:1] == b"1", raw[1:])
        return done
