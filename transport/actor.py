"""A small actor runtime on anyio: bounded mailboxes, supervised loops, clean shutdown.

An actor is a thin shell: its loops receive (from a socket or a mailbox), dispatch to synchronous core
code, and send (to a mailbox). It is started with ``await tg.start(actor.run)``; ``run`` reports what
the actor binds (an address, or the actor itself) through ``task_status.started`` once it is ready::

    actor.run ─ setup() ─► task_status.started(value) ─► loops() in one task group ─► (cancel / error)
                                                                                     └─ cleanup() shielded

Supervision is anyio's: the first loop that raises cancels its siblings and the error propagates to
whoever started the actor. There are no fire-and-forget tasks: every loop lives in the actor's group.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

import anyio
from anyio.abc import TaskStatus
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

T = TypeVar("T")

CLEANUP_TIMEOUT_S = 5.0


class MailboxFull(Exception):
    """A bounded mailbox refused an item (the receiver is behind: backpressure)."""


class Mailbox(Generic[T]):
    """A bounded single-consumer queue between tasks of one event loop.

    ``put_nowait`` is for synchronous handlers (raises MailboxFull); ``put`` waits for room.
    """

    def __init__(self, max_size: int) -> None:
        if max_size < 1 or max_size == math.inf:
            raise ValueError(f"a mailbox must be bounded, got max_size={max_size}")
        self.max_size = max_size
        self._send: MemoryObjectSendStream[T]
        self._receive: MemoryObjectReceiveStream[T]
        self._send, self._receive = anyio.create_memory_object_stream[T](max_size)

    def put_nowait(self, item: T) -> None:
        try:
            self._send.send_nowait(item)
        except anyio.WouldBlock:
            raise MailboxFull(f"mailbox full ({self.max_size} items)") from None

    async def put(self, item: T) -> None:
        await self._send.send(item)

    async def get(self) -> T:
        return await self._receive.receive()

    def get_nowait(self) -> T:
        """Raises anyio.WouldBlock when empty."""
        return self._receive.receive_nowait()

    def drain(self, limit: int) -> list[T]:
        """Up to ``limit`` items that are already queued (never waits)."""
        items: list[T] = []
        while len(items) < limit:
            try:
                items.append(self._receive.receive_nowait())
            except anyio.WouldBlock:
                break
        return items

    def __len__(self) -> int:
        return self._receive.statistics().current_buffer_used

    def close(self) -> None:
        self._send.close()
        self._receive.close()


class Actor:
    """Base of every actor: override ``setup``, ``loops`` and ``cleanup``; start with ``tg.start(actor.run)``."""

    def __init__(self) -> None:
        self._scope: anyio.CancelScope | None = None

    async def setup(self) -> Any:
        """Acquire resources (bind sockets, build state); the return value is what ``run`` reports started."""
        return self

    def loops(self) -> Sequence[Callable[[], Awaitable[None]]]:
        """The actor's long-running loops, run together in one task group."""
        return ()

    async def cleanup(self) -> None:
        """Release resources; runs shielded (bounded by CLEANUP_TIMEOUT_S) whatever ended the actor."""

    async def run(self, *, task_status: TaskStatus[Any] = anyio.TASK_STATUS_IGNORED) -> None:
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                started = await self.setup()
                async with anyio.create_task_group() as tg:
                    for loop in self.loops():
                        tg.start_soon(loop, name=f"{type(self).__name__}.{getattr(loop, '__name__', 'loop')}")
                    task_status.started(started)
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(CLEANUP_TIMEOUT_S):
                await self.cleanup()

    def stop(self) -> None:
        """Cancel the actor's loops (its ``run`` returns after cleanup). Safe before start and after end."""
        if self._scope is not None:
            self._scope.cancel()
