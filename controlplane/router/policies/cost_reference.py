"""hardware_aware's cost of one node for one request, in scalar form: the reference the policy's table rows
(node_rows.py's ``NodeRows.derive``), its numpy passes and its compiled kernel (cost_kernel.py) compute the same
floats as (tests check the choices agree), and what the diagnosis scripts call. The formulas: hardware_aware.py's
module docstring; the predictions they read: node_predictions.py."""

from __future__ import annotations

from controlplane.router.policies.node_predictions import (
    decode_floor_s,
    decoders_pushed_over,
    kv_headroom_tokens,
    lora_cold_load_s,
    predict_decoders_tpot_s,
    predict_tpot_s,
    predict_ttft_s,
    predict_wait_s,
    prefill_rate_tok_per_s,
    tpot_step_s,
)
from controlplane.router.policy import NodeView, RouteRequest
from controlplane.router.router_config import RouterConfig


def triage_spares_capable(nodes, num_prompt_tokens: int, config: RouterConfig, slo_ttft_s: float) -> bool:
    """Whether SLO triage spares the capable nodes for this prompt: fewer than
    RouterConfig.slo_triage_spare_capable_below of ``nodes`` could prefill the whole prompt within
    ``slo_ttft_s`` even empty."""
    own = max(num_prompt_tokens, 1)
    capable = sum(own * (1.0 / prefill_rate_tok_per_s(v, config)) <= slo_ttft_s for v in nodes)
    return capable < config.slo_triage_spare_capable_below * len(nodes)


def tpot_floor_missed(node: NodeView, config: RouterConfig) -> bool:
    """RouterConfig.slo_tpot_floor_miss: whether ``node`` is charged as missing the SLO whatever its TTFT (its
    fastest decode step is above the TPOT target); False with the knob off."""
    return config.slo_tpot_floor_miss and decode_floor_s(node, config) > config.slo_tpot_s


def harm_charged(node: NodeView, config: RouterConfig) -> bool:
    """Whether decode protection may charge ``node``: always, or (RouterConfig.slo_tpot_harm_triage) only where its
    decode step, the TPOT prediction's step term, is within the TPOT target (its decodes can still meet it)."""
    return not config.slo_tpot_harm_triage or tpot_step_s(node, config) <= config.slo_tpot_s


def harm_count_charge_s(pushed: float, config: RouterConfig) -> float:
    """Decode protection's charge for ``pushed`` decoders pushed over the TPOT target (RouterConfig.
    slo_tpot_harm_count): the penalty per decoder, at most slo_tpot_harm_count_cap_s where that is set."""
    charge_s = config.slo_tpot_harm_penalty_s * pushed
    cap_s = config.slo_tpot_harm_count_cap_s
    return min(charge_s, cap_s) if cap_s else charge_s  # min: a NaN charge wins, as np.minimum


def late_saved_s(ttft_s: float, cached_ttft_s: float, slo_ttft_s: float, config: RouterConfig) -> float:
    """What a cached prefix lifts of RouterConfig.slo_ttft_late_weight's charge: the weight times the lateness
    (TTFT - ``slo_ttft_s``, at least 0: Python's max, a NaN wins) with nothing cached less the same at
    ``cached_ttft_s`` (the vectorised paths' prefix credit; their kernel does the same floats)."""
    weight = config.slo_ttft_late_weight
    return max(ttft_s - slo_ttft_s, 0.0) * weight - max(cached_ttft_s - slo_ttft_s, 0.0) * weight


def lost_cause_fastest_rate(
    nodes, request: RouteRequest, config: RouterConfig, slo_ttft_s: float, long_ok: bool = True
) -> float:
    """For sacrifice (RouterConfig.slo_sacrifice_weight): the fastest prefill rate among ``nodes`` when
    ``request`` is a lost cause there (its TTFT with nothing cached, adapter load included, > ``slo_ttft_s`` on
    every one of them, or the node charged as missing by ``tpot_floor_missed``), else 0.0 (not one, or the knob
    is off). ``long_ok``: False where the long-prompt test is gated off (RouterConfig.slo_sacrifice_long_vs_late:
    the policy's ``LatePrompts`` said the prompt is not longer than the median late one)."""
    prompt, lora = request.num_prompt_tokens, request.lora_name
    if not config.slo_sacrifice_weight:
        return 0.0
    fastest = max((prefill_rate_tok_per_s(v, config) for v in nodes), default=0.0)
    if long_ok and long_prompt(prompt, fastest, config, slo_ttft_s):  # a long prompt: a lost cause by definition
        return fastest
    if any(
        predict_ttft_s(v, prompt, config) + lora_cold_load_s(v, lora, config) <= slo_ttft_s
        and not tpot_floor_missed(v, config)
        for v in nodes
    ):
        return 0.0
    return fastest


def long_prompt(num_tokens: int, fastest_rate: float, config: RouterConfig, slo_ttft_s: float) -> bool:
    """RouterConfig.slo_sacrifice_long_share (with sacrifice on): ``num_tokens``' prefill at the fastest rate
    takes more than that share of ``slo_ttft_s``."""
    share = config.slo_sacrifice_long_share
    if not share or not config.slo_sacrifice_weight or fastest_rate <= 0.0:
        return False
    return max(num_tokens, 1) / fastest_rate > share * slo_ttft_s


def sacrifice_charge_s(node: NodeView, request: RouteRequest, config: RouterConfig, fastest_rate: float) -> float:
    """Sacrifice's charge on ``node`` for a lost cause (``fastest_rate``: ``lost_cause_fastest_rate``, > 0):
    weight * slo_ttft_s * rate / fastest_rate, or weight * slo_ttft_s (the fastest node's charge) where the
    request's TTFT there, nothing cached, adapter load included, is above RouterConfig.slo_sacrifice_max_ttft_s
    (when that bound is non-zero), or where rate / fastest_rate is above RouterConfig.slo_sacrifice_max_rate_ratio
    (when non-zero): only the slow nodes within the bound are made cheaper by their lower capability."""
    charge_s = config.slo_sacrifice_weight * config.slo_ttft_s
    ratio = config.slo_sacrifice_max_rate_ratio
    if ratio and prefill_rate_tok_per_s(node, config) / fastest_rate > ratio:  # not the slowest tier
        return charge_s
    bound_s = config.slo_sacrifice_max_ttft_s
    if bound_s:
        ttft_s = predict_ttft_s(node, request.num_prompt_tokens, config)
        if ttft_s + lora_cold_load_s(node, request.lora_name, config) > bound_s:
            return charge_s
    return charge_s * prefill_rate_tok_per_s(node, config) / fastest_rate


def predict_cost_s(
    node: NodeView,
    request: RouteRequest,
    config: RouterConfig,
    num_cached_tokens: int = 0,
    spare_capable: bool = False,
    lost: float = 0.0,
    long_ok: bool = True,
) -> float:
    """The policy's cost of sending ``request`` to ``node`` (lower wins); see the module docstring.
    ``spare_capable``: ``triage_spares_capable`` over the nodes of the decision (SLO triage by capability).
    ``lost``: ``lost_cause_fastest_rate`` over the nodes of the decision (0: sacrifice off). A long prompt
    (``long_prompt``, of the tokens left to prefill here; ``long_ok`` False: none) is charged as missing the TTFT
    target."""
    num_prompt_tokens = request.num_prompt_tokens
    ttft_s = predict_ttft_s(node, num_prompt_tokens, config, num_cached_tokens)
    ttft_s += lora_cold_load_s(node, request.lora_name, config)
    tpot_s = predict_tpot_s(node, config, request.max_tokens)
    tpot_term_s = max(tpot_s - config.slo_tpot_s, 0.0) if config.tpot_excess_only else tpot_s
    cost = ttft_s + config.tpot_weight * min(request.max_tokens, config.tpot_horizon_tokens) * tpot_term_s
    uncached = num_prompt_tokens - num_cached_tokens
    if ttft_s > config.slo_ttft_s or (lost and long_ok and long_prompt(uncached, lost, config, config.slo_ttft_s)):
        cost += config.slo_ttft_miss_penalty_s
        cost += config.slo_ttft_late_weight * max(ttft_s - config.slo_ttft_s, 0.0)  # priced by how late it is
        if spare_capable:  # charge the nodes that could serve a prompt of this size in time (whole prompt)
            charged = max(num_prompt_tokens, 1) / prefill_rate_tok_per_s(node, config) <= config.slo_ttft_s
        else:
            charged = predict_wait_s(node, config) <= config.slo_ttft_s
        if charged:
            cost += config.slo_triage_penalty_s
        if lost:  # sacrifice: the more capable the node, the more it costs a lost cause (within the bound)
            cost += sacrifice_charge_s(node, request, config, lost)
    elif tpot_floor_missed(node, config):  # it misses the TPOT target at any load: charged as a miss (no triage)
        cost += config.slo_ttft_miss_penalty_s
        if lost:
            cost += sacrifice_charge_s(node, request, config, lost)
    elif config.slo_pack_weight:  # bin packing: the spare capability of a node that meets the TTFT target
        if config.slo_pack_needs_tpot and tpot_s > config.slo_tpot_s:  # it misses TPOT: the most packing charges
            slack_s = config.slo_ttft_s
        else:
            slack_s = max(config.slo_ttft_s - max(num_prompt_tokens, 1) / prefill_rate_tok_per_s(node, config), 0.0)
        cost += min(config.slo_pack_weight * slack_s, config.slo_ttft_miss_penalty_s)
    if tpot_s > config.slo_tpot_s:
        cost += config.slo_tpot_miss_penalty_s
    if config.slo_tpot_harm_count:  # per decoder pushed over the target
        pushed = decoders_pushed_over(node, num_prompt_tokens, config, num_cached_tokens)
        cost += harm_count_charge_s(pushed, config)
    elif node.decode_batch_size > 0 and harm_charged(node, config):
        harm_tpot_s = predict_decoders_tpot_s(node, num_prompt_tokens, config, request.max_tokens, num_cached_tokens)
        if harm_tpot_s > config.slo_tpot_s:
            cost += config.slo_tpot_harm_penalty_s
    need = num_prompt_tokens + min(request.max_tokens, config.kv_reserve_output_tokens) - num_cached_tokens
    if need > kv_headroom_tokens(node, config):
        cost += config.kv_full_penalty_s
    return cost
