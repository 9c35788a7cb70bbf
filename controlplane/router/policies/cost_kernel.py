"""hardware_aware's decision as one compiled loop over a NodeTable's rows (numba), prefix credit included.

The numpy path (``HardwareAwarePolicy.choose``) makes ~13 passes over the table's columns (~27 with SLO triage
and decode protection on, their default), each a numpy
call with ~1 µs of fixed cost, and re-scores the prefix holders in Python (~1 µs each). This kernel does the
same arithmetic in one loop per row, in the same order of floating-point operations, so every cost is the
same float and the choice the same node (tests/controlplane/router/test_cost_kernel.py checks both, bit for
bit, on random tables). Compiled without fastmath: no reassociation, no fused multiply-add.

What it reads, ``values`` float64 [num_columns, n] (NodeTable.values, C order; the row layout of
``NodeRows.derive`` of node_rows.py, checked by the tests)::

    row 0 COL_MAX_PROMPT   2 COL_INV_RATE   3 COL_BASE_S   4 COL_STEP_S   5 COL_BACKLOG_S
        6 COL_CHUNK_S      7 COL_HEADROOM   8 COL_LORA_LOAD_S   9 COL_DECODERS   10 COL_FLOOR_S
       11 COL_DECODE_INV   12.. COL_CUM (NUM_BINS rows: the decoders shorter than each edge, router/decode_steps.py)

Per node i, in this order (a bracket: only when that knob is non-zero, as the numpy path skips the pass;
slo_ttft and slo_tpot are the request class's SLOs, else the router's)::

    c  = inv_rate * own + base_s                              own = max(prompt, 1)
    c += lora_load_s                          a LoRA request, and the node does not hold the adapter
    miss = c > slo_ttft                                                 [ttft_penalty or triage_penalty]
    doomed = floor_miss and floor > slo_tpot         (slo_tpot_floor_miss: it misses TPOT at any load)
    c += ttft_penalty      if miss or doomed  [ttft_penalty]
    c += max(c0 - slo_ttft, 0) * late_weight   [late_weight]   (c0: c before the penalty; max as np.maximum)
    c += min((slo_ttft - inv_rate * own) * pack_weight, ttft_penalty)   if not (miss or doomed)   [pack_weight]
                                                                  (bin packing; min as np.minimum)
         (pack_needs_tpot and t > slo_tpot, t below: min(slo_ttft * pack_weight, ttft_penalty) instead)
    c += triage_penalty    if miss and base_s <= slo_ttft   [triage_penalty]      (SLO triage)
                           (when fewer than spare_below * n nodes have inv_rate * own <= slo_ttft:
                            if miss and inv_rate * own <= slo_ttft instead)
    t  = min(backlog_s * (1 / steps), chunk_s) + step_s                 [output_weight or tpot_penalty]
    c += tpot_penalty      if t > slo_tpot    [tpot_penalty]
    c += t * output_weight                    [output_weight]
                           (excess_only: max(t - slo_tpot, 0) * output_weight; max as np.maximum)
    h  = min((inv_rate * own + backlog_s) * (1 / steps), chunk_s) + step_s                [harm_penalty]
                           (harm_decoders: decode_inv instead of 1 / steps where decode_inv > 0)
    c += harm_penalty      if h > slo_tpot and decoders > 0   [harm_penalty]  (decode protection)
                           (harm_triage: and step_s <= slo_tpot: decodes already over it are not protected)
                           (harm_count, instead of the two lines above: c += harm_penalty * (below(hi) - below(lo)),
                            spare = slo_tpot - step_s, hi = (backlog_s + inv_rate * own) / spare, lo = backlog_s /
                            spare, 0 where spare is not > 0; below: router/decode_steps.py's, the bin from a table;
                            harm_cap_s != 0: that charge is at most harm_cap_s, as np.minimum; harm_reported: spare =
                            SLACK_UNIT_S, the COL_CUM rows being the nodes' slack histograms)
    c += kv_penalty        if headroom < need [kv_penalty]
    c  = inf               if max_prompt < prompt
    then, only when sacrifice_s != 0 and every node's miss or doomed was True (a lost cause; sacrifice_s = weight *
    slo_ttft), a second pass over the nodes that can take the prompt (sacrifice):
    c += (least inv_rate / inv_rate) * sacrifice_s    (least as np.min: a NaN wins; x / 0 as numpy: inf, NaN)
         (sacrifice_max_ttft != 0: 1.0 * sacrifice_s instead where the node's TTFT, inv_rate * own + base_s
          (+ lora_load_s) as computed above, is > sacrifice_max_ttft: charged as the fastest node; and
          sacrifice_max_rate_ratio != 0: 1.0 where least inv_rate / inv_rate > it: not the slowest tier)
    cost[i] = c;  winner = first least c (numpy's argmin: the first NaN if there is one); none if inf
    (a long prompt, sacrifice_s != 0 and long_s != 0 and the least inv_rate * own > long_s, long_s =
     slo_sacrifice_long_share * slo_ttft: miss is True on every node, so it is a lost cause; the prefix credit
     lifts a holder's charges only where its uncached tokens at the least inv_rate are within long_s too)

(min as np.minimum: a NaN on either side wins.) Then the prefix credit of the candidates the prefix index
matched, exactly as ``HardwareAwarePolicy._credit_cached_prefix`` does it: a holder is skipped when its cost
less (own * inv_rate + most_penalties_s) is above the least cost, most_penalties_s = ttft_penalty +
triage_penalty + harm_penalty + kv_penalty (summed in that order); else its saving is the cached tokens'
prefill, the TTFT penalty when the cached prompt meets the TTFT SLO it was charged at (the class's, else the
router's; ``router_slo_ttft_s`` in ``params``) where the whole one did not (not on a doomed node, which keeps it,
its sacrifice charge and no packing charge), with it the triage penalty when
base_s <= that SLO, less bin packing's charge min(slack * pack_weight, ttft_penalty) when slack = that SLO -
own * inv_rate (that SLO when pack_needs_tpot and t > slo_tpot) is > 0 (pack_weight non-zero), the harm penalty
when the node decodes and h with the uncached tokens only is within the class's (else the router's) TPOT SLO
where h was not (there min is Python's min(a, b): b only when b < a, as the numpy path's scalar re-score), and
(harm_count: the charge less the charge for the uncached tokens alone, each capped as charged where harm_cap_s
!= 0), the KV penalty when the uncached part fits (a node harm_triage spared is never lifted: its h with the uncached
tokens is at least its step, over the target); sacrifice's charge goes with the TTFT penalty (its factor computed
again as in the second pass), and sacrifice_s is in most_penalties_s (after triage_penalty); the winner is the
least corrected cost, smallest position on a tie. (late_weight: the saving also gains late_weight * max(TTFT -
SLO, 0) less the same with the cached prompt, TTFT = own * inv_rate + base_s, base_s with the adapter's load, after
the TTFT block; the skip's bound adds 2 * late_weight * the holder's cost, above what that can lift.)

Selection: numba is imported on the first ``CostKernel`` (importing it costs ~0.3 s, so a process that
never builds a hardware_aware policy does not pay it); if it is missing or fails to import or compile,
``compiled_kernel()`` returns None, says why in the log, and the policy keeps its numpy path. The machine
code is cached on disk (``cache=True``: next to this file in __pycache__, else numba's user cache
directory); where no cache directory is writable it is compiled uncached, once per process.

hardware_aware's hot path: the per-node terms (1/rate, the prompt-independent part of TTFT, the decode step, the
backlog's prefill time, a chunk's time, headroom, an adapter's load time) live in a NodeTable, one row per node,
derived when the registry logs the node's new view (router/node_changes.py: on a report, a routed, first token or
finished request) rather than at the decision; a decision checks the rows against its snapshot and then costs every
node in this loop, the prefix holders' credit included (a holder whose cost less the most it could save is above
the least cost is skipped). Without numba the decision is ``HardwareAwarePolicy.choose``'s ~13 vectorised numpy
passes (SLO triage adds 4 and decode protection 10) in the scalar formula's order (the same choice as the old
decision, bench/hardware_aware_baseline.py, checked by tests), plus a scalar re-score of the few prefix holders that
could still win. Tables are kept per snapshot group (a subgroup such as the LoRA-capable nodes keeps its own,
incremental). Tried and measured slower on the numpy path (numpy 2.4, 1,024 nodes): stacking columns into 2-D
blocks so one call does two or three passes (a (k, 1) broadcast operand costs more than k 1-D calls), and adding
penalties with ``where=`` masks instead of ``mask * penalty``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import numpy as np

from controlplane.router.decode_steps import EDGES, NUM_BINS, SLACK_UNIT_S, bin_of
from controlplane.router.policies.node_table import NodeTable
from controlplane.router.policy import RouteRequest
from controlplane.router.prefix_index import PrefixIndex
from controlplane.router.router_config import RouterConfig

log = logging.getLogger(__name__)

# NodeRows.derive's row layout (node_rows.py; hardware_aware.py's _COL_*; tests check they agree)
COL_MAX_PROMPT = 0
COL_INV_RATE = 2
COL_BASE_S = 3
COL_STEP_S = 4
COL_BACKLOG_S = 5
COL_CHUNK_S = 6
COL_HEADROOM = 7
COL_LORA_LOAD_S = 8
COL_DECODERS = 9
COL_FLOOR_S = 10
COL_DECODE_INV = 11
COL_CUM = 12
NUM_COLUMNS = COL_CUM + NUM_BINS
LAST_CUM = NUM_COLUMNS - 1
EDGE_VALUES = np.array(EDGES)  # global arrays: numba compiles them in as constants
LAST_EDGE = EDGES[-1]
# the bin of each integer below the last edge (the edges are integers); uint8: 64 KiB, compiled in as a constant
BIN_OF_INT = np.array([bin_of(m) for m in range(int(LAST_EDGE))], dtype=np.uint8)
NUM_PARAMS = 29  # the ``params`` tuple, all floats (one tuple: ~0.5 µs cheaper to pass than 29 arguments)


def _least(a: np.ndarray, n: int) -> float:
    """np.min of a[:n] (n > 0): the least, or NaN if any is NaN (once NaN, it stays NaN)."""
    x = a[0]
    for i in range(1, n):
        y = a[i]
        x = y if y < x or y != y else x
    return x


def least_cost_index(
    values: np.ndarray,  # float64 [NUM_COLUMNS, n]
    cost: np.ndarray,  # float64 [>= n], out: each node's cost before the prefix credit
    is_tagged: np.ndarray,  # bool [>= n], all False; used as scratch and left all False
    tagged: np.ndarray,  # int64 [k]: positions of the nodes holding the request's adapter
    cand: np.ndarray,  # int64 [>= num_cand]: positions of the prefix index's candidates
    cand_cached: np.ndarray,  # int64 [>= num_cand]: prompt tokens the index says each one holds
    num_cand: int,
    params: tuple[float, ...],  # see CostKernel.least_cost
) -> int:
    """Position of the node of least cost (see the module docstring), or -1 when no node can take the
    prompt. Plain Python that numba compiles; ``least_cost_index(...)`` itself runs it uncompiled."""
    (own, slo_ttft_s, ttft_penalty_s, inv_steps, slo_tpot_s, tpot_penalty_s, output_weight, need, kv_penalty_s,
     num_prompt_tokens, has_lora, router_slo_ttft_s, triage_penalty_s, harm_penalty_s, spare_below,
     excess_only, pack_weight, pack_needs_tpot, sacrifice_s, sacrifice_max_ttft_s, sacrifice_max_rate_ratio,
     tpot_floor_miss, harm_triage, harm_decoders, harm_count, harm_cap_s, harm_reported,
     late_weight, long_s) = params  # fmt: skip
    n = values.shape[1]
    max_prompt, inv_rate, base = values[COL_MAX_PROMPT], values[COL_INV_RATE], values[COL_BASE_S]
    step, backlog, chunk = values[COL_STEP_S], values[COL_BACKLOG_S], values[COL_CHUNK_S]
    headroom, lora_load, decoders = values[COL_HEADROOM], values[COL_LORA_LOAD_S], values[COL_DECODERS]
    floor, decode_inv = values[COL_FLOOR_S], values[COL_DECODE_INV]
    by_decoders = harm_decoders != 0.0  # slo_tpot_harm_decoders: the harm spread over the node's decoders' steps
    by_count = harm_count != 0.0  # slo_tpot_harm_count: the penalty per decoder pushed over the TPOT target
    capped = harm_cap_s != 0.0  # slo_tpot_harm_count_cap_s: at most this per node
    reported = harm_reported != 0.0  # slo_tpot_harm_reported: COL_CUM holds the nodes' slack histograms
    triage = harm_triage != 0.0  # slo_tpot_harm_triage: decodes already over the TPOT target are not protected
    late_on = late_weight != 0.0  # slo_ttft_late_weight: a TTFT miss priced by how late it is
    floor_miss = tpot_floor_miss != 0.0  # a node whose fastest decode step misses the TPOT target: charged as a miss
    lora = has_lora != 0.0
    for k in range(tagged.shape[0]):
        is_tagged[tagged[k]] = True
    spare = False  # SLO triage spares the capable nodes when few could serve the prompt in time even empty
    if spare_below != 0.0 and triage_penalty_s != 0.0:
        capable = 0
        for i in range(n):
            if inv_rate[i] * own <= slo_ttft_s:
                capable += 1
        spare = capable < spare_below * n
    excess = excess_only != 0.0
    gate = pack_needs_tpot != 0.0
    lost = sacrifice_s != 0.0  # sacrifice: stays True while every node misses the TTFT target (a lost cause)
    forced = False  # a long prompt (long_s): charged as missing the target on every node, hence a lost cause
    fastest_inv_rate = math.nan  # np.min of inv_rate, found once: here for the long-prompt test, or by sacrifice
    have_fastest = False
    if lost and long_s != 0.0 and n > 0:
        fastest_inv_rate = _least(inv_rate, n)
        have_fastest = True
        forced = fastest_inv_rate * own > long_s  # a NaN: not
    bounded = sacrifice_max_ttft_s != 0.0  # sacrifice favours only the nodes whose TTFT is within this bound
    tiered = sacrifice_max_rate_ratio != 0.0  # and only those whose rate / the fastest's is at most this ratio
    # Each knob's term is a select adding 0.0 where the numpy path skips the pass or the mask is False
    # (c + 0.0 is c), so the loop has no data-dependent branch and compiles to SIMD; the costs are the same.
    for i in range(n):
        own_s = inv_rate[i] * own
        c = own_s + base[i]
        c += lora_load[i] if lora and not is_tagged[i] else 0.0
        miss = c > slo_ttft_s or forced
        missing = miss or (floor_miss and floor[i] > slo_tpot_s)
        lost &= missing
        late = c - slo_ttft_s  # np.maximum(c - slo, 0.0) * late_weight (a NaN wins)
        late = (late if late > 0.0 or late != late else 0.0) * late_weight
        c += ttft_penalty_s if missing else 0.0
        c += late if late_on else 0.0
        t = backlog[i] * inv_steps  # the predicted TPOT (bin packing's gate and the TPOT term below)
        chunk_s = chunk[i]
        t = chunk_s if chunk_s < t or chunk_s != chunk_s else t  # np.minimum: a NaN on either side wins
        step_s = step[i]
        t += step_s
        # bin packing: the slack of a node that meets the TTFT target (pack_needs_tpot: all of it if it misses TPOT)
        x = (slo_ttft_s if gate and t > slo_tpot_s else slo_ttft_s - own_s) * pack_weight
        x = ttft_penalty_s if ttft_penalty_s < x else x  # np.minimum(x, penalty): a NaN x wins
        c += x if pack_weight != 0.0 and not missing else 0.0
        c += triage_penalty_s if miss and (own_s if spare else base[i]) <= slo_ttft_s else 0.0  # SLO triage
        c += tpot_penalty_s if t > slo_tpot_s else 0.0
        x = t - slo_tpot_s  # tpot_excess_only: np.maximum(t - slo, 0.0) (a NaN wins)
        x = x if x > 0.0 or x != x else 0.0
        c += (x if excess else t) * output_weight if output_weight != 0.0 else 0.0  # t * 0: NaN for t = inf
        harm_inv = decode_inv[i] if by_decoders and decode_inv[i] > 0.0 else inv_steps  # the decodes' steps
        h = (inv_rate[i] * own + backlog[i]) * harm_inv  # decode protection: the running decodes' TPOT
        h = chunk_s if chunk_s < h or chunk_s != chunk_s else h
        h += step_s
        protected = decoders[i] > 0.0 and (not triage or step_s <= slo_tpot_s)  # harm triage: within the target
        c += harm_penalty_s if h > slo_tpot_s and protected and not by_count else 0.0
        done = c + (kv_penalty_s if headroom[i] < need else 0.0)
        done = math.inf if max_prompt[i] < num_prompt_tokens else done
        cost[i] = c if by_count else done  # by count: the loop below adds the count's charge, then the KV term
    if by_count:  # decode protection: per decoder pushed over the TPOT target (its own loop: the call in it would
        for i in range(n):  # keep the loop above from compiling to SIMD)
            spare_s = SLACK_UNIT_S if reported else slo_tpot_s - step[i]
            h = harm_penalty_s * _pushed_over(values, i, backlog[i], inv_rate[i] * own, spare_s)
            c = cost[i] + (harm_cap_s if capped and harm_cap_s < h else h)  # np.minimum: a NaN h wins
            c += kv_penalty_s if headroom[i] < need else 0.0
            cost[i] = math.inf if max_prompt[i] < num_prompt_tokens else c
    if lost and n > 0:  # sacrifice: a lost cause costs a node the more, the more capable it is
        if not have_fastest:
            fastest_inv_rate = _least(inv_rate, n)
        for i in range(n):
            x = inv_rate[i]  # x / 0.0 as numpy: inf (0 / 0: NaN), where numba would raise ZeroDivisionError
            x = fastest_inv_rate / x if x != 0.0 else fastest_inv_rate * math.inf
            if tiered:  # not the slowest tier: the fastest's charge
                x = 1.0 if x > sacrifice_max_rate_ratio else x
            if bounded:  # the node's TTFT, as the costing loop computed it: beyond the bound, the fastest's charge
                ttft_s = inv_rate[i] * own + base[i]
                ttft_s += lora_load[i] if lora and not is_tagged[i] else 0.0
                x = 1.0 if ttft_s > sacrifice_max_ttft_s else x
            if not max_prompt[i] < num_prompt_tokens:
                cost[i] += x * sacrifice_s
    else:
        sacrifice_s = 0.0  # not a lost cause: nothing charged, nothing for the credit to lift
    best = math.inf
    best_i = 0
    for i in range(n):  # np.argmin: the first least cost, or the first NaN
        c = cost[i]
        if not c >= best:
            best = c
            best_i = i
            if c != c:
                break
    if best != best or best == math.inf:
        num_cand = 0  # no credit beats a NaN; none makes an impossible node possible
        if best == math.inf:
            best_i = -1  # no node can take the prompt
    # the prefix credit: HardwareAwarePolicy._credit_cached_prefix, the same operations in the same order
    most_penalties_s = ttft_penalty_s + triage_penalty_s + sacrifice_s + harm_penalty_s + kv_penalty_s
    for k in range(num_cand):
        i = cand[k]
        cost_s = cost[i]
        rate_inv = inv_rate[i]
        most_s = most_penalties_s
        if by_count:  # the harm lifted is at most the penalty for each decoder counted there
            most_s = harm_penalty_s * values[LAST_CUM, i]
            most_s = ttft_penalty_s + triage_penalty_s + sacrifice_s + most_s + kv_penalty_s
        if late_on and cost_s < math.inf:  # lateness lifted <= weight * its TTFT <= its cost (2x: rounding)
            most_s += 2.0 * late_weight * cost_s
        if cost_s - (own * rate_inv + most_s) > best:
            continue  # cannot win (an impossible node neither)
        cached = float(cand_cached[k])
        if cached > num_prompt_tokens:
            cached = num_prompt_tokens
        base_s = base[i]
        if lora and not is_tagged[i]:
            base_s += lora_load[i]
        cached_own = num_prompt_tokens - cached
        if cached_own < 1.0:
            cached_own = 1.0
        saved_s = (own - cached_own) * rate_inv
        whole_miss = own * rate_inv + base_s > router_slo_ttft_s or forced
        cached_long = forced and cached_own * fastest_inv_rate > long_s  # still long, cached: still charged
        if whole_miss and cached_own * rate_inv + base_s <= router_slo_ttft_s and not cached_long:
            doomed = floor_miss and floor[i] > slo_tpot_s  # still charged as a miss, and not packed
            saved_s += 0.0 if doomed else ttft_penalty_s
            if (own * rate_inv if spare else base[i]) <= router_slo_ttft_s:  # the triage penalty, if charged
                saved_s += triage_penalty_s
            if sacrifice_s != 0.0 and not doomed:  # no longer a lost cause there: sacrifice's charge, as added above
                x = fastest_inv_rate / rate_inv if rate_inv != 0.0 else fastest_inv_rate * math.inf
                if tiered:
                    x = 1.0 if x > sacrifice_max_rate_ratio else x
                if bounded:
                    ttft_s = rate_inv * own + base[i]
                    ttft_s += lora_load[i] if lora and not is_tagged[i] else 0.0
                    x = 1.0 if ttft_s > sacrifice_max_ttft_s else x
                saved_s += x * sacrifice_s
            slack_s = router_slo_ttft_s - own * rate_inv  # it meets the target now: bin packing charges its slack
            if gate:  # as charged above: all of the slack where the node misses the TPOT target
                t = backlog[i] * inv_steps
                t = chunk[i] if chunk[i] < t or chunk[i] != chunk[i] else t
                if t + step[i] > slo_tpot_s:
                    slack_s = router_slo_ttft_s
            if pack_weight != 0.0 and slack_s > 0.0 and not doomed:
                pack_s = slack_s * pack_weight
                saved_s -= ttft_penalty_s if ttft_penalty_s < pack_s else pack_s  # <= the penalty lifted
        if late_on:  # the lateness the cached tokens save
            late = own * rate_inv + base_s - router_slo_ttft_s
            cached_late = cached_own * rate_inv + base_s - router_slo_ttft_s
            late = late if not late < 0.0 else 0.0  # Python's max(late, 0.0), as the numpy path's credit
            cached_late = cached_late if not cached_late < 0.0 else 0.0
            saved_s += late * late_weight - cached_late * late_weight
        if harm_penalty_s != 0.0 and by_count:  # fewer decoders pushed over by the uncached tokens alone
            spare_s = SLACK_UNIT_S if reported else slo_tpot_s - step[i]
            pushed = _pushed_over(values, i, backlog[i], rate_inv * own, spare_s)
            cached_pushed = _pushed_over(values, i, backlog[i], rate_inv * cached_own, spare_s)
            if capped:  # the capped charges, as charged above (Python's min(a, cap): cap only when cap < a)
                h, cached_h = harm_penalty_s * pushed, harm_penalty_s * cached_pushed
                saved_s += (harm_cap_s if harm_cap_s < h else h) - (harm_cap_s if harm_cap_s < cached_h else cached_h)
            else:
                saved_s += harm_penalty_s * (pushed - cached_pushed)
        elif harm_penalty_s != 0.0 and decoders[i] > 0.0:  # fewer prompt tokens to share the decodes' steps
            chunk_s, backlog_s, step_s = chunk[i], backlog[i], step[i]
            harm_inv = decode_inv[i] if by_decoders and decode_inv[i] > 0.0 else inv_steps
            harm_s = (rate_inv * own + backlog_s) * harm_inv
            if chunk_s < harm_s:  # Python's min(a, b), as the numpy path's credit: b only when b < a
                harm_s = chunk_s
            harm_s += step_s
            cached_harm_s = (rate_inv * cached_own + backlog_s) * harm_inv
            if chunk_s < cached_harm_s:
                cached_harm_s = chunk_s
            cached_harm_s += step_s
            if harm_s > slo_tpot_s and cached_harm_s <= slo_tpot_s:
                saved_s += harm_penalty_s
        room = headroom[i]
        if room < need and need - cached <= room:  # short of KV room unless the prefix is cached
            saved_s += kv_penalty_s
        cost_s -= saved_s
        if cost_s < best or (cost_s == best and i < best_i):
            best = cost_s
            best_i = i
    for k in range(tagged.shape[0]):
        is_tagged[tagged[k]] = False
    return best_i


def _pushed_over(values: np.ndarray, i: int, backlog_s: float, own_s: float, spare_s: float) -> float:
    """router/decode_steps.py's ``pushed_over`` for node ``i`` of ``values`` (its COL_CUM rows), the same floats:
    0.0 where ``spare_s`` is not > 0 (no time to spare, or NaN) or the node has no decoder
    below the last edge (every count 0). The bin of 1 <= x < the last edge is ``BIN_OF_INT[int(x)]``: the edges are
    integers, so the edges <= x are those <= its integer part (the same index as ``bisect_right``); x below the
    first edge counts none, and x from the last edge (or NaN, as bisect_right places it) all of them."""
    last = values[LAST_CUM, i]
    if last == 0.0 or not spare_s > 0.0:
        return 0.0
    pushed = 0.0
    for side in range(2):
        x = (backlog_s + own_s) / spare_s if side == 0 else backlog_s / spare_s
        if x < 1.0:  # EDGES[0]
            below = 0.0
        elif x >= LAST_EDGE or x != x:
            below = last
        else:
            j = BIN_OF_INT[int(x)]
            lo_edge, under = EDGE_VALUES[j], values[COL_CUM + j, i]
            below = under + (values[COL_CUM + j + 1, i] - under) * ((x - lo_edge) / (EDGE_VALUES[j + 1] - lo_edge))
        pushed = below if side == 0 else pushed - below
    return pushed


_pushed_over_py = _pushed_over  # the plain functions, which ``_compile`` compiles
_least_py = _least
_HELPER_SIGNATURE = "float64(float64[:, ::1], int64, float64, float64, float64)"
_LEAST_SIGNATURE = "float64(float64[::1], int64)"
_SIGNATURE = (
    "int64(float64[:, ::1], float64[::1], boolean[::1], int64[::1], int64[::1], int64[::1], int64, "
    f"UniTuple(float64, {NUM_PARAMS}))"
)
_compiled: list[Callable | None] = []  # [the compiled kernel or None], filled once per process


def compiled_kernel() -> Callable | None:
    """``least_cost_index`` compiled by numba (once per process, from the disk cache when it is there), or
    None when numba cannot be imported or compile it (logged; the caller keeps its numpy path)."""
    if _compiled:
        return _compiled[0]
    kernel = None
    try:
        import numba
    except Exception as e:  # an ImportError, or numba refusing this numpy
        log.warning("hardware_aware decision: numpy path (numba not importable: %s)", e)
    else:
        kernel = _compile(numba)
    _compiled.append(kernel)
    return kernel


def _compile(numba) -> Callable | None:
    try:
        # the kernel's helpers first: numba resolves the kernel's globals ``_pushed_over`` and ``_least`` when it
        # compiles it, so the module's names are pointed at the compiled helpers (the same floats, from Python too)
        helper, _ = _jit(numba, _pushed_over_py, _HELPER_SIGNATURE)
        least, _ = _jit(numba, _least_py, _LEAST_SIGNATURE)
        globals()["_pushed_over"], globals()["_least"] = helper, least
        kernel, where = _jit(numba, least_cost_index, _SIGNATURE)
    except Exception as e:  # a numba that cannot compile it must not stop the router
        log.warning("hardware_aware decision: numpy path (numba %s failed to compile: %s)", numba.__version__, e)
        return None
    log.info("hardware_aware decision: numba %s kernel (%s)", numba.__version__, where)
    return kernel


def _jit(numba, function: Callable, signature: str) -> tuple[Callable, str]:
    """``function`` compiled for ``signature``, cached on disk where a cache directory is writable."""
    try:
        return numba.njit(signature, cache=True)(function), "cached on disk"
    except RuntimeError as e:  # "cannot cache function ...: no locator available" (nowhere writable)
        if "no locator available" not in str(e):
            raise
        log.info("hardware_aware kernel: no writable cache directory (%s); compiling uncached", e)
        return numba.njit(signature, cache=False)(function), "uncached"


class CostKernel:
    """One policy's buffers around the compiled kernel. ``least_cost(request, table, index)``: the position
    in ``table`` of the node hardware_aware sends ``request`` to, or -1 when no node can take it;
    ``cost[:n]`` then holds every node's cost before the prefix credit (as the numpy path's cost array).
    The buffers only grow: tables of different sizes (a group and its LoRA subgroup) share them."""

    def __init__(self, config: RouterConfig, kernel: Callable) -> None:
        self.config = config
        self._kernel = kernel
        self.cost = np.empty(0)
        self._is_tagged = np.zeros(0, dtype=bool)
        self._no_positions = np.zeros(0, dtype=np.int64)
        self._cand = self._cand_cached = self._cand_view = self._cand_cached_view = None
        self._candidate_room(config.prefix_max_candidates)
        self._static, self._static_12_17, self._static_19_27 = _static_params(config)
        self._warm_up()

    def least_cost(
        self, request: RouteRequest, table: NodeTable, index: PrefixIndex | None, long_ok: bool = True
    ) -> int:
        """The position of the least cost node in ``table`` (-1: none can take the request). ``long_ok``: False
        where the long-prompt test is gated off for this request (RouterConfig.slo_sacrifice_long_vs_late)."""
        n = len(table.nodes)
        if len(self.cost) < n:
            self.cost, self._is_tagged = np.empty(n), np.zeros(n, dtype=bool)
        config = self.config
        num_prompt_tokens, max_tokens, lora_name = request.num_prompt_tokens, request.max_tokens, request.lora_name
        tagged = self._no_positions
        if lora_name is not None:
            positions = table.tagged(lora_name)
            if positions:
                tagged = np.fromiter(positions, np.int64, len(positions))
        num_cand = 0
        if index is not None and request.block_hashes:
            matched = index.match(request.block_hashes, config.prefix_max_candidates)
            if len(matched) > len(self._cand):
                self._candidate_room(len(matched))
            index_of, nodes = table.index_of, table.nodes
            cand, cand_cached = self._cand_view, self._cand_cached_view  # memoryviews: 2x faster to set
            for node_id, num_blocks in matched.items():
                i = index_of.get(node_id)
                if i is not None:
                    cand[num_cand] = i
                    cand_cached[num_cand] = num_blocks * nodes[i].block_size
                    num_cand += 1
        slo_ttft_s = config.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s  # the class's SLO
        slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
        static = self._static
        params = (
            float(max(num_prompt_tokens, 1)),  # own
            float(slo_ttft_s),
            static[0],  # ttft_penalty_s
            1.0 / max(max_tokens - 1, 1),  # inv_steps
            float(slo_tpot_s),
            static[1],  # tpot_penalty_s
            float(config.tpot_weight * min(max_tokens, config.tpot_horizon_tokens)),  # output_weight
            float(num_prompt_tokens + min(max_tokens, config.kv_reserve_output_tokens)),  # need
            static[2],  # kv_penalty_s
            float(num_prompt_tokens),
            0.0 if lora_name is None else 1.0,  # has_lora
            float(slo_ttft_s),  # the prefix credit's SLO: the class's, the one its penalties were charged at
            *self._static_12_17,
            float(config.slo_sacrifice_weight * slo_ttft_s),  # sacrifice_s (charged only for a lost cause)
            *self._static_19_27,
            float(config.slo_sacrifice_long_share * slo_ttft_s) if long_ok else 0.0,  # long_s (0: off)
        )
        return self._kernel(
            table.values, self.cost, self._is_tagged, tagged, self._cand, self._cand_cached, num_cand, params
        )

    def _candidate_room(self, num: int) -> None:
        self._cand, self._cand_cached = np.zeros(num, dtype=np.int64), np.zeros(num, dtype=np.int64)
        self._cand_view, self._cand_cached_view = memoryview(self._cand), memoryview(self._cand_cached)

    def _warm_up(self) -> None:
        """One call on a one-node table, so the first decision runs machine code already loaded."""
        values = np.zeros((NUM_COLUMNS, 1))
        values[COL_MAX_PROMPT, 0] = 1.0
        one = np.zeros(1, dtype=np.int64)
        params = (1.0,) * NUM_PARAMS
        chosen = self._kernel(values, np.empty(1), np.zeros(1, dtype=bool), one, one, one, 1, params)
        if chosen != 0:
            raise RuntimeError(f"hardware_aware kernel: warm-up chose {chosen} of one node")


def long_prompt(columns: np.ndarray, num_tokens: int, slo_ttft_s: float, config: RouterConfig) -> bool:
    """The numpy path's long-prompt test (slo_sacrifice_long_share, with sacrifice on): ``num_tokens``' prefill on
    the decision's fastest node (np.min of the inverse rates: a NaN wins, and then it is not long) above that
    share of the TTFT target, as the kernel tests it."""
    long_s = config.slo_sacrifice_long_share * slo_ttft_s
    if config.slo_sacrifice_weight * slo_ttft_s == 0.0 or long_s == 0.0:
        return False
    return bool(columns[COL_INV_RATE].min() * float(max(num_tokens, 1)) > long_s)


def columns_tpot_s(values, max_tokens: int, out: np.ndarray | None = None) -> np.ndarray:
    """Every node's predicted TPOT from a table's columns (``values``: NodeTable.values or its ``columns``), as the
    numpy path's ``choose`` computes it: step_s + min(backlog_s / max(max_tokens - 1, 1), chunk_s) (np.minimum: a
    NaN on either side wins); into ``out`` where given."""
    tpot = np.multiply(values[COL_BACKLOG_S], 1.0 / max(max_tokens - 1, 1), out)
    np.minimum(tpot, values[COL_CHUNK_S], out=tpot)
    tpot += values[COL_STEP_S]
    return tpot


def row_tpot_s(row, inv_steps: float) -> float:
    """A table row's predicted TPOT, as the numpy path's ``choose`` computes it: min(backlog_s * inv_steps, chunk_s)
    + step_s (np.minimum: a NaN on either side wins)."""
    tpot_s, chunk_s = row[COL_BACKLOG_S] * inv_steps, row[COL_CHUNK_S]
    if chunk_s < tpot_s or chunk_s != chunk_s:
        tpot_s = chunk_s
    return tpot_s + row[COL_STEP_S]


def _static_params(config: RouterConfig) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...]]:
    """The ``params`` that depend on the config alone, made once per kernel (a policy never changes its config):
    positions 2, 5, 8; 12 to 17; 19 to 27 (see CostKernel.least_cost)."""
    return (
        (float(config.slo_ttft_miss_penalty_s), float(config.slo_tpot_miss_penalty_s), float(config.kv_full_penalty_s)),
        (
            float(config.slo_triage_penalty_s),
            float(config.slo_tpot_harm_penalty_s),
            float(config.slo_triage_spare_capable_below),  # spare_below
            1.0 if config.tpot_excess_only else 0.0,  # excess_only
            float(config.slo_pack_weight),  # pack_weight
            1.0 if config.slo_pack_needs_tpot else 0.0,  # pack_needs_tpot
        ),
        (
            float(config.slo_sacrifice_max_ttft_s),  # sacrifice_max_ttft_s (0: no bound)
            float(config.slo_sacrifice_max_rate_ratio),  # sacrifice_max_rate_ratio (0: every node's factor)
            1.0 if config.slo_tpot_floor_miss else 0.0,  # tpot_floor_miss
            1.0 if config.slo_tpot_harm_triage else 0.0,  # harm_triage
            1.0 if config.slo_tpot_harm_decoders else 0.0,  # harm_decoders
            1.0 if config.slo_tpot_harm_count else 0.0,  # harm_count
            float(config.slo_tpot_harm_count_cap_s),  # harm_cap_s (0: no cap)
            1.0 if config.slo_tpot_harm_reported else 0.0,  # harm_reported
            float(config.slo_ttft_late_weight),  # late_weight (0: off)
        ),
    )
