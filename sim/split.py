"""The prefill/decode split in the fleet simulator: ``zoo sim --pd-split auto|config``.

Each request goes to a prefill node chosen with a decode node by the split router
(controlplane/router/pd_split.py, the KV transfer priced on their link, backends/kv_link_model.py). When the
prefill node has produced the first token, the request is taken off it as a live migration does
(``LLMEngine.export_request``: its tokens and the device blocks of its computed full blocks), its KV crosses
the link in virtual time (the link model, one transfer at a time per NIC and direction), and the decode
node imports those blocks into its prefix cache (``LLMEngine.import_prefix``) and continues the request with
prompt + first token as its prompt: it recomputes only the partial last block and samples the second token.
So TTFT counts the prefill only, and the transfer delays the second token (it is in the TPOT)::

    step_done on p, first token ─► hand_off: export, abort on p, registry.on_finished(p)
                                   ─► KVLinkQueue.reserve(p, d, full blocks' bytes) ─► LAND event at its end
    LAND ─► land: import_prefix on d, core.add(prompt + first token, max_tokens - 1), registry.on_routed(d)
                  only when d has room: nothing waiting or swapped there and free blocks for the context plus
                  LANDING_RESERVE_TOKENS of output (else the move waits in d's landing queue, retried after each
                  of d's steps: imported blocks are evictable until their request is admitted, so landing on a
                  full node would lose them to the next allocation and re-prefill the whole context there)

A request's LoRA adapter, its engine priority (its traffic class's rank, then its own) and its TPOT target go with
it: it decodes on the same adapter, at the same priority, counted in the decode node's slack report against the same
target, and its blocks land keyed under the adapter.

Nodes roles and links come from the fleet TOML (sim/fleet.py reads the rest of it)::

    [kv_links]
    nodes_per_host = 1          # consecutive nodes of a pool share a host: NVLink between them
    rack = "pool"               # who shares a rack (InfiniBand): "pool" (a GPU pool), "cell", "fleet" or "none";
                                # the rest talk over Ethernet
    [kv_links.kinds.ethernet]   # override a link kind's figures (backends/kv_link_model.py: DEFAULT_LINKS)
    gbps = 12.5
    latency_us = 100
    [pd_split]
    prefill_min_share = 0.25    # the auto rule (pd_split.auto_roles)
    [pd_split.roles]            # --pd-split config: GPU profile or node id → prefill | decode | both
    "h100-sxm" = "prefill"
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path

from backends.kv_link_model import KVLinkModel, KVLinkQueue, KVPlacement, links_from_config, transferred_kv_bytes
from backends.sim.model_shapes import kv_bytes_per_token
from controlplane.router.pd_split import DEFAULT_PREFILL_MIN_SHARE, PDSplitRouter, auto_roles, check_role
from controlplane.router.router_config import RouterConfig
from controlplane.toml_file import load_toml
from engine.llm_engine import MigratedRequest
from engine.lora import LoraRequest
from engine.sampling_params import SamplingParams
from sim.fleet import FLEETS_DIR, Fleet

SPLIT_MODES = ("none", "auto", "config")
LANDING_RESERVE_TOKENS = 128  # output tokens a decode node must have KV room for, beyond the context, to land
RACK_BY = ("pool", "cell", "fleet", "none")


@dataclass(frozen=True, slots=True)
class SplitConfig:
    """mode: "auto" (roles by pd_split.auto_roles, then ``roles`` override) or "config" (``roles`` only; a node
    they do not name is ``both``). roles: GPU profile or node id → role. nodes_per_host / rack: placement."""

    mode: str = "auto"
    prefill_min_share: float = DEFAULT_PREFILL_MIN_SHARE
    roles: dict[str, str] = field(default_factory=dict)
    nodes_per_host: int = 1
    rack: str = "pool"
    link_kinds: dict = field(default_factory=dict)  # [kv_links.kinds] overrides

    def __post_init__(self) -> None:
        if self.mode not in SPLIT_MODES[1:]:
            raise ValueError(f"split mode must be one of {SPLIT_MODES[1:]}, got {self.mode!r}")
        if self.rack not in RACK_BY:
            raise ValueError(f"[kv_links] rack must be one of {RACK_BY}, got {self.rack!r}")
        if self.nodes_per_host < 1:
            raise ValueError(f"[kv_links] nodes_per_host must be >= 1, got {self.nodes_per_host}")
        for role in self.roles.values():
            check_role(role)

    def placement(self, fleet: Fleet) -> KVPlacement:
        hosts, racks, counters = {}, {}, {}
        for n in fleet.nodes:
            pool = (n.cell, n.hardware.profile, n.hardware.tp)
            i = counters.get(pool, 0)
            counters[pool] = i + 1
            hosts[n.node_id] = f"{n.cell}/{n.hardware.profile}/host{i // self.nodes_per_host}"
            if self.rack != "none":
                racks[n.node_id] = {"pool": "/".join(map(str, pool)), "cell": n.cell, "fleet": "fleet"}[self.rack]
        return KVPlacement(hosts, racks)

    def link_model(self, fleet: Fleet) -> KVLinkModel:
        return KVLinkModel(self.placement(fleet), links_from_config(self.link_kinds))

    def roles_for(self, fleet: Fleet, peak_tflops: dict[str, float]) -> dict[str, str]:
        """node id → role."""
        roles = auto_roles(peak_tflops, self.prefill_min_share) if self.mode == "auto" else {}
        for n in fleet.nodes:
            role = self.roles.get(n.node_id, self.roles.get(n.hardware.profile))
            roles[n.node_id] = role or roles.get(n.node_id, "both")
        return roles


def split_config_from_toml(data: dict, mode: str = "auto", **overrides) -> SplitConfig:
    """The ``[kv_links]`` and ``[pd_split]`` sections of a fleet TOML document (absent: the defaults)."""
    links = dict(data.get("kv_links", {}))
    split = dict(data.get("pd_split", {}))
    unknown = (set(links) - {"nodes_per_host", "rack", "kinds"}) | (set(split) - {"prefill_min_share", "roles"})
    if unknown:
        raise ValueError(f"[kv_links]/[pd_split]: unknown keys {sorted(unknown)}")
    fields = {
        "mode": mode,
        "prefill_min_share": float(split.get("prefill_min_share", DEFAULT_PREFILL_MIN_SHARE)),
        "roles": {str(k): str(v) for k, v in split.get("roles", {}).items()},
        "nodes_per_host": int(links.get("nodes_per_host", 1)),
        "rack": str(links.get("rack", "pool")),
        "link_kinds": dict(links.get("kinds", {})),
    }
    fields.update({k: v for k, v in overrides.items() if v is not None})
    return SplitConfig(**fields)


def load_split_config(path_or_name: str | Path, mode: str = "auto", **overrides) -> SplitConfig:
    """The split settings of a fleet TOML file or bundled fleet name (as sim/fleet.load_fleet finds it)."""
    path = Path(path_or_name)
    if not path.is_file():
        path = FLEETS_DIR / f"{path_or_name}.toml"
    return split_config_from_toml(load_toml(path), mode, **overrides)


@dataclass(slots=True)
class _Move:
    req_id: str
    source: int
    target: int
    state: MigratedRequest
    max_tokens: int
    kv_bytes: int
    lora: LoraRequest | None = None  # its adapter: it runs, and its KV is keyed, under the same one there
    slo_tpot_s: float = 0.0  # its TPOT target (0: none), for the decode node's slack report


class SplitRun:
    """One simulator run's split: the router (the run's policy) and the hand-offs in flight. The simulator
    (sim/des.py) calls ``hand_off`` at a request's first token and ``land`` at the LAND event it scheduled."""

    def __init__(self, config: SplitConfig, fleet: Fleet, nodes: list, registry, router_config: RouterConfig) -> None:
        self.fleet = fleet
        self.nodes = nodes
        self.registry = registry
        self.index = {n.node_id: i for i, n in enumerate(nodes)}
        peak = {n.node_id: n.hello.hardware.peak_tflops for n in nodes}
        self.roles = config.roles_for(fleet, peak)
        self.links = config.link_model(fleet)
        self.queue = KVLinkQueue(self.links)
        self.kv_bytes_per_token = kv_bytes_per_token(fleet.model)
        self.router = PDSplitRouter(router_config, self.roles, self.links, self.kv_bytes_per_token, self.queue)
        self._moves: dict[int, _Move] = {}
        self._landing: dict[int, list[int]] = {}  # node index → slots of moves waiting for room there, in order
        self.num_waited_landings = 0
        self._next = 0
        self.num_handoffs = 0
        self.num_fallbacks = 0  # landed back on the source (the decode node could not take it)
        self.kv_bytes_total = 0
        self.transfer_s_total = 0.0
        self.by_link: dict[str, int] = {}

    def hand_off(self, now_s: float, source: int, req_id: str, max_tokens: int) -> tuple[float, int] | None:
        """Take ``req_id`` off node ``source`` after its first token if it has a decode node elsewhere: (when its
        KV lands, the move's slot) for the simulator to schedule; None: it stays and decodes where it is."""
        node = self.nodes[source]
        target_id = self.router.decode_target(req_id)
        if target_id is None or target_id == node.node_id:
            return None
        engine = node.core.engine
        state = engine.export_request(req_id)
        if state is None:
            return None
        names = [] if state.lora_id is None else engine.lora_names([state.lora_id])
        lora = engine.get_lora(names[0]) if names else None
        slo_tpot_s = node.core.tpot_target(req_id)
        node.core.abort([req_id])
        self.registry.on_finished(node.node_id, req_id)
        block_size = engine.cache_config.block_size
        nbytes = transferred_kv_bytes(len(state.block_ids) * block_size, self.kv_bytes_per_token, block_size)
        land_s = self.queue.reserve(node.node_id, target_id, nbytes, now_s)
        slot = self._next
        self._next += 1
        self._moves[slot] = _Move(req_id, source, self.index[target_id], state, max_tokens, nbytes, lora, slo_tpot_s)
        kind = self.links.kind(node.node_id, target_id)
        self.by_link[kind] = self.by_link.get(kind, 0) + 1
        self.kv_bytes_total += nbytes
        self.transfer_s_total += land_s - now_s
        self.num_handoffs += 1
        return land_s, slot

    def land(self, slot: int) -> int | None:
        """The move's KV has arrived: the decode node continues the request; the index of the node it runs on, or
        None when the decode node has no room yet (the move waits in its landing queue: ``after_step``)."""
        move = self._moves[slot]
        queue = self._landing.get(move.target)
        if queue or not self._has_room(move):
            self._landing.setdefault(move.target, []).append(slot)
            self.num_waited_landings += 1
            return None
        return self._land(slot)

    def after_step(self, i: int) -> None:
        """Node ``i`` finished a step: land the moves waiting for it, in order, while it has room."""
        queue = self._landing.get(i)
        while queue and self._has_room(self._moves[queue[0]]):
            self._land(queue.pop(0))

    def _has_room(self, move: _Move) -> bool:
        engine = self.nodes[move.target].core.engine
        stats = engine.make_stats()
        if stats.num_running == 0 and stats.num_waiting == 0:
            return True  # an idle node takes it whatever it holds (or refuses it: then the source takes it back)
        block_size = engine.cache_config.block_size
        need = -(-(len(move.state.token_ids) + LANDING_RESERVE_TOKENS) // block_size)
        return stats.num_waiting == 0 and stats.num_swapped == 0 and stats.num_free_device_blocks >= need

    def _land(self, slot: int) -> int:
        move = self._moves.pop(slot)
        state = move.state
        params = SamplingParams(temperature=0.0, max_tokens=max(move.max_tokens - state.num_output_tokens, 1))
        self.router.on_handed_off(move.req_id)
        for i in (move.target, move.source):  # the source takes it back (re-prefill) if the target cannot
            node = self.nodes[i]
            engine = node.core.engine
            if i == move.target and state.block_ids:
                engine.import_prefix(state.token_ids, len(state.block_ids), None, state.lora_id)
            try:
                node.core.add(
                    move.req_id, state.token_ids, params, priority=state.priority, lora=move.lora,
                    slo_tpot_s=move.slo_tpot_s,
                )  # fmt: skip
            except ValueError:
                continue
            block_size = engine.cache_config.block_size
            self.registry.on_routed(node.node_id, move.req_id, len(state.token_ids) % block_size + 1, params.max_tokens)
            self.registry.on_first_token(node.node_id, move.req_id)  # its prefill is done (the KV came with it)
            node.num_requests += i == move.target
            self.num_fallbacks += i != move.target
            return i
        raise RuntimeError(f"request {move.req_id}: neither its decode node nor its prefill node takes it back")

    @property
    def in_flight(self) -> int:
        """Moves whose KV is on the wire or waiting for room on their decode node."""
        return len(self._moves)

    def info(self) -> dict:
        """What the run's report states about the split."""
        counts: dict[str, int] = {}
        for role in self.roles.values():
            counts[role] = counts.get(role, 0) + 1
        roles_by_gpu = {}
        for n in self.fleet.nodes:
            roles_by_gpu[n.hardware.profile] = self.roles[n.node_id]
        return {
            "roles_by_gpu": roles_by_gpu,
            "num_nodes_by_role": counts,
            "kv_links": self.links.describe(),
            "handoffs": self.num_handoffs,
            "handoffs_by_link": dict(self.by_link),
            "fallbacks": self.num_fallbacks,
            "landings_waited_for_room": self.num_waited_landings,
            "kv_bytes_total": self.kv_bytes_total,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "mean_transfer_s": self.transfer_s_total / self.num_handoffs if self.num_handoffs else 0.0,
        }


def add_pd_split_args(parser: argparse.ArgumentParser) -> None:
    """The prefill/decode split's flags (sim/split.py)."""
    parser.add_argument(
        "--pd-split",
        default="none",
        choices=("none", "auto", "config"),
        help="also run the prefill/decode split (policy pd_split): auto = big-compute GPUs prefill, lean ones decode "
        "(controlplane/router/pd_split.py); config = the fleet TOML's [pd_split.roles]",
    )
    parser.add_argument(
        "--kv-rack",
        default=None,
        choices=("pool", "cell", "fleet", "none"),
        help="nodes sharing a rack (InfiniBand between them; Ethernet otherwise); default: the fleet TOML's or pool",
    )
    parser.add_argument("--prefill-min-share", type=float, default=None, help="the auto rule's compute share")


def pd_split_config(args: argparse.Namespace):
    """The split's SplitConfig from the flags and the fleet TOML; None without ``--pd-split``."""
    mode = getattr(args, "pd_split", "none")
    if mode == "none":
        return None
    return load_split_config(args.fleet, mode, rack=args.kv_rack, prefill_min_share=args.prefill_min_share)
