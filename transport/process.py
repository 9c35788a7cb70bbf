"""What every long-running actor process does the same way: log to stderr, stop cleanly on a signal; and
how a parent stops the actor processes it started."""

from __future__ import annotations

import logging
import signal
import subprocess
import sys
from collections.abc import Iterable

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


def stop_processes(procs: Iterable[subprocess.Popen], timeout_s: float = 10.0) -> None:
    """SIGTERM every process still running (a clean shutdown: agents send NodeLeave), then wait for each;
    SIGKILL one that outlives ``timeout_s``."""
    procs = list(procs)
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait(timeout=timeout_s)
