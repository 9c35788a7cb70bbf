"""When the ZeroMQ client sends a refused request again (``AsyncZooClient(max_retries=N)``): sans-IO.

Only a refusal that says "not now" is retried, and only before the request produced anything, so a retry can never
repeat output: ``overloaded`` (admission control, the node's queue) and ``no_node`` (no node can take it now, or the
control plane is draining for a restart: zoo/controlplane_shutdown.py). Every other refusal (a bad parameter, an
unknown model, a prompt too long) is the request's own and raises at once; a failure mid-stream is the control
plane's to resume (it moves the request to another node) and raises from the stream.

The wait is the openai SDK's rule (openai-python 3.63.0, ``_base_client.py`` ``_calculate_retry_timeout``): the
refusal's own retry-after when it names one above 0 and at most ``MAX_RETRY_AFTER_S``, else 0.5 s doubling per retry
up to 8 s, less up to a quarter at random (jitter, so refused clients do not come back together). The SDK retries
twice by default; this client, whose refusals used to raise at once, retries only when asked (``max_retries=0`` by
default).
"""

from __future__ import annotations

import random

from transport.messages import ErrorCode

RETRIED_CODES = frozenset({ErrorCode.OVERLOADED, ErrorCode.NO_NODE})
INITIAL_RETRY_DELAY_S = 0.5
MAX_RETRY_DELAY_S = 8.0
MAX_RETRY_AFTER_S = 120.0  # a longer retry-after is not waited for: the backoff applies instead


def retried(code: ErrorCode) -> bool:
    """Whether a refusal with this code is sent again (when retries are left)."""
    return code in RETRIED_CODES


def retry_delay_s(num_retries_done: int, retry_after_s: float | None, rng: random.Random | None = None) -> float:
    """How long to wait before retry number ``num_retries_done + 1``."""
    if retry_after_s is not None and 0 < retry_after_s <= MAX_RETRY_AFTER_S:  # a NaN is not
        return retry_after_s
    delay_s = min(INITIAL_RETRY_DELAY_S * 2.0**num_retries_done, MAX_RETRY_DELAY_S)
    return delay_s * (1 - 0.25 * (rng or random).random())
