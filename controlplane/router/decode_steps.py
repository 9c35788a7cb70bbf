"""The decode lengths of a node's running decoders as a fixed histogram, and the count below a length.

Decode protection by count (RouterConfig.slo_tpot_harm_count) asks how many of a node's decoders a prompt's
prefill pushes over the TPOT target. A decoder of ``n`` decode steps (``max_tokens - 1``, at least 1) that runs at
the node's predicted step ``s`` meets a TPOT target ``T`` with ``n * (T - s)`` seconds to spare, so the decoders a
prefill of ``X`` seconds (after a backlog of ``B`` seconds) pushes over are those with

    B / (T - s) <= n < (B + X) / (T - s)

which is ``below(hi) - below(lo)``: a difference of counts of decoders shorter than a length. The control plane
keeps each node's decoders as counts per bin of ``EDGES`` (engine/decode_bins.py; NodeView.decode_steps_hist), and the
router reads the cumulative counts (``cumulative``): below(x) is exact at every edge and interpolated linearly in
between. The edges are the integers ceil(2 ** (k / 4)): every length up to 8 has its own bin, then four bins per
doubling, up to 65,536; the decoders of 65,536 steps or more are in the last bin and never counted (they can
absorb any prompt's prefill).

The same floats on every path: ``below`` here (the scalar reference), ``pushed_over_columns`` (hardware_aware's
numpy pass) and the compiled kernel (policies/cost_kernel.py) find the same bin (``bisect_right``; np.searchsorted;
a table of each integer's bin, the edges being integers) and then do the same arithmetic in the same order.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Sequence
from itertools import accumulate

import numpy as np

from engine.decode_bins import EDGES, NO_DECODERS, NUM_BINS, bin_of, histogram

__all__ = ["EDGES", "NO_DECODERS", "NUM_BINS", "SLACK_UNIT_S", "below", "bin_of", "cumulative", "histogram",
           "pushed_over"]  # fmt: skip

# RouterConfig.slo_tpot_harm_reported: the nodes' own histograms count their decoders by the delay each still
# absorbs, in milliseconds (NodeView.decode_slack_hist, engine/decode_slack.py): ``pushed_over`` reads them with
# this as ``spare_s``, a prompt pushing over those with backlog_s <= slack < backlog_s + own_s
SLACK_UNIT_S = 1e-3


def cumulative(hist: Sequence[int]) -> tuple[float, ...]:
    """The decoders shorter than each edge: ``NUM_BINS`` floats, c[j] = sum(hist[:j]) (all 0.0 for an empty
    ``hist``)."""
    if not hist:
        return _ZEROS
    return (0.0, *map(float, accumulate(hist[: NUM_BINS - 1])))


def below(cum: Sequence[float], x: float) -> float:
    """The decoders shorter than ``x`` decode steps, from ``cum`` (``cumulative``): exact at the edges, linear in
    between; 0.0 below the first edge, ``cum[-1]`` from the last (or for a NaN ``x``)."""
    j = bisect_right(EDGES, x) - 1 if x == x else NUM_BINS - 1
    if j < 0:
        return 0.0
    if j >= NUM_BINS - 1:
        return cum[NUM_BINS - 1]
    lo_edge = EDGES[j]
    return cum[j] + (cum[j + 1] - cum[j]) * ((x - lo_edge) / (EDGES[j + 1] - lo_edge))


def pushed_over(cum: Sequence[float], backlog_s: float, own_s: float, spare_s: float) -> float:
    """The decoders a prefill of ``own_s`` seconds after ``backlog_s`` pushes over the TPOT target, where each
    decode step has ``spare_s`` (= target - predicted step) to spare: below(hi) - below(lo); 0.0 where no step has
    time to spare (``spare_s`` <= 0 or NaN: every decoder misses already)."""
    if not spare_s > 0.0:
        return 0.0
    return below(cum, (backlog_s + own_s) / spare_s) - below(cum, backlog_s / spare_s)


def pushed_over_columns(cum: np.ndarray, backlog_s: np.ndarray, own_s: np.ndarray, spare_s: np.ndarray) -> np.ndarray:
    """``pushed_over`` of each node at once (hardware_aware's numpy path): ``cum`` float64 [NUM_BINS, n], node i's
    cumulative counts in column i; the same floats as ``pushed_over`` node by node. Writes ``spare_s``."""
    none = np.logical_not(np.greater(spare_s, 0.0))  # no time to spare (or NaN): none pushed
    np.copyto(spare_s, math.inf, where=none)  # (no division by 0 on the way)
    hi = np.add(backlog_s, own_s)
    hi /= spare_s
    pushed = _below_columns(cum, hi)
    pushed -= _below_columns(cum, np.divide(backlog_s, spare_s))
    np.copyto(pushed, 0.0, where=none)
    return pushed


def _below_columns(cum: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``below`` of each node (column i of ``cum``) at ``x[i]``: the bin by np.searchsorted (a NaN sorts last, as
    bisect_right places it), then ``below``'s arithmetic in its order."""
    j = np.searchsorted(_EDGE_ARRAY, x, side="right") - 1
    inner = np.clip(j, 0, NUM_BINS - 2)
    nodes = np.arange(cum.shape[1])
    under = cum[inner, nodes]
    lo_edge = _EDGE_ARRAY[inner]
    out = np.subtract(x, lo_edge)
    out /= _EDGE_ARRAY[inner + 1] - lo_edge
    out *= cum[inner + 1, nodes] - under
    out += under
    np.copyto(out, 0.0, where=j < 0)
    np.copyto(out, cum[NUM_BINS - 1], where=j >= NUM_BINS - 1)
    return out


_ZEROS = (0.0,) * NUM_BINS
_EDGE_ARRAY = np.array(EDGES)
