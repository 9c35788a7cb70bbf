"""What every long-running actor process does the same way: log to stderr, stop cleanly on a signal."""

from __future__ import annotations

import logging
import signal
import sys

import anyio

log = logging.getLogger(__name__)


def configure_logging() -> None:
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(levelname)s %(message)s")


async def stop_on_signal(scope: anyio.CancelScope) -> None:
    """Cancel ``scope`` at the first SIGINT or SIGTERM (run it in the task group whose scope it is)."""
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for signum in signals:
            log.info("%s: shutting down", signal.Signals(signum).name)
            scope.cancel()
            return
