"""One node's predicted latencies and KV room, as hardware_aware's cost reads them (hardware_aware.py's module
docstring gives the formulas: rate, step(b), backlog, TTFT, TPOT, headroom, wait, harm_tpot).

Plain functions of a NodeView and the RouterConfig, the scalar reference: HardwareAwarePolicy's table rows
(node_rows.py's ``NodeRows.derive``) inline the same formulas in the same order of operations, and pd_split.py,
the baseline and the tests call them directly.
"""

from __future__ import annotations

import math

from controlplane.router.decode_steps import SLACK_UNIT_S, cumulative, pushed_over
from controlplane.router.policies.node_table import outstanding_requests
from controlplane.router.policy import NodeView
from controlplane.router.router_config import RouterConfig

MIN_FIGURE = 1e-9  # guards a node that reports 0 bandwidth or compute


def estimate_prefill_tok_per_s(peak_tflops: float, model_params_b: float, mfu: float) -> float:
    """Prefill throughput of a compute-bound step: 2 FLOPs per parameter per token at ``mfu`` of peak."""
    return mfu * max(peak_tflops, MIN_FIGURE) * 1e12 / (2.0 * model_params_b * 1e9)


def estimate_decode_step_s(
    num_seqs: int,
    memory_bandwidth_gbps: float,
    peak_tflops: float,
    model_params_b: float,
    bytes_per_param: float,
    bandwidth_efficiency: float,
    mfu: float,
) -> float:
    """Roofline time of one decode step of ``num_seqs`` sequences: read every weight once, or compute
    2 FLOPs per parameter per sequence, whichever takes longer (KV reads ignored)."""
    params = model_params_b * 1e9
    read_s = params * bytes_per_param / (max(memory_bandwidth_gbps, MIN_FIGURE) * 1e9 * bandwidth_efficiency)
    compute_s = num_seqs * 2.0 * params / (max(peak_tflops, MIN_FIGURE) * 1e12 * mfu)
    return max(read_s, compute_s)


def prefill_rate_tok_per_s(node: NodeView, config: RouterConfig) -> float:
    if node.prefill_tok_per_s > 0:
        return node.prefill_tok_per_s
    return estimate_prefill_tok_per_s(node.peak_tflops, config.params_b_for(node.model), config.prefill_mfu)


def decode_step_s(node: NodeView, num_seqs: int, config: RouterConfig) -> float:
    """Predicted pure decode step time of ``node`` with ``num_seqs`` sequences (see the module docstring)."""
    if node.decode_step_ms <= 0:
        params_b = config.params_b_for(node.model)
        bw, peak, bpp = node.memory_bandwidth_gbps, node.peak_tflops, config.bytes_per_param
        eff, mfu = config.decode_bandwidth_efficiency, config.prefill_mfu
        return estimate_decode_step_s(num_seqs, bw, peak, params_b, bpp, eff, mfu)
    measured_s = node.decode_step_ms / 1000.0
    floor_s = decode_floor_s(node, config)
    return floor_s + (measured_s - floor_s) / max(node.decode_batch_size, 1) * num_seqs


def decode_floor_s(node: NodeView, config: RouterConfig) -> float:
    """The fastest decode step ``node`` can take: one sequence, the roofline's, or its measured step (the
    start-up profile's, at its reported batch) where that is lower: ``decode_step_s``'s floor, and what
    RouterConfig.slo_tpot_floor_miss compares with the TPOT target."""
    params_b = config.params_b_for(node.model)
    bw, peak, bpp = node.memory_bandwidth_gbps, node.peak_tflops, config.bytes_per_param
    floor_s = estimate_decode_step_s(1, bw, peak, params_b, bpp, config.decode_bandwidth_efficiency, config.prefill_mfu)
    if node.decode_step_ms > 0:
        measured_s = node.decode_step_ms / 1000.0
        if measured_s < floor_s:
            return measured_s
    return floor_s


def backlog_tokens(node: NodeView) -> int:
    """Prompt tokens on ``node`` not prefilled yet: its last report's queue plus what was routed since."""
    return node.queued_prefill_tokens + node.inflight_prefill_tokens


def predict_ttft_s(node: NodeView, num_prompt_tokens: int, config: RouterConfig, num_cached_tokens: int = 0) -> float:
    """Time until the first token of a new request on ``node``: the prefill queued ahead, this prompt's
    uncached tokens, and the decode step in progress."""
    own = max(num_prompt_tokens - num_cached_tokens, 1)
    wait_s = decode_step_s(node, node.decode_batch_size, config) if node.decode_batch_size > 0 else 0.0
    return (backlog_tokens(node) + own) / prefill_rate_tok_per_s(node, config) + wait_s


def lora_cold_load_s(node: NodeView, lora_name: str | None, config: RouterConfig) -> float:
    """Time ``node`` needs to bring adapter ``lora_name`` into a device slot before the request's first step:
    0 when it holds it (or the request has none), else its measured mean load time or the estimate."""
    if lora_name is None or lora_name in node.lora_resident:
        return 0.0
    return node.lora_load_s if node.lora_load_s > 0 else config.lora_load_estimate_s


def predict_tpot_s(node: NodeView, config: RouterConfig, max_tokens: int = 1) -> float:
    """Time per output token of a new request of ``max_tokens`` outputs on ``node``: a decode step with it
    added to the batch, plus the node's prefill backlog spread over its decode steps (a chunk per step at
    most)."""
    inv_rate = 1.0 / prefill_rate_tok_per_s(node, config)
    num_steps = max(max_tokens - 1, 1)
    mixed_s = min(backlog_tokens(node) * inv_rate / num_steps, config.prefill_chunk_tokens * inv_rate)
    return tpot_step_s(node, config) + mixed_s


def tpot_step_s(node: NodeView, config: RouterConfig) -> float:
    """The decode step in the TPOT predictions: with this request added to the batch, and with
    ``tpot_measured_steps`` at least the node's measured mean step time (``NodeView.step_mean_ms``)."""
    step_s = decode_step_s(node, max(node.decode_batch_size, node.num_inflight) + 1, config)
    if config.tpot_measured_steps:
        measured_s = node.step_mean_ms / 1000.0
        if measured_s > step_s:
            return measured_s
    return step_s


def kv_headroom_tokens(node: NodeView, config: RouterConfig) -> float:
    """KV tokens free for new work on ``node`` once its queued prompts and the expected growth of the
    requests already there are set aside; -inf while it has swapped requests."""
    if node.num_swapped > 0:
        return -math.inf
    free = node.num_free_device_blocks * node.block_size - backlog_tokens(node)
    return float(free - config.kv_reserve_running_tokens * outstanding_requests(node))


def predict_wait_s(node: NodeView, config: RouterConfig) -> float:
    """What any new request waits on ``node`` before its own prefill: the queued prefill and the decode step
    in progress (TTFT less the prompt's own time; SLO triage compares it with the TTFT target)."""
    wait_s = decode_step_s(node, node.decode_batch_size, config) if node.decode_batch_size > 0 else 0.0
    return backlog_tokens(node) * (1.0 / prefill_rate_tok_per_s(node, config)) + wait_s


def predict_decoders_tpot_s(
    node: NodeView, num_prompt_tokens: int, config: RouterConfig, max_tokens: int = 1, num_cached_tokens: int = 0
) -> float:
    """TPOT of the requests decoding on ``node`` once this prompt (and the backlog) is prefilled in chunks that
    share their decode steps: the node's backlog plus this prompt spread over their decode steps
    (``harm_inv_steps``), a chunk per step at most (decode protection; see the module docstring)."""
    inv_rate = 1.0 / prefill_rate_tok_per_s(node, config)
    own_s = max(num_prompt_tokens - num_cached_tokens, 1) * inv_rate
    mixed_s = min((own_s + backlog_tokens(node) * inv_rate) * harm_inv_steps(node, config, max_tokens),
                  config.prefill_chunk_tokens * inv_rate)  # fmt: skip
    return tpot_step_s(node, config) + mixed_s


def decoders_pushed_over(
    node: NodeView, num_prompt_tokens: int, config: RouterConfig, num_cached_tokens: int = 0
) -> float:
    """How many of the decoders the control plane knows of on ``node`` this prompt's prefill (its uncached tokens,
    after the node's backlog) pushes over the TPOT target (RouterConfig.slo_tpot_harm_count; the rule:
    router/decode_steps.py), interpolated between the histogram's bins; with slo_tpot_harm_reported, of those the
    node reported by their slack (NodeView.decode_slack_hist)."""
    hist = node.decode_slack_hist if config.slo_tpot_harm_reported else node.decode_steps_hist
    if not hist:
        return 0.0
    inv_rate = 1.0 / prefill_rate_tok_per_s(node, config)
    own_s = max(num_prompt_tokens - num_cached_tokens, 1) * inv_rate
    spare_s = SLACK_UNIT_S if config.slo_tpot_harm_reported else config.slo_tpot_s - tpot_step_s(node, config)
    return pushed_over(cumulative(hist), backlog_tokens(node) * inv_rate, own_s, spare_s)


def harm_inv_steps(node: NodeView, config: RouterConfig, max_tokens: int = 1) -> float:
    """1 / the decode steps decode protection spreads a prompt's prefill over: those of the requests decoding on
    ``node`` (RouterConfig.slo_tpot_harm_decoders: ``NodeView.decode_inv_steps``, where the control plane knows of
    any), else this request's own, ``max_tokens - 1`` (at least 1)."""
    if config.slo_tpot_harm_decoders and node.decode_inv_steps > 0.0:
        return node.decode_inv_steps
    return 1.0 / max(max_tokens - 1, 1)
