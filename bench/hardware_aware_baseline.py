"""hardware_aware's decision as it was before it was made fast (commit 2777401), kept as the baseline.

``zoo bench controlplane`` times it beside the current policy on the same snapshots (ratio new/old in one
run), and tests/controlplane/router/test_hardware_aware_fast.py checks that the current policy chooses
exactly as it does. The formulas are those of controlplane/router/policies/hardware_aware.py; this copy
differs only in how it gets there: it finds changed nodes by comparing snapshot tuples (NodeTable's
fallback path), derives every row from scratch, and adds penalties with masked ufuncs. Not a policy
anyone routes with (it is not in POLICIES).
"""

from __future__ import annotations

import math

import numpy as np

from controlplane.router.decode_steps import SLACK_UNIT_S, cumulative, pushed_over
from controlplane.router.policies.cost_reference import late_saved_s
from controlplane.router.policies.node_predictions import kv_headroom_tokens, lora_cold_load_s
from controlplane.router.policies.node_table import NodeTables, outstanding_requests
from controlplane.router.policy import ClusterSnapshot, NodeView, PolicyHooks, RouteRequest
from controlplane.router.prefix_index import PrefixIndex
from controlplane.router.router_config import RouterConfig

_COL_INV_RATE = 2
_COL_BASE_S = 3
_COL_STEP_S = 4
_COL_BACKLOG_S = 5
_COL_CHUNK_S = 6
_COL_HEADROOM = 7
_COL_DECODERS = 8
_NUM_COLUMNS = 9
_MIN_FIGURE = 1e-9


def backlog_tokens(node: NodeView) -> int:
    return node.queued_prefill_tokens + node.inflight_prefill_tokens


class HardwareAwareBaseline(PolicyHooks):
    name = "hardware_aware_baseline"

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self._tables = NodeTables(self._derive, _NUM_COLUMNS)
        self._index = PrefixIndex(config.prefix_max_blocks_per_node) if config.hardware_aware_use_prefix else None
        self._cost = np.empty(0)
        self._tpot = np.empty(0)
        self._short = np.empty(0, dtype=bool)
        self._miss = np.empty(0, dtype=bool)

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        table = self._tables.get(request.model, request.traffic_class)
        table.sync(snapshot.nodes)
        n = len(table)
        if n == 0:
            return None
        if len(self._cost) != n:
            self._cost, self._tpot = np.empty(n), np.empty(n)
            self._short, self._miss = np.empty(n, dtype=bool), np.empty(n, dtype=bool)
        config = self.config
        values, columns = table.values, table.columns
        num_prompt_tokens, max_tokens = request.num_prompt_tokens, request.max_tokens
        miss = self._miss
        # cost = TTFT (+ its SLO penalty)
        cost = np.multiply(columns[_COL_INV_RATE], max(num_prompt_tokens, 1), out=self._cost)
        cost += columns[_COL_BASE_S]
        if request.lora_name is not None:  # a cold adapter load before the first step (O(N): LoRA requests only)
            lora_name, nodes = request.lora_name, table.nodes
            cost += np.fromiter((lora_cold_load_s(v, lora_name, config) for v in nodes), np.float64, len(nodes))
        slo_ttft_s = config.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s  # the class's SLO
        np.greater(cost, slo_ttft_s, out=miss)
        # (added later) sacrifice: a lost cause (it misses the TTFT SLO on every node) costs capable nodes more
        sacrifice_s = config.slo_sacrifice_weight * slo_ttft_s if config.slo_sacrifice_weight and miss.all() else 0.0
        bound_s = config.slo_sacrifice_max_ttft_s  # (added later) beyond it, a node is charged as the fastest
        over_bound = (cost > bound_s) if sacrifice_s and bound_s else np.zeros(n, dtype=bool)
        late = np.maximum(cost - slo_ttft_s, 0.0) * config.slo_ttft_late_weight  # (added later) how late a miss is
        np.add(cost, config.slo_ttft_miss_penalty_s, out=cost, where=miss)
        if config.slo_ttft_late_weight:
            cost += late
        # (added later) the predicted TPOT: bin packing's gate (slo_pack_needs_tpot) and the TPOT term below
        tpot_s = np.minimum(columns[_COL_BACKLOG_S] * (1.0 / max(max_tokens - 1, 1)), columns[_COL_CHUNK_S])
        tpot_s += columns[_COL_STEP_S]
        slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
        tpot_miss = (tpot_s > slo_tpot_s) if config.slo_pack_needs_tpot else np.zeros(n, dtype=bool)
        if config.slo_pack_weight:  # (added later) bin packing: the slack of the nodes that meet the TTFT SLO
            slack = slo_ttft_s - columns[_COL_INV_RATE] * float(max(num_prompt_tokens, 1))
            slack = np.where(tpot_miss, slo_ttft_s, slack) * config.slo_pack_weight  # all of it: misses TPOT
            cost += np.where(miss, 0.0, np.minimum(slack, config.slo_ttft_miss_penalty_s))
        # SLO triage (added after commit 2777401): a miss on a node whose queue still meets the SLO
        triage = miss & (columns[_COL_BASE_S] <= slo_ttft_s)
        own_s = columns[_COL_INV_RATE] * float(max(num_prompt_tokens, 1))
        spare = config.slo_triage_penalty_s and (own_s <= slo_ttft_s).sum() < config.slo_triage_spare_capable_below * n
        if spare:  # (added later) few nodes could serve the prompt in time even empty: charge those, spare the rest
            triage = miss & (own_s <= slo_ttft_s)
        np.add(cost, config.slo_triage_penalty_s, out=cost, where=triage)
        # TPOT = step + min(backlog_s / decode steps, chunk_s) (+ its SLO penalty)
        output_weight = config.tpot_weight * min(max_tokens, config.tpot_horizon_tokens)
        if output_weight or config.slo_tpot_miss_penalty_s:
            tpot = np.multiply(columns[_COL_BACKLOG_S], 1.0 / max(max_tokens - 1, 1), out=self._tpot)
            np.minimum(tpot, columns[_COL_CHUNK_S], out=tpot)
            tpot += columns[_COL_STEP_S]
            if config.slo_tpot_miss_penalty_s:
                penalty = config.slo_tpot_miss_penalty_s
                slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
                np.add(cost, penalty, out=cost, where=np.greater(tpot, slo_tpot_s, out=miss))
            if output_weight:
                if config.tpot_excess_only:  # (added later) only the TPOT above the target counts
                    slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
                    tpot = np.maximum(tpot - slo_tpot_s, 0.0)
                cost += tpot * output_weight
        # decode protection (added after commit 2777401): this prompt's chunks push the running decodes over the SLO
        slo_tpot_s = config.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
        harm_s = (columns[_COL_INV_RATE] * float(max(num_prompt_tokens, 1)) + columns[_COL_BACKLOG_S]) * (
            1.0 / max(max_tokens - 1, 1)
        )
        harm_s = np.minimum(harm_s, columns[_COL_CHUNK_S]) + columns[_COL_STEP_S]
        harm = (harm_s > slo_tpot_s) & (columns[_COL_DECODERS] > 0)
        pushed = None
        if config.slo_tpot_harm_count:  # (added later) the penalty per decoder pushed over the TPOT target
            harm[:] = False
            pushed = np.zeros(n)
            for i, node in enumerate(table.nodes):
                if _counted(node, config):
                    own_i = values.item(_COL_INV_RATE, i) * float(max(num_prompt_tokens, 1))
                    spare_s = _spare_s(config, slo_tpot_s, values.item(_COL_STEP_S, i))
                    backlog_s = values.item(_COL_BACKLOG_S, i)
                    pushed[i] = pushed_over(cumulative(_counted(node, config)), backlog_s, own_i, spare_s)
            charge = pushed * config.slo_tpot_harm_penalty_s
            if config.slo_tpot_harm_count_cap_s:  # (added later) at most the cap per node
                charge = np.minimum(charge, config.slo_tpot_harm_count_cap_s)
            cost += charge
        np.add(cost, config.slo_tpot_harm_penalty_s, out=cost, where=harm)
        need = num_prompt_tokens + min(max_tokens, config.kv_reserve_output_tokens)
        short = np.less(columns[_COL_HEADROOM], need, out=self._short)
        np.add(cost, config.kv_full_penalty_s, out=cost, where=short)
        factor = columns[_COL_INV_RATE].min() / columns[_COL_INV_RATE] if sacrifice_s else None
        if sacrifice_s:  # (added later) the node's prefill rate over the fastest one's, times weight * SLO
            if config.slo_sacrifice_max_rate_ratio:  # (added later) only the slowest tier keeps its factor
                factor[factor > config.slo_sacrifice_max_rate_ratio] = 1.0
            factor[over_bound] = 1.0
            cost += factor * sacrifice_s
        cannot = table.fits_mask(num_prompt_tokens)
        if cannot is not None:
            np.copyto(cost, math.inf, where=cannot)
        if self._index is not None and request.block_hashes:
            # vectorised cost assumed nothing cached; correct the few prefix holders (same formula as
            # predict_cost_s): fewer own prefill tokens (maybe under the TTFT SLO now), and KV room needed
            # only for the uncached part
            index_of, nodes = table.index_of, table.nodes
            own = max(num_prompt_tokens, 1)
            slo_ttft_s = config.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s  # as charged
            for node_id, num_blocks in self._index.match(request.block_hashes, config.prefix_max_candidates).items():
                i = index_of.get(node_id)
                if i is None or cost[i] == math.inf:
                    continue
                cached = min(num_blocks * nodes[i].block_size, num_prompt_tokens)
                inv_rate, base_s = values.item(_COL_INV_RATE, i), values.item(_COL_BASE_S, i)
                base_s += lora_cold_load_s(nodes[i], request.lora_name, config)
                cached_own = max(num_prompt_tokens - cached, 1)
                saved_s = (own - cached_own) * inv_rate
                if own * inv_rate + base_s > slo_ttft_s and cached_own * inv_rate + base_s <= slo_ttft_s:
                    saved_s += config.slo_ttft_miss_penalty_s
                    if (own_s.item(i) if spare else values.item(_COL_BASE_S, i)) <= slo_ttft_s:
                        saved_s += config.slo_triage_penalty_s
                    if sacrifice_s:  # no longer a lost cause there
                        saved_s += factor.item(i) * sacrifice_s
                    slack_s = slo_ttft_s - own * inv_rate  # bin packing charges a node that meets the SLO now
                    if tpot_miss.item(i):
                        slack_s = slo_ttft_s
                    if config.slo_pack_weight and slack_s > 0.0:
                        saved_s -= min(slack_s * config.slo_pack_weight, config.slo_ttft_miss_penalty_s)
                if config.slo_ttft_late_weight:  # (added later) the lateness the cached tokens save
                    full_s, cached_s = own * inv_rate + base_s, cached_own * inv_rate + base_s
                    saved_s += late_saved_s(full_s, cached_s, slo_ttft_s, config)
                if harm.item(i):
                    step_s, chunk_s = values.item(_COL_STEP_S, i), values.item(_COL_CHUNK_S, i)
                    backlog_s = values.item(_COL_BACKLOG_S, i)
                    cached_harm_s = min((inv_rate * cached_own + backlog_s) * (1.0 / max(max_tokens - 1, 1)), chunk_s)
                    if cached_harm_s + step_s <= slo_tpot_s:
                        saved_s += config.slo_tpot_harm_penalty_s
                if pushed is not None and _counted(nodes[i], config):  # fewer decoders pushed over when cached
                    spare_s = _spare_s(config, slo_tpot_s, values.item(_COL_STEP_S, i))
                    backlog_s = values.item(_COL_BACKLOG_S, i)
                    cum = cumulative(_counted(nodes[i], config))
                    cached_pushed = pushed_over(cum, backlog_s, inv_rate * cached_own, spare_s)
                    if config.slo_tpot_harm_count_cap_s:
                        cap_s, penalty_s = config.slo_tpot_harm_count_cap_s, config.slo_tpot_harm_penalty_s
                        saved_s += min(penalty_s * pushed.item(i), cap_s) - min(penalty_s * cached_pushed, cap_s)
                    else:
                        saved_s += config.slo_tpot_harm_penalty_s * (pushed.item(i) - cached_pushed)
                if short.item(i) and need - cached <= values.item(_COL_HEADROOM, i):
                    saved_s += config.kv_full_penalty_s
                cost[i] -= saved_s
        i = int(cost.argmin())
        return None if cost[i] == math.inf else table.node_ids[i]

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        if self._index is not None:
            self._index.insert(node_id, request.block_hashes)

    def on_node_removed(self, node_id: str) -> None:
        if self._index is not None:
            self._index.remove_node(node_id)

    def _derive(self, node: NodeView) -> tuple[float, ...]:
        """The table row of ``node``: the same formulas as the public predict_* functions, inlined
        (tests check the policy's choice against predict_cost_s)."""
        config = self.config
        params = config.params_b_for(node.model) * 1e9
        peak_flops = max(node.peak_tflops, _MIN_FIGURE) * 1e12
        rate = node.prefill_tok_per_s
        if rate <= 0:
            rate = config.prefill_mfu * peak_flops / (2.0 * params)
        inv_rate = 1.0 / rate
        read_s = params * config.bytes_per_param
        read_s /= max(node.memory_bandwidth_gbps, _MIN_FIGURE) * 1e9 * config.decode_bandwidth_efficiency
        batch = node.decode_batch_size
        tpot_batch = max(batch, node.num_inflight) + 1
        if node.decode_step_ms <= 0:
            per_seq_compute_s = 2.0 * params / (peak_flops * config.prefill_mfu)
            wait_s = max(read_s, batch * per_seq_compute_s) if batch > 0 else 0.0
            step_s = max(read_s, tpot_batch * per_seq_compute_s)
        else:
            measured_s = node.decode_step_ms / 1000.0
            floor_s = min(max(read_s, 2.0 * params / (peak_flops * config.prefill_mfu)), measured_s)
            per_seq_s = (measured_s - floor_s) / max(batch, 1)
            wait_s = floor_s + per_seq_s * batch if batch > 0 else 0.0
            step_s = floor_s + per_seq_s * tpot_batch
        backlog_s = backlog_tokens(node) * inv_rate
        return (
            min(node.max_model_len - 1, node.num_device_blocks * node.block_size),  # max_prompt_tokens
            outstanding_requests(node),
            inv_rate,
            backlog_s + wait_s,
            step_s,
            backlog_s,
            config.prefill_chunk_tokens * inv_rate,
            kv_headroom_tokens(node, config),
            float(batch),
        )


def _counted(node, config) -> tuple[int, ...]:
    """(added later) The histogram decode protection counts from: the node's reported slack one
    (slo_tpot_harm_reported) or the control plane's decode lengths."""
    return node.decode_slack_hist if config.slo_tpot_harm_reported else node.decode_steps_hist


def _spare_s(config, slo_tpot_s: float, step_s: float) -> float:
    """(added later) ``pushed_over``'s unit: the slack histogram's, or the time each decode step spares."""
    return SLACK_UNIT_S if config.slo_tpot_harm_reported else slo_tpot_s - step_s
