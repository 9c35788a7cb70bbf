"""The fixed bins of a node's decoders, counted by a length or a time: the control plane's histogram of their
decode lengths in steps (NodeView.decode_steps_hist) and the node's own of their slack in milliseconds
(LoadReport.decode_slack_hist: engine/decode_slack.py) share them, so the router reads either the same way
(controlplane/router/decode_steps.py).

The edges are the integers ceil(2 ** (k / 4)): every value up to 8 has its own bin, then four bins per doubling, up
to 65,536; values of 65,536 or more are in the last bin (never counted by the router), values below 1 in the first.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterable

EDGES: tuple[float, ...] = tuple(float(e) for e in sorted({math.ceil(2 ** (k / 4)) for k in range(65)}))
NUM_BINS = len(EDGES)  # bin b < NUM_BINS - 1: EDGES[b] <= n < EDGES[b + 1]; the last: n >= EDGES[-1]
NO_DECODERS: tuple[int, ...] = ()  # NodeView.decode_steps_hist of a node with no decoder the control plane knows of


def bin_of(num_steps: float) -> int:
    """The bin of a decoder of ``num_steps`` decode steps (or milliseconds; below 1: the first bin)."""
    return bisect_right(EDGES, num_steps) - 1 if num_steps >= 1 else 0


def histogram(steps: Iterable[float]) -> tuple[int, ...]:
    """Decoders of these decode steps (or milliseconds) counted per bin (``NO_DECODERS`` for none)."""
    hist = [0] * NUM_BINS
    for n in steps:
        hist[bin_of(n)] += 1
    return tuple(hist) if any(hist) else NO_DECODERS
