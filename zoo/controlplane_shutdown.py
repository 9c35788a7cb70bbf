"""How `zoo controlplane` stops at a signal: vLLM's ``--shutdown-timeout`` semantics (vLLM PR #36666, "allowing
in-flight requests to finish"), for the control plane.

    SIGTERM ─► drain (ControlPlane.start_drain): every new request refused, HTTP 503 + Retry-After + Connection: close
               (gateway/shutdown_gate.py; /health says "draining", 503, so a readiness probe takes the replica out of
               its Service), a ZeroMQ client's an ErrorReply (no_node, retry_after_s); batches send nothing new
               (gateway/batch_runner.py); what is in flight runs on
            ─► every request finished, or ``--shutdown-timeout`` seconds passed, or a second signal (or SIGINT)
            ─► what is left is failed: an HTTP stream ends with an SSE error event, a ZeroMQ client gets an ErrorReply
               (flushed before the sockets close, at most SHUTDOWN_FLUSH_S for the gateway to write them)
            ─► stop

``--shutdown-timeout 0`` (the default, as vLLM's) skips the wait: requests in flight are failed at once, still
refusing new ones while their errors go out. In flight means the control plane's requests (HTTP, ZeroMQ and batch
alike: ``ControlPlane.requests``), its open HTTP streams, and the HTTP requests the gateway is answering. A batch run
with ``--files-dir`` resumes what the drain left in the next process; the agents stay up and join it.
"""

from __future__ import annotations

import logging
import signal
import time
from collections.abc import Callable

import anyio

log = logging.getLogger(__name__)

SHUTDOWN_FLUSH_S = 1.0  # at most this long for the gateway to write its streams' last (error) events
DRAIN_POLL_S = 0.05  # how often the drain looks whether everything in flight has finished


def idle(cp, gateways: list) -> bool:
    """Nothing in flight: no request the control plane serves (HTTP, ZeroMQ, batch), no open HTTP stream, no HTTP
    request being answered (an HTTP stream is all three at once)."""
    return not cp.requests and not cp.local_streams and not any(g.count for g in gateways)


async def stop_controlplane_on_signal(
    cp, scope: anyio.CancelScope, shutdown_timeout_s: float = 0.0, gateways: list | None = None
) -> None:
    """At SIGTERM drain for at most ``shutdown_timeout_s`` (module docstring), at SIGINT or a second signal stop at
    once; then fail what is left and cancel ``scope``. ``gateways``: the gateways' ``HttpInFlight`` counters."""
    gateways = gateways if gateways is not None else []
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        signum = await anext(aiter(signals))
        cp.start_drain()
        name = signal.Signals(signum).name
        if signum == signal.SIGTERM and shutdown_timeout_s > 0 and not idle(cp, gateways):
            log.info(
                "SIGTERM: draining: %d requests in flight may finish within %.0f s, new ones are refused "
                "(a second signal stops at once)",
                len(cp.requests),
                shutdown_timeout_s,
            )
            started_s = time.monotonic()
            why = await _drain(lambda: idle(cp, gateways), signals, shutdown_timeout_s)
            took_s, left = time.monotonic() - started_s, len(cp.requests)
            log.info("drain %s after %.1f s, %d requests still in flight: stopping", why, took_s, left)
        else:
            log.info("%s: shutting down (%d requests in flight)", name, len(cp.requests))
        cp.shut_down_requests()
        with anyio.move_on_after(SHUTDOWN_FLUSH_S):
            while cp.local_streams or any(g.count for g in gateways):  # the gateway writes their errors, then closes
                await anyio.sleep(0.01)
            await anyio.sleep(0.1)  # and the gateway writes those error events on its next turns
        scope.cancel()


async def _drain(idle: Callable[[], bool], signals, timeout_s: float) -> str:
    """Wait until ``idle()``, a second signal or ``timeout_s``; which one ended it: "done", "cut short", "timed out"."""
    why = "timed out"
    with anyio.move_on_after(timeout_s):
        async with anyio.create_task_group() as tg:

            async def until_idle() -> None:
                nonlocal why
                while not idle():
                    await anyio.sleep(DRAIN_POLL_S)
                why = "done"
                tg.cancel_scope.cancel()

            async def until_signal() -> None:
                nonlocal why
                log.info("%s: stopping the drain", signal.Signals(await anext(aiter(signals))).name)
                why = "cut short"
                tg.cancel_scope.cancel()

            tg.start_soon(until_idle)
            tg.start_soon(until_signal)
    return why
