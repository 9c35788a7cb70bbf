"""Prefill/decode split routing: each request gets a prefill node and a decode node, the KV transfer between
them priced on their link (backends/kv_link_model.py). Sans-IO; the fleet simulator (sim/split.py) and the
control plane (controlplane/split_handoff.py) run it unchanged.

Roles: ``prefill`` (takes new requests, hands each off after its first token), ``decode`` (takes hand-offs
only), ``both`` (either; a request whose two nodes are the same ``both`` node stays there, colocated). A
node's role comes from config (``zoo agent --role``, a fleet TOML's ``[pd_split.roles]``) or, for
``auto``, from the rule of ``auto_roles``:

    auto: a node prefills when its peak compute (hello: peak TFLOPS x TP) is at least ``prefill_min_share``
          (default 0.25) of the biggest node's; the others decode. Prefill is compute-bound, decode reads
          weights and KV: the beasts prefill, the lean GPUs decode. (On the zoo fleet: H100 989 and A100 312
          TFLOPS prefill; L4 121 and T4 x2 130 decode.) A fleet of one kind keeps every node ``both``.

The choice, over every (prefill node p, decode node d) pair (times in seconds; hardware_aware's predictions,
controlplane/router/policies/hardware_aware.py)::

    TTFT(p)     = predict_ttft_s(p, prompt)                  + slo_ttft_miss_penalty_s if over the TTFT SLO
                                                              + kv_full_penalty_s if p has no room for the prompt
    move(p, d)  = link(p, d).seconds(KV bytes of the prompt's full blocks)      0 when p == d
                  + the wait for p's egress and d's ingress when given the hand-offs' KVLinkQueue, at least
                    the time d's link takes for the KV of the hand-offs planned to d and not landed
    TPOT(d)     = decode step of d with max(batch, in flight + handed off to it and not landed) + 1 sequences
                  + reading the KV of its batch once: (used KV tokens + planned hand-offs' + this prompt)
                    * kv_bytes_per_token / (memory bandwidth * decode_bandwidth_efficiency)
                    (hardware_aware leaves KV reads out; on a decode node of long contexts they are the step)
                  + the prefill backlog mixed into its steps (as hardware_aware: a chunk a step at most)
                                                              + slo_ttft_miss_penalty_s if over the TPOT SLO
                                                              + kv_full_penalty_s if d has no room for
                                                                prompt + kv_reserve_output_tokens
    cost(p, d)  = TTFT(p) + move(p, d) + tpot_weight * min(max_tokens, tpot_horizon_tokens) * TPOT(d)

``choose`` returns p (the node the request is sent to); ``decode_target`` tells where it goes after its first
token. The router keeps its own books of hand-offs planned to each decode node (``on_handed_off`` clears one
once the node's own counts include it), so a burst does not herd onto one decode node between reports.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

from backends.kv_link_model import KVLinkModel, KVLinkQueue, transferred_kv_bytes
from controlplane.router.policies.node_predictions import (
    backlog_tokens,
    decode_step_s,
    kv_headroom_tokens,
    predict_ttft_s,
    prefill_rate_tok_per_s,
)
from controlplane.router.policy import ClusterSnapshot, NodeView, PolicyHooks, RouteRequest
from controlplane.router.router_config import RouterConfig

ROLES = ("prefill", "decode", "both")
DEFAULT_PREFILL_MIN_SHARE = 0.25


def check_role(role: str) -> str:
    if role not in ROLES:
        raise ValueError(f"unknown node role {role!r}; valid: {', '.join(ROLES)}")
    return role


def auto_roles(
    peak_tflops: Mapping[str, float], prefill_min_share: float = DEFAULT_PREFILL_MIN_SHARE
) -> dict[str, str]:
    """node id → role by the rule in the module docstring (node id → its peak TFLOPS, TP included)."""
    if not 0.0 < prefill_min_share <= 1.0:
        raise ValueError(f"prefill_min_share must be in (0, 1], got {prefill_min_share}")
    if not peak_tflops:
        return {}
    top = max(peak_tflops.values())
    roles = {n: ("prefill" if t >= prefill_min_share * top else "decode") for n, t in peak_tflops.items()}
    if len(set(roles.values())) < 2:  # one kind of node: nothing to split
        return dict.fromkeys(peak_tflops, "both")
    return roles


class PDSplitRouter(PolicyHooks):
    """roles: node id → role, or a callable (node view → role; the control plane reads it from the hello).
    A node with no role is ``both``. links: the KV link model; kv_bytes_per_token: of the served model; queue:
    the NICs' bookings of the hand-offs (its waits are priced; None: links taken as idle)."""

    name = "pd_split"

    def __init__(
        self,
        config: RouterConfig,
        roles: Mapping[str, str] | Callable[[NodeView], str],
        links: KVLinkModel,
        kv_bytes_per_token: int,
        queue: KVLinkQueue | None = None,
    ) -> None:
        if kv_bytes_per_token <= 0:
            raise ValueError(f"kv_bytes_per_token must be > 0, got {kv_bytes_per_token}")
        self.config = config
        self._roles = roles
        self.links = links
        self.kv_bytes_per_token = kv_bytes_per_token
        self.queue = queue
        self._plan: dict[str, tuple[str, str]] = {}  # request id → (prefill node, decode node), chosen
        self._landing: dict[str, tuple[str, int]] = {}  # request id → (decode node, KV tokens) not landed yet
        self._pending: dict[str, int] = {}  # decode node → hand-offs planned to it, not landed yet
        self._pending_tokens: dict[str, int] = {}  # decode node → their KV tokens
        self.last_costs: dict[tuple[str, str], float] = {}  # the last decision's pair costs (tests, debugging)

    def role(self, node: NodeView) -> str:
        roles = self._roles
        return roles(node) if callable(roles) else roles.get(node.node_id, "both")

    # -- the pieces of the cost (public: tests and reports show them) -------------------------------------------

    def transfer_s(self, src: NodeView, dst: NodeView, num_tokens: int, now_s: float | None = None) -> float:
        """Moving ``num_tokens`` of context src → dst: on the link, plus the NICs' queue at ``now_s`` if known."""
        if src.node_id == dst.node_id:
            return 0.0
        nbytes = transferred_kv_bytes(num_tokens, self.kv_bytes_per_token, src.block_size)
        link = self.links.link(src.node_id, dst.node_id)
        wait_s = self._pending_tokens.get(dst.node_id, 0) * self.kv_bytes_per_token / (link.gbps * 1e9)
        if self.queue is not None and now_s is not None:
            wait_s = max(wait_s, self.queue.ready_s(src.node_id, dst.node_id, now_s) - now_s)
        return wait_s + link.seconds(nbytes)

    def prefill_cost_s(self, node: NodeView, request: RouteRequest) -> float:
        c = self.config
        ttft_s = predict_ttft_s(node, request.num_prompt_tokens, c)
        slo = c.slo_ttft_s if request.slo_ttft_s is None else request.slo_ttft_s
        cost = ttft_s + (c.slo_ttft_miss_penalty_s if ttft_s > slo else 0.0)
        if request.num_prompt_tokens > kv_headroom_tokens(node, c):
            cost += c.kv_full_penalty_s
        return cost

    def predict_decode_tpot_s(self, node: NodeView, max_tokens: int, num_prompt_tokens: int = 0) -> float:
        """TPOT of one more decoding request on ``node``, counting the hand-offs still on their way to it."""
        c = self.config
        used = (node.num_device_blocks - node.num_free_device_blocks) * node.block_size
        kv_tokens = used + self._pending_tokens.get(node.node_id, 0) + num_prompt_tokens
        bandwidth = max(node.memory_bandwidth_gbps, 1e-9) * 1e9 * c.decode_bandwidth_efficiency
        kv_read_s = kv_tokens * self.kv_bytes_per_token / bandwidth
        inv_rate = 1.0 / prefill_rate_tok_per_s(node, c)
        num_steps = max(max_tokens - 1, 1)
        mixed_s = min(backlog_tokens(node) * inv_rate / num_steps, c.prefill_chunk_tokens * inv_rate)
        batch = max(node.decode_batch_size, node.num_inflight + self._pending.get(node.node_id, 0)) + 1
        return decode_step_s(node, batch, c) + kv_read_s + mixed_s

    def decode_cost_s(self, node: NodeView, request: RouteRequest) -> float:
        c = self.config
        tpot_s = self.predict_decode_tpot_s(node, request.max_tokens, request.num_prompt_tokens)
        cost = c.tpot_weight * min(request.max_tokens, c.tpot_horizon_tokens) * tpot_s
        slo = c.slo_tpot_s if request.slo_tpot_s is None else request.slo_tpot_s
        if tpot_s > slo:
            cost += c.slo_ttft_miss_penalty_s
        need = request.num_prompt_tokens + min(request.max_tokens, c.kv_reserve_output_tokens)
        if need + self._pending_tokens.get(node.node_id, 0) > kv_headroom_tokens(node, c):
            cost += c.kv_full_penalty_s
        return cost

    # -- Policy ---------------------------------------------------------------------------------------------------

    def choose(self, request: RouteRequest, snapshot: ClusterSnapshot) -> str | None:
        prefill, decode = [], []
        n = request.num_prompt_tokens
        for v in snapshot.nodes:
            if n >= min(v.max_model_len, v.num_device_blocks * v.block_size):
                continue  # can never hold this prompt
            role = self.role(v)
            if role != "decode":
                prefill.append(v)
            if role != "prefill":
                decode.append(v)
        if not prefill:
            return None
        if not decode:  # no decode node live: the prefill nodes finish their requests themselves
            decode = prefill
        decode_costs = [(d, self.decode_cost_s(d, request)) for d in decode]
        best, best_cost = None, math.inf
        costs: dict[tuple[str, str], float] = {}
        for p in prefill:
            p_cost = self.prefill_cost_s(p, request)
            for d, d_cost in decode_costs:
                if p.node_id != d.node_id and self.role(d) == "prefill":
                    continue  # a prefill-only node decodes only what it prefilled itself
                cost = p_cost + self.transfer_s(p, d, n, snapshot.now_s) + d_cost
                costs[(p.node_id, d.node_id)] = cost
                if cost < best_cost:
                    best, best_cost = (p.node_id, d.node_id), cost
        self.last_costs = costs
        if best is None:
            return None
        if request.max_tokens <= 1:  # its first token is its last: nothing to decode elsewhere
            best = (best[0], best[0])
        self._plan[request.request_id] = best
        return best[0]

    def on_routed(self, request: RouteRequest, node_id: str) -> None:
        plan = self._plan.get(request.request_id)
        if plan is None or plan[0] != node_id:  # admission took another node than the last choice: stay there
            plan = (node_id, node_id)
            self._plan[request.request_id] = plan
        if plan[1] != node_id:
            target = plan[1]
            self._landing[request.request_id] = (target, request.num_prompt_tokens)
            self._pending[target] = self._pending.get(target, 0) + 1
            self._pending_tokens[target] = self._pending_tokens.get(target, 0) + request.num_prompt_tokens

    def decode_target(self, request_id: str) -> str | None:
        """Where ``request_id`` goes after its first token (None: it stays where it is)."""
        plan = self._plan.get(request_id)
        return None if plan is None or plan[0] == plan[1] else plan[1]

    def on_handed_off(self, request_id: str) -> None:
        """The request landed on its decode node (or its hand-off was given up): the node's counts now say it."""
        landing = self._landing.pop(request_id, None)
        if landing is None:
            return
        target, tokens = landing
        self._pending[target] -= 1
        self._pending_tokens[target] -= tokens

    def on_finished(self, request_id: str, node_id: str) -> None:
        self.on_handed_off(request_id)
        self._plan.pop(request_id, None)

    def on_node_removed(self, node_id: str) -> None:
        self._pending.pop(node_id, None)
        self._pending_tokens.pop(node_id, None)
