"""hardware_aware's table row of a node: the per-node terms its cost reads, derived when the registry logs the node's
new view (router/node_changes.py), not at the decision.

The row's layout is hardware_aware.py's ``_COL_*`` (cost_kernel.py's ``COL_*``, which the tests check agree): the
largest prompt it can take, its outstanding requests, 1/prefill rate, the prompt-independent part of TTFT (backlog
and the current decode step), the decode step with one more sequence, the backlog's prefill time, a chunk's time,
KV headroom, an adapter's load time, its decode batch, its fastest decode step, 1/its decoders' decode steps, then
the cumulative counts of its decoders (or their slack) by bin (router/decode_steps.py). Moved out of
hardware_aware.py (the policy) to keep each file one concept. Sans-IO.
"""

from __future__ import annotations

import math

from controlplane.router.decode_steps import cumulative
from controlplane.router.policies.node_predictions import MIN_FIGURE
from controlplane.router.policy import NodeView
from controlplane.router.router_config import RouterConfig


class NodeRows:
    """``derive(node)``: the row of ``node``. Keeps what no report changes per (model, hardware), and each node's last
    cumulative histogram (``forget`` a node that left)."""

    def __init__(self, config: RouterConfig) -> None:
        self.config = config
        self._statics: dict[tuple[str, float, float], tuple[float, float, float, float]] = {}
        self._cums: dict[str, tuple[tuple[int, ...], tuple[float, ...]]] = {}  # node -> (its histogram, cumulative)

    def forget(self, node_id: str) -> None:
        self._cums.pop(node_id, None)

    def statics_of(self, node: NodeView) -> tuple[float, float, float, float]:
        """(estimated 1/rate, weight read time, compute time per sequence, measured-step floor) of a node
        of this model and hardware: what ``derive`` needs that no report changes."""
        key = (node.model, node.peak_tflops, node.memory_bandwidth_gbps)
        statics = self._statics.get(key)
        if statics is None:
            config = self.config
            params = config.params_b_for(node.model) * 1e9
            peak_flops = max(node.peak_tflops, MIN_FIGURE) * 1e12
            read_s = params * config.bytes_per_param
            read_s /= max(node.memory_bandwidth_gbps, MIN_FIGURE) * 1e9 * config.decode_bandwidth_efficiency
            per_seq_compute_s = 2.0 * params / (peak_flops * config.prefill_mfu)
            estimated_inv_rate = 1.0 / (config.prefill_mfu * peak_flops / (2.0 * params))
            floor_s = max(read_s, per_seq_compute_s)
            statics = self._statics[key] = (estimated_inv_rate, read_s, per_seq_compute_s, floor_s)
        return statics

    def derive(self, node: NodeView) -> tuple[float, ...]:
        """The table row of ``node``: the same formulas as the public predict_* functions, inlined, in the
        same order of operations (tests check the policy's choice against predict_cost_s, and against the
        baseline in bench/hardware_aware_baseline.py bit for bit)."""
        config = self.config
        estimated_inv_rate, read_s, per_seq_compute_s, floor_s = self.statics_of(node)
        rate = node.prefill_tok_per_s
        inv_rate = estimated_inv_rate if rate <= 0 else 1.0 / rate
        batch, num_inflight = node.decode_batch_size, node.num_inflight
        tpot_batch = (batch if batch > num_inflight else num_inflight) + 1
        measured_ms = node.decode_step_ms
        if measured_ms <= 0:
            compute_s = batch * per_seq_compute_s
            wait_s = (read_s if read_s >= compute_s else compute_s) if batch > 0 else 0.0
            compute_s = tpot_batch * per_seq_compute_s
            step_s = read_s if read_s >= compute_s else compute_s
        else:
            measured_s = measured_ms / 1000.0
            if measured_s < floor_s:
                floor_s = measured_s
            per_seq_s = (measured_s - floor_s) / (batch if batch > 1 else 1)
            wait_s = floor_s + per_seq_s * batch if batch > 0 else 0.0
            step_s = floor_s + per_seq_s * tpot_batch
        if config.tpot_measured_steps:  # node_predictions.tpot_step_s
            measured_mean_s = node.step_mean_ms / 1000.0
            if measured_mean_s > step_s:
                step_s = measured_mean_s
        backlog = node.queued_prefill_tokens + node.inflight_prefill_tokens
        backlog_s = backlog * inv_rate
        reported = node.num_running + node.num_waiting
        outstanding = num_inflight if num_inflight > reported else reported
        if node.num_swapped > 0:
            headroom = -math.inf
        else:
            headroom = float(node.num_free_device_blocks * node.block_size - backlog
                             - config.kv_reserve_running_tokens * outstanding)  # fmt: skip
        lora_load_s = node.lora_load_s
        return (
            min(node.max_model_len - 1, node.num_device_blocks * node.block_size),  # max_prompt_tokens
            outstanding,
            inv_rate,
            backlog_s + wait_s,
            step_s,
            backlog_s,
            config.prefill_chunk_tokens * inv_rate,
            headroom,
            lora_load_s if lora_load_s > 0 else config.lora_load_estimate_s,
            float(batch),
            floor_s,
            node.decode_inv_steps,
            *self._cumulative(node),
        )

    def _cumulative(self, node: NodeView) -> tuple[float, ...]:
        """``cumulative(node.decode_steps_hist)`` (slo_tpot_harm_reported: of its decode_slack_hist), computed again
        only when the registry made a new histogram (a report or a routed request keeps the object)."""
        hist = node.decode_slack_hist if self.config.slo_tpot_harm_reported else node.decode_steps_hist
        cached = self._cums.get(node.node_id)
        if cached is None or cached[0] is not hist:
            cached = self._cums[node.node_id] = (hist, cumulative(hist))
        return cached[1]
