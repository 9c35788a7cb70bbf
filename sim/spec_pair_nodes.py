"""Pairs at run time in the fleet simulator: the drafter's GPU shared honestly, the verifier's rounds priced.

``PairedFleet`` is a ``Fleet`` whose nodes of ``drafter_ids`` run a DraftServer beside their serving and whose
registry (``make_registry``, sim/spec_pair_control.py) runs the control plane's own pairing policy on the
nodes' hellos and LoadReports; a SpecPair order is carried out by ``carry_out`` (sim/des.py builds every node
through ``fleet.node_engine`` and its registry through ``fleet.make_registry``):

- the **verifier** (the node the policy chose) gets the production ``Speculator`` (engine/spec/speculator.py:
  adaptive k from the measured acceptance and costs, up to the order's k, off above ``max_batch_size`` = the
  pair's crossover batch by this simulator's costs) with a ``PairProposer``, and its simulated runner a
  ``PairSpecModel``: a verification step's
  time = hop + k draft decode steps (the draft's shape on the drafter's GPU) + the target's verify step;
  drafts are accepted i.i.d. with rate alpha. The drafter's catch-up (prefilling a request new to it, or
  the tokens it missed while speculation was off) is charged to the drafter's GPU but kept off the
  round's path: it follows the verifier's token stream in the background (an optimistic assumption, so a
  losing pair loses for its draft steps, not for this).
- the **drafter** (weak node) keeps serving its own requests through a ``DraftHostRunner``: drafts run at
  once (a high-priority stream) and every second of them is taken from its own serving: a draft that
  overlaps its step in flight lengthens its next step by that time, one still running when it starts a
  step delays that step by the rest; drafts while it is idle cost it nothing. It declines a round (the
  verifier then decodes plainly, as after a drafter's timeout) while a backlog of its own requests waits
  (more than MAX_HOST_WAITING) or it has used up its drafting share (``max_draft_share``, a token
  bucket). Its KV room shrinks by the draft's weights and a draft-KV reserve.

Assumption stated: the draft's own KV for the accepted tokens is written by its next round's first step
(free in the memory-bound decode regime). A node's start-up profile (NodeCore.profile) runs plain, so the
router starts from the same measured rates with and without pairs; every node starts unpaired.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import msgspec

from agent.drafter_switch import DrafterSwitch
from backends.checkpoint.model_config import ModelConfig
from backends.sim.cost_model import BYTES_PER_VALUE, StepCostModel
from backends.sim.engine import build_sim_engine
from backends.sim.model_shapes import kv_bytes_per_token, weight_bytes
from backends.sim.spec_model import DEFAULT_ALPHA, SimSpecModel
from engine.batch import RunnerOutput, SchedulerOutput
from engine.clock import Clock
from engine.llm_engine import LLMEngine
from engine.spec import SpecDecodeConfig
from engine.spec.proposer import Draft, DraftRequest
from sim.fleet import Fleet, NodeSpec
from sim.spec_pair_control import PairingRegistry, sim_vocab_id
from sim.spec_pairs import SpecPairsConfig, crossover_batch_size, pair_costs
from transport.messages import NodeHello, SpecPair

DRAFT_KV_RESERVE_GIB = 1.0  # the draft's KV on the drafter (a 1B draft's KV is ~1/4 of an 8B's per token)
PROFILE_PREFIX = "zoo-profile-"  # NodeCore.profile()'s requests: measured plain, so every fleet starts alike
DRAFT_BUCKET_S = 0.25  # the drafting token bucket's depth, seconds of draft work
MAX_HOST_WAITING = 4  # a drafter with more of its own requests waiting than this declines rounds


class DraftHostRunner:
    """A weak node's runner that also drafts for its verifier (wraps its SimModelRunner; attributes pass through)."""

    def __init__(self, runner, clock: Clock, max_draft_share: float) -> None:
        self.runner = runner
        self.clock = clock
        self.max_draft_share = max_draft_share
        self.engine: LLMEngine | None = None  # set once built: its backlog decides whether to draft
        self._own_until = 0.0  # when its own step in flight ends
        self._draft_until = 0.0  # when the last draft ends
        self._debt_s = 0.0  # draft time that interrupted its step in flight, paid by its next step
        self._bucket_s = DRAFT_BUCKET_S
        self._bucket_at = 0.0
        self.draft_s_total = 0.0
        self.num_rounds = 0
        self.num_declined = 0

    def __getattr__(self, name: str):
        return getattr(self.runner, name)

    def _refill(self, now: float) -> None:
        if now > self._bucket_at:
            self._bucket_s = min(DRAFT_BUCKET_S, self._bucket_s + (now - self._bucket_at) * self.max_draft_share)
            self._bucket_at = now

    def can_draft(self) -> bool:
        """At most MAX_HOST_WAITING requests of its own waiting (a backlog, not the one that just arrived),
        and drafting share left."""
        now = self.clock.now()
        self._refill(now)
        engine = self.engine
        waiting = 0 if engine is None else engine.num_unfinished_requests - len(engine.scheduler.running_requests())
        if waiting > MAX_HOST_WAITING or self._bucket_s <= 0.0:
            self.num_declined += 1
            return False
        return True

    def charge(self, draft_s: float) -> None:
        """A round's draft work (``draft_s`` of this GPU) starts now."""
        now = self.clock.now()
        self._refill(now)
        self._bucket_s -= draft_s
        if now < self._own_until:
            self._debt_s += draft_s
        self._draft_until = max(now, self._draft_until) + draft_s
        self.draft_s_total += draft_s
        self.num_rounds += 1

    def execute(self, batch: SchedulerOutput) -> RunnerOutput:
        out = self.runner.execute(batch)
        if batch.is_empty:
            return out
        return self._with_draft_debt(out)

    def execute_with_decode_rows(self, batch: SchedulerOutput, num_rows: int, kv_read: int) -> RunnerOutput:
        """A mixed step (engine/mixed_step.py): priced by the wrapped runner, its draft debt paid as ``execute``'s."""
        return self._with_draft_debt(self.runner.execute_with_decode_rows(batch, num_rows, kv_read))

    def _with_draft_debt(self, out: RunnerOutput) -> RunnerOutput:
        """The step's time with the draft work that interrupted the last one (or runs still) added."""
        now = self.clock.now()
        extra = self._debt_s + max(0.0, self._draft_until - now)
        self._debt_s = 0.0
        self._draft_until = min(self._draft_until, now)
        step_s = out.step_time_s + extra
        self._own_until = now + step_s
        return dataclasses.replace(out, step_time_s=step_s)


@dataclass(slots=True)
class PairSpecModel(SimSpecModel):
    """The verifier's view of its drafter: draws acceptance (SimSpecModel) and prices a round on the pair."""

    host: Any = None  # the drafter (a DraftHostRunner, or _LazyHost looking it up); None = drafting is free
    hop_s: float = 0.0
    pending_prefill: list[int] = field(default_factory=list)  # catch-up tokens per request new to the drafter
    num_rounds: int = 0
    catch_up_s_total: float = 0.0  # the drafter's catch-up prefills (its GPU time, off the round's path)

    def draft_time_s(self, num_requests: int, num_drafts: int, context_tokens: int) -> float:
        if num_drafts <= 0:
            return 0.0
        draft_s = SimSpecModel.draft_time_s(self, num_requests, num_drafts, context_tokens)
        catch_up_s = 0.0
        if self.pending_prefill and self.draft_cost is not None:
            q = self.pending_prefill
            catch_up_s = self.draft_cost.step_time_s(sum(q), len(q), 0, sum(n * (n + 1) / 2 for n in q), 0)
        self.pending_prefill = []
        if self.host is not None:
            self.host.charge(catch_up_s + draft_s)
        self.num_rounds += 1
        self.catch_up_s_total += catch_up_s
        return self.hop_s + draft_s


class PairProposer:
    """Drafts on the paired weak node: dummy tokens (the runner draws their fate), or none when it declines."""

    name = "pair"

    def __init__(self, token_id: int, spec: PairSpecModel) -> None:
        self.token_id = token_id
        self.spec = spec
        self._known: dict[str, int] = {}  # req_id -> tokens whose KV the drafter holds

    def propose(self, requests: list[DraftRequest]) -> dict[str, Draft]:
        host = self.spec.host
        requests = [r for r in requests if not r.req_id.startswith(PROFILE_PREFIX)]
        if not requests or host is None or not host.can_draft():
            return {}
        known = self._known
        for r in requests:
            n = len(r.token_ids)
            if n - known.get(r.req_id, 0) > 2 * r.num_spec_tokens + 2:  # new to the drafter, or long out of touch
                self.spec.pending_prefill.append(n - known.get(r.req_id, 0))
            known[r.req_id] = n
        return {r.req_id: Draft([self.token_id] * r.num_spec_tokens) for r in requests}

    def drop(self, req_ids) -> None:
        for req_id in req_ids:
            self._known.pop(req_id, None)


@dataclass(slots=True)
class PairedFleet(Fleet):
    """A fleet whose pairs the control plane's policy makes during a run (see the module docstring).

    The nodes of ``drafter_ids`` run a DraftServer (a DraftHostRunner, their KV room shrunk by the draft);
    every node may be told to verify. The last run's objects: ``engines`` (node id -> engine), ``hosts``
    (drafter id -> DraftHostRunner), ``spec_models`` / ``speculators`` (verifier id -> each pairing's
    PairSpecModel / the speculators whose counts add up), ``control`` (the PairingRegistry)."""

    pairs_config: SpecPairsConfig = field(default_factory=SpecPairsConfig)
    engines: dict = field(default_factory=dict)
    hosts: dict = field(default_factory=dict)
    spec_models: dict = field(default_factory=dict)
    speculators: dict = field(default_factory=dict)
    control: PairingRegistry | None = None

    @property
    def drafter_ids(self) -> list[str]:
        """The nodes that run a DraftServer: of ``pairs_config.drafters``' GPUs, or the weak ones."""
        cfg = self.pairs_config
        if cfg.drafters is not None:
            return [n.node_id for n in self.nodes if n.hardware.profile in cfg.drafters]
        ctx = cfg.context_tokens
        step = {n.node_id: StepCostModel(self.model, n.hardware).decode_step_s(1, ctx) for n in self.nodes}
        fastest = min(step.values())
        return [n for n, s in step.items() if s >= cfg.min_step_ratio * fastest]

    def node_engine(self, node: NodeSpec, *, clock: Clock | None = None, realtime: bool = False, **kw) -> LLMEngine:
        if realtime:
            raise ValueError("spec pairs run in the virtual-time simulator only")
        if node.node_id in self.drafter_ids:
            engine = self._drafter_engine(node, self.pairs_config.draft_for(self.model), clock)
        else:
            engine = Fleet.node_engine(self, node, clock=clock)
        self.engines[node.node_id] = engine
        self.spec_models[node.node_id], self.speculators[node.node_id] = [], []
        return engine

    def make_registry(self, clock: Clock) -> PairingRegistry:
        self.control = PairingRegistry(clock, self)
        return self.control

    def pair_hello(self, hello: NodeHello) -> NodeHello:
        """``hello`` as a pairing agent sends it: its tokenizer, and its DraftServer if it runs one."""
        draft = self.pairs_config.draft_for(self.model)
        fields = {"vocab_id": sim_vocab_id(self.model)}
        if hello.node_id in self.hosts:
            hw = next(n.hardware for n in self.nodes if n.node_id == hello.node_id)
            step_s = StepCostModel(draft, hw).decode_step_s(1, self.pairs_config.context_tokens)
            fields.update(
                draft_models=[draft.name],
                draft_endpoint=f"sim://{hello.node_id}/draft",
                draft_vocab_id=sim_vocab_id(draft),
                draft_step_ms=step_s * 1e3,
            )
        return msgspec.structs.replace(hello, **fields)

    def carry_out(self, node_id: str, order: SpecPair, switch: DrafterSwitch) -> None:
        """The verifier's agent acts on ``order`` between two of its steps: drafts with the drafter named, or
        (no endpoint) decodes plainly again; through the agent's own DrafterSwitch."""
        engine = self.engines[node_id]
        runner = engine.runner.runner if isinstance(engine.runner, DraftHostRunner) else engine.runner
        old = engine.speculator
        if not order.draft_endpoint:
            switch.switch(engine, None, None, "")
            runner.spec = None
            return
        spec, config = self._pairing(node_id, order, runner)
        runner.spec = spec
        switch.switch(engine, PairProposer(runner.dummy_token_id, spec), config, order.drafter_node_id)
        chain = self.speculators[node_id]
        if old is not None and chain and chain[-1] is old:
            chain[-1] = engine.speculator  # it carries on the old one's counts
        else:
            chain.append(engine.speculator)

    def _pairing(self, node_id: str, order: SpecPair, runner) -> tuple[PairSpecModel, SpecDecodeConfig]:
        """The pair's round model (this module's costs) and the verifier's speculator settings."""
        cfg = self.pairs_config
        draft = cfg.draft_for(self.model)
        verifier_hw = next(n.hardware for n in self.nodes if n.node_id == node_id)
        drafter_hw = next(n.hardware for n in self.nodes if n.node_id == order.drafter_node_id)
        costs = pair_costs(self.model, draft, verifier_hw, drafter_hw, cfg.hop_s)
        ctx, k = cfg.context_tokens, max(1, order.num_spec_tokens)
        plain = costs.plain_step_s(1, ctx)
        models = self.spec_models[node_id]
        seed = sum(ord(c) for c in node_id) + 7919 * len(models)  # fixed per verifier and pairing: runs repeat
        spec = PairSpecModel(cfg.alpha, StepCostModel(draft, drafter_hw, block_size=runner.cost.block_size), seed)
        spec.hop_s = cfg.hop_s
        spec.host = _LazyHost(self.hosts, order.drafter_node_id)
        models.append(spec)
        config = SpecDecodeConfig(
            method="model",
            draft_model=draft.name,
            num_spec_tokens=k,  # the policy's k, as the agent takes it (agent/verifier_pairing.py)
            draft_cost=(cfg.hop_s + k * costs.draft_step_s(1, ctx)) / (k * plain),
            verify_cost_per_token=max(0.0, costs.verify_step_s(1, k, ctx) - plain) / (k * plain),
            initial_acceptance=DEFAULT_ALPHA,  # the engine's prior; it learns the drawn rate
            # the engine turns speculation off above the cost model's crossover batch (0: it never gains, as
            # in mode "all": never forced off, the adaptive k turns it down)
            max_batch_size=crossover_batch_size(costs, ctx, cfg.alpha, k, cfg.min_gain),
        )
        return spec, config

    def _drafter_engine(self, node: NodeSpec, draft: ModelConfig, clock: Clock | None) -> LLMEngine:
        hardware, settings = node.hardware, self.engine
        cache = settings.cache_config(self.model, hardware)
        block_bytes = kv_bytes_per_token(self.model, BYTES_PER_VALUE) * settings.block_size
        taken = weight_bytes(draft, BYTES_PER_VALUE) + DRAFT_KV_RESERVE_GIB * 2**30
        num_blocks = cache.num_device_blocks - int(-(-taken // block_bytes))
        if num_blocks < 1:
            raise ValueError(f"{node.node_id}: no KV room left for {self.model.name} beside the draft {draft.name}")
        engine = build_sim_engine(
            self.model.name,
            hardware.profile,
            hardware.tp,
            scheduler_config=settings.scheduler_config(self.model),
            cache_config=dataclasses.replace(cache, num_device_blocks=num_blocks),
            keep_cache_blocks=True,
            realtime=False,
            clock=clock,
            detokenize=False,
            hardware=hardware,
            lora_config=settings.lora,
        )
        host = DraftHostRunner(engine.runner, clock, self.pairs_config.max_draft_share)
        host.engine = engine
        engine.runner = host
        self.hosts[node.node_id] = host
        return engine


class _LazyHost:
    """The drafter's runner, looked up at each use."""

    def __init__(self, hosts: dict, node_id: str) -> None:
        self._hosts, self._node_id = hosts, node_id

    def can_draft(self) -> bool:
        host = self._hosts.get(self._node_id)
        return host is not None and host.can_draft()

    def charge(self, draft_s: float) -> None:
        host = self._hosts.get(self._node_id)
        if host is not None:
            host.charge(draft_s)


def paired_fleet(fleet: Fleet, config: SpecPairsConfig) -> Fleet:
    """``fleet`` with its drafters' DraftServers and the control plane's pairing (unchanged for mode "none")."""
    if config.mode == "none":
        return fleet
    config.draft_for(fleet.model)  # a bad draft name fails now
    base = {f.name: getattr(fleet, f.name) for f in dataclasses.fields(Fleet)}
    return PairedFleet(**base, pairs_config=config)


def spec_pairs_info(fleet: Fleet) -> dict:
    """What the pairing did in the last run: the policy's pairs and orders, and per verifier ever paired the
    speculation counters, per drafter its drafting."""
    if not isinstance(fleet, PairedFleet):
        return {"mode": "none"}
    cfg = fleet.pairs_config
    control = fleet.control
    summary = control.pairing.summary() if control is not None else {}
    history = control.history if control is not None else []
    out = {
        "mode": cfg.mode,
        "decided_by": "controlplane/spec_pairs.py SpecPairPolicy on the simulated hellos and LoadReports",
        "alpha": cfg.alpha,
        "alpha_source": "assumed: Leviathan et al. 2023 Table 3 range 0.6-0.8 (backends/sim/spec_model.py)",
        "draft_model": cfg.draft_for(fleet.model).name,
        "drafters": fleet.drafter_ids,
        "k_max": cfg.k_max,
        "hop_s": cfg.hop_s,
        "pairs_at_end": summary.get("pairs", {}),
        "num_pairs_total": summary.get("num_pairs_total", 0),
        "num_unpairs_total": summary.get("num_unpairs_total", 0),
        "predictions": summary.get("predictions", {}),
        "refusals": dict(list(summary.get("refusals", {}).items())[:10]),
        "orders": [{"t_s": round(t, 3), "verifier": v, "drafter": d, "reason": r} for t, v, d, r in history[:20]],
        "num_orders": len(history),
        "pairs": [],
    }
    ever = {}
    for _, v, d, _ in history:
        if d:
            ever.setdefault(v, set()).add(d)
    for verifier, drafters in sorted(ever.items()):
        engine, models = fleet.engines[verifier], fleet.spec_models[verifier]
        stats = [s.make_stats() for s in fleet.speculators[verifier]]
        drafted = sum(s.num_draft_tokens_total for s in stats)
        accepted = sum(s.num_accepted_tokens_total for s in stats)
        drafts = sum(s.num_drafts_total for s in stats)
        rounds, steps = sum(m.num_rounds for m in models), engine.runner.num_steps
        row = {
            "verifier": verifier,
            "drafters": sorted(drafters),
            "spec_rounds": rounds,
            "drafter_catch_up_s": sum(m.catch_up_s_total for m in models),
            "verifier_steps": steps,
            "spec_step_share": rounds / steps if steps else 0.0,
            "steps_spec_off": sum(s.num_steps_spec_off_total for s in stats),
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "mean_accepted_tokens": 1.0 + accepted / drafts if drafts else 1.0,
        }
        hosts = [fleet.hosts[d] for d in sorted(drafters)]
        row.update(
            drafter_draft_s=sum(h.draft_s_total for h in hosts),
            drafter_declined_rounds=sum(h.num_declined for h in hosts),
        )
        out["pairs"].append(row)
    rounds = sum(p["spec_rounds"] for p in out["pairs"])
    steps = sum(p["verifier_steps"] for p in out["pairs"])
    out["spec_step_share"] = rounds / steps if steps else 0.0
    return out


def add_spec_pair_args(parser) -> None:
    """``zoo sim --spec-pairs auto|all|none`` and the pairs' settings."""
    d = SpecPairsConfig()
    parser.add_argument(
        "--spec-pairs",
        choices=("none", "auto", "all"),
        default="none",
        help="speculative pairs: weak nodes run a draft model for strong ones, paired during the run by the control "
        "plane's policy on the nodes' load reports (auto: its defaults; all: forced, every compatible idle drafter)",
    )
    parser.add_argument("--spec-alpha", type=float, default=d.alpha, help="pairs: per-token draft acceptance rate")
    parser.add_argument("--spec-k", type=int, default=d.k_max, help="pairs: the most drafts per round")
    parser.add_argument("--spec-draft", default=None, help="pairs: the draft's shape (default: the target's usual)")
    parser.add_argument("--spec-hop", type=float, default=d.hop_s, help="pairs: a round's network time, s")
    parser.add_argument(
        "--spec-pair-min-gain",
        type=float,
        default=d.policy_min_gain,
        help="pairs (auto): the control plane's min_gain, as `zoo controlplane --spec-pair-min-gain`",
    )


def apply_spec_pairs(args, fleet: Fleet, mean_context_tokens: float) -> Fleet:
    """``fleet`` with the pairing ``--spec-pairs`` asks for (unchanged for "none"); ValueError on bad settings."""
    mode = getattr(args, "spec_pairs", "none")
    if mode == "none":
        return fleet
    config = SpecPairsConfig(
        mode=mode,
        draft_model=args.spec_draft,
        alpha=args.spec_alpha,
        k_max=args.spec_k,
        hop_s=args.spec_hop,
        context_tokens=mean_context_tokens,
        policy_min_gain=getattr(args, "spec_pair_min_gain", SpecPairsConfig().policy_min_gain),
    )
    return paired_fleet(fleet, config)


def format_spec_pairs(info: dict) -> str:
    """The pairing's orders and counters (``spec_pairs_info``) as lines for the log."""
    lines = [
        f"spec pairs ({info['mode']}, decided by the control plane's policy): draft {info.get('draft_model')} on "
        f"{len(info.get('drafters', []))} nodes, alpha {info.get('alpha')} ({info.get('alpha_source')}), "
        f"k <= {info.get('k_max')}; {info.get('num_pairs_total', 0)} pairings, {info.get('num_unpairs_total', 0)} "
        f"unpairings; verifier steps that speculated: {info.get('spec_step_share', 0.0):.1%}"
    ]
    for p in info.get("pairs", []):
        lines.append(
            f"  {p['verifier']} <- {','.join(p['drafters'])}: {p['spec_rounds']} rounds in {p['verifier_steps']} "
            f"steps, acceptance {p['acceptance_rate']:.2f}, drafting {p['drafter_draft_s']:.1f} s, declined "
            f"{p['drafter_declined_rounds']} rounds"
        )
    for (v, d), why in list(_split_refusals(info.get("refusals", {})))[:3]:
        lines.append(f"  refused {v} <- {d}: {why}")
    return "\n".join(lines)


def _split_refusals(refusals: dict):
    for key, why in refusals.items():
        v, _, d = key.partition("<-")
        yield (v, d), why
