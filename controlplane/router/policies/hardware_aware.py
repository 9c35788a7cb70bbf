"""hardware_aware: send each request where it is predicted to meet the SLO, fastest first.

Predictions (node_predictions.py's public functions, so tests and the dashboard can show them; times in
seconds)::

    rate      = node.prefill_tok_per_s                         measured, or before measuring:
              = prefill_mfu * peak_tflops * 1e12 / (2 * params)     prefill is compute-bound, 2 FLOP/param/token
    step(b)   = decode step time with b sequences:
                unmeasured: max(weights_bytes / (bandwidth * decode_bw_eff),      roofline: decode reads
                                b * 2 * params / (peak * prefill_mfu))           every weight once per step
                measured m at batch B: floor + (m - floor) / B * b, floor = min(weight read time, m)
                (the (b+1)/b scaling of the measured step, applied to the part above the weight-read floor,
                which does not grow with the batch)
    backlog   = queued_prefill_tokens + inflight_prefill_tokens          prompt tokens not yet prefilled
    TTFT      = (backlog + max(prompt - cached, 1)) / rate
                + step(decode_batch_size) if a decode batch is running (the current step must end first)
                + the adapter's load time if the request names a LoRA adapter the node does not hold
                  (its measured mean load time, else RouterConfig.lora_load_estimate_s)
    TPOT      = max(step(max(decode_batch_size, num_inflight) + 1), step_mean (tpot_measured_steps: measured))
                + min(backlog / rate / n, prefill_chunk_tokens / rate),   n = max(max_tokens - 1, 1)
                (chunked prefill: while a node has prompts to prefill, every decode step also carries a
                chunk of up to prefill_chunk_tokens; a node's backlog is how hard it is being fed, so it is
                taken as the prefill that will share this request's n decode steps, at most a chunk each)
    headroom  = num_free_device_blocks * block_size - backlog
                - kv_reserve_running_tokens * outstanding requests     (the growth of those already there)
                (-inf while the node has swapped requests: it is already out of KV room)
    wait      = backlog / rate + step(decode_batch_size) if a decode batch is running   (TTFT less the prompt)
    own_s     = max(prompt - cached, 1) / rate                        this prompt's prefill time there
    harm_tpot = TPOT's step term + min((backlog_s + own_s) / n, chunk_s)
                the TPOT of the requests decoding there once this prompt's chunks share their steps
                (slo_tpot_harm_decoders: n = the harmonic mean of their max_tokens - 1 where the control
                 plane knows of decoders there, NodeView.decode_inv_steps)
    cost      = TTFT + tpot_weight * min(max_tokens, tpot_horizon_tokens) * TPOT
                  (tpot_excess_only: * max(TPOT - slo_tpot_s, 0) instead of * TPOT)
                + slo_ttft_miss_penalty_s   if TTFT > slo_ttft_s, or (slo_tpot_floor_miss) floor > slo_tpot_s
                + slo_ttft_late_weight * max(TTFT - slo_ttft_s, 0)      (a miss priced by how late it is; off: 0)
                  (floor: the node's one-sequence decode step, its fastest; such a node is not packed, and
                   counts as missing toward a lost cause; a prefix cache does not lift its charge)
                + slo_triage_penalty_s      if TTFT > slo_ttft_s and wait <= slo_ttft_s        (SLO triage)
                  (when fewer than slo_triage_spare_capable_below * (number of nodes) nodes have
                   own_s <= slo_ttft_s with nothing cached: if TTFT > slo_ttft_s and that holds instead)
                + min(slo_pack_weight * max(slo_ttft_s - whole_s, 0), slo_ttft_miss_penalty_s)
                                            if TTFT <= slo_ttft_s                               (bin packing)
                  whole_s = max(prompt, 1) / rate: the whole prompt's prefill there, cached or not
                  (slo_pack_needs_tpot: whole_s = 0 where TPOT > slo_tpot_s: packing only onto nodes that
                   meet both targets)
                + slo_sacrifice_weight * slo_ttft_s * rate / fastest_rate   if TTFT > slo_ttft_s and the request
                  is a lost cause (TTFT, nothing cached, > slo_ttft_s on every node; fastest_rate: the largest
                  rate among them; the vectorised paths add it last, after the KV term)          (sacrifice)
                  (slo_sacrifice_max_ttft_s non-zero: * 1 instead of * rate / fastest_rate where that TTFT
                   is above it: the sacrifice only favours a node that serves the lost cause within the bound;
                   slo_sacrifice_max_rate_ratio non-zero: * 1 too where rate / fastest_rate is above it;
                   slo_sacrifice_long_share non-zero: a prompt whose prefill on the fastest node is above that
                   share of slo_ttft_s misses everywhere by definition, a lost cause: shortest jobs first;
                   slo_sacrifice_long_vs_late: only if it is longer than the median recent late prompt too)
                + slo_tpot_miss_penalty_s   if TPOT > slo_tpot_s     (1 s by default, see router_config.py)
                + slo_tpot_harm_penalty_s   if decode_batch_size > 0 and harm_tpot > slo_tpot_s
                  (slo_tpot_harm_triage: and TPOT's step term <= slo_tpot_s: decodes already over the target
                   are not protected)
                  (slo_tpot_harm_count, instead: slo_tpot_harm_penalty_s * pushed, pushed = the decoders the
                   control plane knows of there with backlog_s <= n_i * (slo_tpot_s - TPOT's step term) <
                   backlog_s + own_s, n_i their decode steps: router/decode_steps.py)
                + kv_full_penalty_s    if prompt + min(max_tokens, kv_reserve_output_tokens) - cached > headroom
    then (slo_tpot_lost_to_doomed, off): a TPOT lost cause goes to a node that misses TPOT at any load (tpot_lost.py)

SLO triage: a request that misses the TTFT target on a node whose queue is still within it (``wait`` <=
target: the node meets the target for the short prompts to come) pays the triage penalty there, so a request
that would miss everywhere goes to a node that is already late (the least wait among those) instead of
taking the slack of the nodes that still serve within the SLO; a node where it meets the target never pays
it. Decode protection: a prompt whose prefill chunks would push the node's running decodes over the TPOT
target pays the harm penalty there (n, the decode steps they have left, is taken as this request's). Both
were measured on the declared tuning split (scripts/tune_router.py): on the Azure code trace at 80% load
69% of the requests were predicted to miss the TTFT target everywhere and, placed by least TTFT, filled the
queues of the nodes that still met it. When the nodes that could serve a prompt of this size in time even
empty are scarce (fewer than slo_triage_spare_capable_below of them: on the Mooncake trace, only the H100s
prefill its long prompts within the target), triage charges those nodes, late or not, and spares the ones that
could never meet it, so a hopeless long prompt no longer keeps the few capable nodes late (tuning split:
mooncake goodput 0.549 -> 0.614). With tpot_excess_only the TPOT term prices only the TPOT above the target:
decode speed beyond the SLO buys nothing, so L4s and T4s that meet it take work (conv: 0.19/0.33 -> 0.42/0.48
utilisation on the eval split). Bin packing (slo_pack_weight, off by default) prices the slack a node's
prefill speed leaves under the TTFT target for a prompt of this size, on the nodes that meet the target, so
a short prompt that meets it on an L4 does not take an H100 whose speed the long prompts need (the Mooncake
trace: the L4s and T4s stayed nearly idle while the H100s and A100s missed the long prompts). Sacrifice (off by
default) sends a lost cause to the least capable node, not to a fast late one, and slo_sacrifice_max_ttft_s
only to one that still serves it within that bound (router_config.py). Overload mode: while half the placements
of the last overload_window_s seconds went to nodes predicted late, for overload_hold_s seconds, decisions use the
larger triage penalty and sacrifice weight of RouterConfig.in_overload (router/overload.py says why).

Among the nodes predicted to meet the SLO the cost is a predicted latency, so slower nodes take work as
soon as they are the quickest way to meet it; a node predicted to miss it only serves when every node
would. ``cached`` is what the router's prefix index says the node holds of this prompt (0 when
hardware_aware_use_prefix is off). Nodes that can never take the prompt are skipped; a node short of KV
room is only penalised (it would queue or preempt), so it still serves when every node is full.

Hot path (where the per-node terms live, the compiled loop, the numpy path): cost_kernel.py's module docstring.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from operator import attrgetter

import numpy as np

from controlplane.router.decode_steps import NUM_BINS, SLACK_UNIT_S, pushed_over, pushed_over_columns
from controlplane.router.late_prompts import LatePrompts
from controlplane.router.node_changes import NodeChangeLog
from controlplane.router.overload import OverloadDetector
from controlplane.router.policies import tpot_lost
from controlplane.router.policies.cost_kernel import (
    CostKernel,
    columns_tpot_s,
    compiled_kernel,
    long_prompt,
    row_tpot_s,
)
from controlplane.router.policies.cost_reference import late_saved_s
from controlplane.router.policies.node_predictions import lora_cold_load_s
from controlplane.router.policies.node_rows import NodeRows
from controlplane.router.policies.node_table import NodeTable, NodeTables
from controlplane.router.policy import ClusterSnapshot, NodeView, PolicyHooks, RouteRequest
from controlplane.router.prefix_index import PrefixIndex
from controlplane.router.router_config import RouterConfig
from engine.kv.kv_events import AllBlocksCleared, BlockRemoved, BlockStored

_COL_INV_RATE = 2  # s per prompt token
_COL_BASE_S = 3  # queue + current decode step wait
_COL_STEP_S = 4  # decode step with this request added
_COL_BACKLOG_S = 5  # backlog / rate
_COL_CHUNK_S = 6  # prefill_chunk_tokens / rate
_COL_HEADROOM = 7  # KV tokens free for new work
_COL_LORA_LOAD_S = 8  # an adapter's load time there (measured mean, else the estimate)
_COL_DECODERS = 9  # requests decoding there (last report)
_COL_FLOOR_S = 10  # its fastest decode step (one sequence; node_predictions.decode_floor_s)
_COL_DECODE_INV = 11  # 1 / its decoders' decode steps (NodeView.decode_inv_steps; 0.0: none known)
_COL_CUM = 12  # NUM_BINS columns from here: its decoders shorter than each edge (router/decode_steps.py)
_NUM_COLUMNS = _COL_CUM + NUM_BINS


class HardwareAwarePolicy(PolicyHooks):
    name = "hardware_aware"

    def __init__(self, config: RouterConfig, use_kernel: bool = True) -> None:
        """``use_kernel``: decide with the compiled kernel (cost_kernel.py) when numba is there; False, or no
        numba: the numpy passes of ``choose``. ``kernel_name`` says which ("numba" or "numpy")."""
        self.config = config
        self._rows = NodeRows(config)  # each node's table row, derived as the registry logs its new view
        self._derive = self._rows.derive
        self._tables = NodeTables(self._derive, _NUM_COLUMNS, attrgetter("lora_resident"))  # a node's adapters
        self.tpot_lost = tpot_lost.rule_for(config)  # goodput first, where the router or a traffic class turns it on
        self._lost = tpot_lost.keep if self.tpot_lost is None else self.tpot_lost
        self._index = PrefixIndex(config.prefix_max_blocks_per_node) if config.hardware_aware_use_prefix else None
        self.wants_kv_events = self._index is not None and config.hardware_aware_kv_evictions  # evictions correct it
        # else a node's cache once, at its Welcome: what it holds already enters the index
        self.wants_kv_snapshot = self._index is not None and config.hardware_aware_prefix_snapshot
        # registries' change logs whose new views refresh the tables, each with the callback it calls
        self._watched: dict[NodeChangeLog, Callable[[NodeView], None]] = {}
        self._cost = self._tpot = self._add = np.empty(0)  # the numpy path's buffers, made at its first decision
        self._short = self._miss = self._missing = np.empty(0, dtype=bool)
        self._sacrifice = np.empty(0)  # sacrifice's factor per node: rate / fastest_rate, or 1 beyond the bound
        # overload mode (RouterConfig.overload_window_s): the detector, the escalated configuration, and the
        # last decision (request id, node id, time, predicted late) for on_routed to record
        self.overload = None
        self._overload_config = config
        self._placed: tuple[str, str, float, bool] | None = None
        if config.overload_window_s:
            self.overload = OverloadDetector(
                config.overload_window_s,
                config.overload_late_share,
                config.overload_min_placements,
                config.overload_hold_s,
            )
            self._overload_config = config.in_overload()
        # the long-prompt test's gate (RouterConfig.slo_sacrifice_long_vs_late): the recent late prompts' sizes
        self.late_prompts = None
        self._long_ok = True  # this decision's prompt may be long (the gate's answer; True without the gate)
        long_on = config.slo_sacrifice_long_share or config.overload_sacrifice_long_share  # else nothing to gate
        if config.slo_sacrifice_long_vs_late and config.overload_window_s and long_on:  # overload mode's window
            self.late_prompts = LatePrompts(config.overload_window_s, config.overload_min_placements)
        kernel = compiled_kernel() if use_kernel else None
        self.kernel_name = "numpy" if kernel is None else "numba"
        if kernel is not None:
            self._kernel = CostKernel(config, kernel)
            self._kernel_overload = self._kernel
            if self.overload is not None:
                self._kernel_overload = CostKernel(self._overload_config, kernel)
            self.choose = self._choose_compiled  # the decision's implementation, chosen once

    def _choose_compiled(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        """``choose`` in one call of the compiled kernel (cost_kernel.py), prefix credit included: the same
        costs, bit for bit, hence the same node."""
        changes = snapshot.changes
        if changes is not None and changes.log not in self._watched:
            self._watch(changes.log)
        table = self._tables.get(request.model, request.traffic_class, None if changes is None else changes.group)
        table.sync(snapshot.nodes, changes)
        if not table.nodes:
            return None
        overload = self.overload
        if overload is None:
            i = self._kernel.least_cost(request, table, self._index)
            i = self._lost(self.config, request, table, self._kernel.cost, i)
            return None if i < 0 else table.node_ids[i]
        kernel = self._kernel_overload if overload.active(snapshot.now_s) else self._kernel
        late = self.late_prompts  # the long-prompt test's gate (RouterConfig.slo_sacrifice_long_vs_late)
        self._long_ok = long_ok = late is None or late.longer(request.num_prompt_tokens, snapshot.now_s)
        i = kernel.least_cost(request, table, self._index, long_ok)
        i = self._lost(self.config, request, table, kernel.cost, i)
        if i < 0:
            return None
        self._note_placement(request, table, i, snapshot.now_s)
        return table.node_ids[i]

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        """The node of least ``predict_cost_s`` (first in snapshot order on a tie), in ~12 numpy passes over
        the table's columns. Each pass is the operation the scalar formula does, in its order, so the costs
        are the same floats (a penalty ``p`` is added as ``cost + p * mask``: exactly ``cost + p`` or ``cost``).
        """
        changes = snapshot.changes
        if changes is not None and changes.log not in self._watched:
            self._watch(changes.log)
        table = self._tables.get(request.model, request.traffic_class, None if changes is None else changes.group)
        table.sync(snapshot.nodes, changes)
        n = len(table)
        if n == 0:
            return None
        if len(self._cost) != n:
            self._cost, self._tpot, self._add = np.empty(n), np.empty(n), np.empty(n)
            self._short, self._miss = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
            self._missing = np.empty(n, dtype=bool)
            self._sacrifice, self._late = np.empty(n), np.empty(n)
        config = self.config
        overload = self.overload
        if overload is not None and overload.active(snapshot.now_s):
            config = self._overload_config
        late_prompts = self.late_prompts
        self._long_ok = late_prompts is None or late_prompts.longer(request.num_prompt_tokens, snapshot.now_s)
        columns = table.columns
        num_prompt_tokens, max_tokens, lora_name = request.num_prompt_tokens, request.max_tokens, request.lora_name
        add = self._add  # cost = TTFT (+ its SLO penalty), below
        cost = np.multiply(columns[_COL_INV_RATE], float(max(num_prompt_tokens, 1)), self._cost)  # float: faster
        cost += columns[_COL_BASE_S]
        if lora_name is not None:  # a cold adapter load, except on the nodes holding the adapter
            np.copyto(add, columns[_COL_LORA_LOAD_S])
            for i in table.tagged(lora_name):
                add[i] = 0.0
            cost += add
        sacrifice_s = 0.0  # sacrifice: weight * TTFT SLO when the request is a lost cause (misses on every node)
        ttft_terms = config.slo_ttft_miss_penalty_s or config.slo_triage_penalty_s or config.slo_pack_weight
        ttft_terms = ttft_terms or config.slo_ttft_late_weight
        if ttft_terms or config.slo_sacrifice_weight:
            slo_ttft_s = config.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s  # the class's SLO
            miss = np.greater(cost, slo_ttft_s, self._miss)
            if self._long_ok and long_prompt(columns, num_prompt_tokens, slo_ttft_s, config):  # missing everywhere
                miss.fill(True)
            late = None
            if config.slo_ttft_late_weight:  # a miss priced by how late it is (added after the miss penalty)
                late = np.maximum(np.subtract(cost, slo_ttft_s, self._late), 0.0, out=self._late)
                late *= config.slo_ttft_late_weight
            missing = miss  # charged as missing the SLO: the TTFT misses, and the nodes that miss TPOT at any load
            if config.slo_tpot_floor_miss:
                slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
                missing = np.greater(columns[_COL_FLOOR_S], slo_tpot_s, self._missing)
                np.logical_or(miss, missing, missing)
            if config.slo_sacrifice_weight and missing.all():
                sacrifice_s = config.slo_sacrifice_weight * slo_ttft_s
                factor = np.divide(columns[_COL_INV_RATE].min(), columns[_COL_INV_RATE], self._sacrifice)
                if config.slo_sacrifice_max_rate_ratio:  # not the slowest tier: charged as the fastest node
                    np.copyto(factor, 1.0, where=np.greater(factor, config.slo_sacrifice_max_rate_ratio, self._short))
                if config.slo_sacrifice_max_ttft_s:  # beyond the bound: charged as the fastest node
                    over = np.greater(cost, config.slo_sacrifice_max_ttft_s, self._short)
                    np.copyto(factor, 1.0, where=over)
            if config.slo_ttft_miss_penalty_s:
                np.multiply(missing, config.slo_ttft_miss_penalty_s, add)
                cost += add
            if late is not None:
                cost += late
            if config.slo_pack_weight:  # bin packing: the slack of the nodes that meet the target
                np.multiply(columns[_COL_INV_RATE], float(max(num_prompt_tokens, 1)), add)
                np.subtract(slo_ttft_s, add, add)
                if config.slo_pack_needs_tpot:  # a node that misses the TPOT target: charged as if no prefill time
                    tpot = self._predicted_tpot(columns, max_tokens)
                    slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
                    np.copyto(add, slo_ttft_s, where=np.greater(tpot, slo_tpot_s, self._short))
                add *= config.slo_pack_weight
                np.minimum(add, config.slo_ttft_miss_penalty_s, out=add)
                np.copyto(add, 0.0, where=missing)
                cost += add
            if config.slo_triage_penalty_s:  # SLO triage: a miss on a node whose queue still meets the SLO
                capable = None
                if config.slo_triage_spare_capable_below:  # the nodes that could serve it in time empty
                    own_s = np.multiply(columns[_COL_INV_RATE], float(max(num_prompt_tokens, 1)), self._tpot)
                    capable = np.less_equal(own_s, slo_ttft_s, self._short)
                if capable is not None and np.count_nonzero(capable) < config.slo_triage_spare_capable_below * n:
                    np.logical_and(miss, capable, miss)  # they are scarce: charge them, spare the others
                else:
                    np.logical_and(miss, np.less_equal(columns[_COL_BASE_S], slo_ttft_s, self._short), miss)
                np.multiply(miss, config.slo_triage_penalty_s, add)
                cost += add
        # TPOT = step + min(backlog_s / decode steps, chunk_s) (+ its SLO penalty)
        output_weight = config.tpot_weight * min(max_tokens, config.tpot_horizon_tokens)
        if output_weight or config.slo_tpot_miss_penalty_s:
            tpot = self._predicted_tpot(columns, max_tokens)
            if config.slo_tpot_miss_penalty_s:
                slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
                np.multiply(np.greater(tpot, slo_tpot_s, self._miss), config.slo_tpot_miss_penalty_s, add)
                cost += add
            if output_weight:
                if config.tpot_excess_only:  # only the TPOT above the target counts
                    tpot -= config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
                    np.maximum(tpot, 0.0, out=tpot)
                tpot *= output_weight
                cost += tpot
        if config.slo_tpot_harm_penalty_s and config.slo_tpot_harm_count:  # per decoder pushed over the target
            slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
            own_s = np.multiply(columns[_COL_INV_RATE], float(max(num_prompt_tokens, 1)), self._tpot)
            if config.slo_tpot_harm_reported:  # the nodes' slack histograms, in their unit
                spare_s = np.full(len(table), SLACK_UNIT_S)
            else:
                spare_s = np.subtract(slo_tpot_s, columns[_COL_STEP_S])
            pushed = pushed_over_columns(table.values[_COL_CUM:], columns[_COL_BACKLOG_S], own_s, spare_s)
            np.multiply(pushed, config.slo_tpot_harm_penalty_s, add)
            if config.slo_tpot_harm_count_cap_s:  # at most the cap per node (np.minimum: a NaN wins)
                np.minimum(add, config.slo_tpot_harm_count_cap_s, out=add)
            cost += add
        elif config.slo_tpot_harm_penalty_s:  # decode protection: this prompt's chunks push the decodes over the SLO
            slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
            harm = np.multiply(columns[_COL_INV_RATE], float(max(num_prompt_tokens, 1)), self._tpot)
            harm += columns[_COL_BACKLOG_S]
            if config.slo_tpot_harm_decoders:  # over its decoders' steps where it has any, else this request's
                inv_steps = columns[_COL_DECODE_INV]
                np.copyto(add, 1.0 / max(max_tokens - 1, 1))
                np.copyto(add, inv_steps, where=np.greater(inv_steps, 0.0, self._short))
                harm *= add
            else:
                harm *= 1.0 / max(max_tokens - 1, 1)
            np.minimum(harm, columns[_COL_CHUNK_S], out=harm)
            harm += columns[_COL_STEP_S]
            miss = np.greater(harm, slo_tpot_s, self._miss)
            np.logical_and(miss, np.greater(columns[_COL_DECODERS], 0.0, self._short), miss)
            if config.slo_tpot_harm_triage:  # only the decodes that can still meet the target are protected
                np.logical_and(miss, np.less_equal(columns[_COL_STEP_S], slo_tpot_s, self._short), miss)
            np.multiply(miss, config.slo_tpot_harm_penalty_s, add)
            cost += add
        need = num_prompt_tokens + min(max_tokens, config.kv_reserve_output_tokens)
        if config.kv_full_penalty_s:
            np.multiply(np.less(columns[_COL_HEADROOM], float(need), self._short), config.kv_full_penalty_s, add)
            cost += add
        if sacrifice_s:  # a lost cause costs a node the more, the more capable it is (added last, as the kernel)
            np.multiply(self._sacrifice, sacrifice_s, add)
            cost += add
        cannot = table.fits_mask(num_prompt_tokens)
        if cannot is not None:
            np.copyto(cost, math.inf, where=cannot)
        i = int(cost.argmin())
        best = cost.item(i)
        if best == math.inf:
            return None  # no node can take it (a prefix credit never makes an impossible node possible)
        if self._index is not None and request.block_hashes:
            i = self._credit_cached_prefix(request, table, cost, need, i, best, sacrifice_s, config)
        i = self._lost(config, request, table, cost, i)
        if overload is not None:
            self._note_placement(request, table, i, snapshot.now_s)
        return table.node_ids[i]

    def _note_placement(self, request: RouteRequest, table: NodeTable, i: int, now_s: float) -> None:
        """Overload mode: remember whether this decision's node is predicted late for the request (its TTFT there,
        nothing cached, above the request's TTFT target); ``on_routed`` records it once the request is routed
        (a refused placement tried again is recorded once, where it went)."""
        row = table.rows[i]
        ttft_s = row[_COL_INV_RATE] * max(request.num_prompt_tokens, 1) + row[_COL_BASE_S]
        if request.lora_name is not None:
            ttft_s += lora_cold_load_s(table.nodes[i], request.lora_name, self.config)
        slo_ttft_s = self.config.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s
        self._placed = (request.request_id, table.node_ids[i], now_s, ttft_s > slo_ttft_s)

    def _credit_cached_prefix(
        self,
        request: RouteRequest,
        table: NodeTable,
        cost: np.ndarray,
        need: int,
        best_i: int,
        best: float,
        lost_s: float,
        config: RouterConfig,
    ) -> int:
        """The vectorised cost assumed nothing cached; correct the few prefix holders (same formula as
        predict_cost_s): fewer own prefill tokens (maybe under the TTFT SLO now), and KV room needed only
        for the uncached part. (The TTFT SLO here is the one the penalties were charged at: the request class's,
        else the router's.)

        Returns the position of least corrected cost, first on a tie, as ``argmin`` of the corrected costs
        would: ``best_i`` is the first least uncorrected cost (``best`` its value), and a correction only
        lowers a cost, so the winner is ``best_i`` or a corrected holder; nothing is written back. A holder
        whose cost minus the most it could save (its whole prompt's prefill, both penalties) is still above
        ``best`` cannot win and is not re-scored: computed in floats, that bound is <= the corrected cost
        (rounding is monotonic and every term of the saving is <= its term in the bound), so the skip is exact.
        Bin packing's charge on a holder that meets the TTFT target only thanks to its cache is subtracted from
        the saving; it is at most the miss penalty lifted with it, so a saving stays >= 0 (a cost never rises).
        Sacrifice's charge (``lost_s``: weight * SLO for a lost cause, times the factor ``choose`` left in
        ``self._sacrifice``, <= 1) goes with the miss penalty, <= lost_s (bound). ``config``: the one ``choose``
        charged by (overload mode's, when on).
        """
        index_of, nodes, rows = table.index_of, table.nodes, table.rows  # rows: as Python floats, faster to read
        num_prompt_tokens, lora_name = request.num_prompt_tokens, request.lora_name
        own = max(num_prompt_tokens, 1)
        slo_ttft_s, ttft_penalty_s, kv_penalty_s = (
            config.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s,  # the class's, as charged
            config.slo_ttft_miss_penalty_s,
            config.kv_full_penalty_s,
        )
        triage_penalty_s, harm_penalty_s = config.slo_triage_penalty_s, config.slo_tpot_harm_penalty_s
        pack_weight, pack_needs_tpot = config.slo_pack_weight, config.slo_pack_needs_tpot
        harm_count, harm_cap_s = config.slo_tpot_harm_count, config.slo_tpot_harm_count_cap_s
        late_weight = config.slo_ttft_late_weight
        most_penalties_s = ttft_penalty_s + triage_penalty_s + lost_s + harm_penalty_s + kv_penalty_s
        factor = self._sacrifice  # sacrifice's factor per node, as ``choose`` charged it (read only if lost_s)
        slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
        inv_steps = 1.0 / max(request.max_tokens - 1, 1)
        harm_decoders = config.slo_tpot_harm_decoders
        floor_miss = config.slo_tpot_floor_miss  # a node that misses TPOT at any load keeps its miss charges
        forced = bool(lost_s) and self._long_ok and long_prompt(table.columns, own, slo_ttft_s, config)  # as choose
        fastest = table.columns[_COL_INV_RATE].min() if forced else 0.0  # a holder still long when cached: charged
        long_s = config.slo_sacrifice_long_share * slo_ttft_s
        spare = False  # the triage rule ``choose`` charged by: capability (True) or wait
        if triage_penalty_s and config.slo_triage_spare_capable_below:
            capable = np.count_nonzero(np.multiply(table.columns[_COL_INV_RATE], float(own)) <= slo_ttft_s)
            spare = capable < config.slo_triage_spare_capable_below * len(table)
        for node_id, num_blocks in self._index.match(request.block_hashes, config.prefix_max_candidates).items():
            i = index_of.get(node_id)
            if i is None:
                continue
            cost_s = cost.item(i)
            row = rows[i]
            inv_rate = row[_COL_INV_RATE]
            most_s = most_penalties_s
            if harm_count:  # the harm lifted is at most the penalty for each decoder it knows of there
                most_s = ttft_penalty_s + triage_penalty_s + lost_s + harm_penalty_s * row[_LAST_CUM] + kv_penalty_s
            if late_weight and cost_s < math.inf:  # lateness lifted <= weight * its TTFT <= its cost (2x: rounding)
                most_s += 2.0 * late_weight * cost_s
            if cost_s - (own * inv_rate + most_s) > best:  # also skips an impossible node
                continue
            node = nodes[i]
            cached = num_blocks * node.block_size
            if cached > num_prompt_tokens:
                cached = num_prompt_tokens
            base_s = row[_COL_BASE_S]
            if lora_name is not None:
                base_s += lora_cold_load_s(node, lora_name, config)
            cached_own = num_prompt_tokens - cached
            if cached_own < 1:
                cached_own = 1
            saved_s = (own - cached_own) * inv_rate
            whole_miss = own * inv_rate + base_s > slo_ttft_s or forced  # a long prompt: charged as a miss
            still_long = forced and cached_own * fastest > long_s
            if whole_miss and cached_own * inv_rate + base_s <= slo_ttft_s and not still_long:
                doomed = floor_miss and row[_COL_FLOOR_S] > slo_tpot_s  # still charged as a miss, and not packed
                if not doomed:
                    saved_s += ttft_penalty_s
                if (own * inv_rate if spare else row[_COL_BASE_S]) <= slo_ttft_s:  # the triage penalty, if charged
                    saved_s += triage_penalty_s
                if lost_s and not doomed:  # no longer a lost cause there: sacrifice's charge, as ``choose`` added it
                    saved_s += factor.item(i) * lost_s
                if pack_weight and not doomed:  # it meets the target now: bin packing charges its slack
                    slack_s = slo_ttft_s - own * inv_rate
                    if pack_needs_tpot and row_tpot_s(row, inv_steps) > slo_tpot_s:  # as ``choose`` charged it
                        slack_s = slo_ttft_s
                    if slack_s > 0.0:
                        pack_s = slack_s * pack_weight
                        saved_s -= ttft_penalty_s if ttft_penalty_s < pack_s else pack_s  # <= the penalty lifted
            if late_weight:  # the lateness the cached tokens save, as ``choose`` charged it
                saved_s += late_saved_s(own * inv_rate + base_s, cached_own * inv_rate + base_s, slo_ttft_s, config)
            # fewer prompt tokens to share the decodes' steps (a node harm triage spared is not lifted: its cached
            # harm is at least its step, over the target, so the test below fails there)
            if harm_penalty_s and harm_count:  # fewer decoders pushed over by the uncached tokens alone
                backlog_s = row[_COL_BACKLOG_S]
                spare_s = SLACK_UNIT_S if config.slo_tpot_harm_reported else slo_tpot_s - row[_COL_STEP_S]
                cum = row[_COL_CUM:]
                pushed = pushed_over(cum, backlog_s, inv_rate * own, spare_s)
                cached_pushed = pushed_over(cum, backlog_s, inv_rate * cached_own, spare_s)
                if harm_cap_s:  # the capped charges, as ``choose`` charged them
                    cached_s = min(harm_penalty_s * cached_pushed, harm_cap_s)
                    saved_s += min(harm_penalty_s * pushed, harm_cap_s) - cached_s
                else:
                    saved_s += harm_penalty_s * (pushed - cached_pushed)
            elif harm_penalty_s and row[_COL_DECODERS] > 0:
                chunk_s, backlog_s, step_s = row[_COL_CHUNK_S], row[_COL_BACKLOG_S], row[_COL_STEP_S]
                harm_inv = row[_COL_DECODE_INV] if harm_decoders and row[_COL_DECODE_INV] > 0.0 else inv_steps
                harm_s = min((inv_rate * own + backlog_s) * harm_inv, chunk_s) + step_s
                cached_harm_s = min((inv_rate * cached_own + backlog_s) * harm_inv, chunk_s) + step_s
                if harm_s > slo_tpot_s and cached_harm_s <= slo_tpot_s:
                    saved_s += harm_penalty_s
            headroom = row[_COL_HEADROOM]
            if headroom < need and need - cached <= headroom:  # short of KV room unless the prefix is cached
                saved_s += kv_penalty_s
            cost_s -= saved_s
            if cost_s < best or (cost_s == best and i < best_i):
                best, best_i = cost_s, i
        return best_i

    def _watch(self, log: NodeChangeLog) -> None:
        """Derive a node's rows when the registry logs its new view (a report, a routed or finished
        request), between decisions; ``choose`` then finds them done (router/node_changes.py)."""
        tables = self._tables
        self._watched[log] = callback = lambda view: tables.refresh(view, log)
        log.watch(callback)

    def reconfigured(self, config: RouterConfig) -> HardwareAwarePolicy:
        """This policy under ``config`` (a router reload: controlplane/router_reload.py), ready to decide at once:
        what it learnt carries over (the prefix index, where both use one; overload mode's detector and the late
        prompts' window, where their settings are unchanged; the goodput-first rule's count), its tables are
        derived anew at the next decision under the new terms, and this one stops watching the registry."""
        new = HardwareAwarePolicy(config, use_kernel=self.kernel_name == "numba")
        if new._index is not None and self._index is not None:
            new._index = self._index
            self._index.max_blocks_per_node = config.prefix_max_blocks_per_node  # a smaller bound: met at next insert
        old_overload, old_late = self.overload, self.late_prompts
        if new.overload is not None and old_overload is not None and _same_settings(new.overload, old_overload):
            new.overload = old_overload  # its window, its hold and its activations count
        if new.late_prompts is not None and old_late is not None and _same_settings(new.late_prompts, old_late):
            new.late_prompts = old_late
        if new.tpot_lost is not None and self.tpot_lost is not None:
            new.tpot_lost.moved = self.tpot_lost.moved  # zoo:router_tpot_lost_redirects_total stays a counter
        self.close()
        return new

    def close(self) -> None:
        """Stop deriving rows as the registry logs new views (this policy decides no more)."""
        for log, callback in self._watched.items():
            log.unwatch(callback)
        self._watched.clear()

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        if self._index is not None:
            self._index.insert(node_id, request.block_hashes)
        placed = self._placed
        if placed is not None and placed[0] == request.request_id and placed[1] == node_id:
            self.overload.record(placed[2], placed[3])
            if placed[3] and self.late_prompts is not None:
                self.late_prompts.record(placed[2], request.num_prompt_tokens)
            self._placed = None

    def on_node_removed(self, node_id: str) -> None:
        self._rows.forget(node_id)
        self.on_prefix_cache_reset(node_id)

    def on_prefix_cache_reset(self, node_id: str) -> None:
        if self._index is not None:
            self._index.remove_node(node_id)

    def on_kv_events(self, node_id: str, events: list) -> None:
        """``hardware_aware_kv_evictions``: what a node evicted leaves the index (its stores entered at routing).
        Else (``hardware_aware_prefix_snapshot``) these are the node's cache at its Welcome: a clear, then the
        blocks it holds, which enter the index."""
        if self._index is None:
            return
        for event in events:
            if type(event) is BlockRemoved and self.wants_kv_events:
                self._index.remove(node_id, event.block_hashes)
            elif type(event) is AllBlocksCleared:
                self._index.remove_node(node_id)
            elif type(event) is BlockStored and not self.wants_kv_events and self.wants_kv_snapshot:
                self._index.insert_cached(node_id, event.block_hashes)

    def _predicted_tpot(self, columns, max_tokens: int) -> np.ndarray:
        """Each node's predicted TPOT, step + min(backlog_s / decode steps, chunk_s), into ``self._tpot``."""
        return columns_tpot_s(columns, max_tokens, self._tpot)


_LAST_CUM = _COL_CUM + NUM_BINS - 1


def _same_settings(a, b) -> bool:
    """Two detectors (or windows) built with the same settings: the running one may go on for the other."""
    keys = ("window_s", "late_share", "min_placements", "hold_s")
    return all(getattr(a, k, None) == getattr(b, k, None) for k in keys)
