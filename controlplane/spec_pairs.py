"""Which weak node drafts for which strong node: the fleet's speculative pairs, sans-IO.

Nodes that run a DraftServer (``zoo agent --can-draft NAME``) advertise it in their NodeHello; every node
says its tokenizer (``vocab_id``). At each decision (a LoadReport arrived, a node left) the policy sees
every live node as a ``PairNode`` and answers the ``PairChange``s to send (controlplane/spec_pairing.py
turns them into SpecPair messages)::

    1. keep or break each pair:  drafter gone / draining            -> unpair now
                                 drafter busy (load >= busy_load)   -> unpair now (it serves its own requests)
                                 predicted TPOT no longer better    -> unpair (after hold_s since the last change)
    2. make new pairs:           verifiers (not idle drafters) strongest first; drafters idle (load <= idle_load),
                                 not stronger than the verifier, same tokenizer; the drafter with the lowest predicted
                                 TPOT (controlplane/spec_cost.py), kept only if it beats plain decode by
                                 min_gain; one verifier per drafter, one drafter per verifier

A pair refused for a reason other than load (a vocabulary mismatch, a stronger drafter, nothing measured
to predict with) is remembered in ``refusals`` with a clear reason (shown in stats). Load is
``num_running + num_waiting`` from the node's last LoadReport; the acceptance rate of a pair is what its
verifier reports while paired (kept per pair once measured), a prior before. Time comes from the caller.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from controlplane.spec_cost import PairPrediction, predict_pair_tpot


@dataclass(slots=True)
class SpecPairConfig:
    """enabled: pair at all. idle_load / busy_load: a drafter is paired at load <= idle_load and unpaired at
    load >= busy_load (hysteresis). max_kv_usage: a drafter fuller than this is busy too. min_gain: pair only if
    the predicted paired TPOT <= (1 - min_gain) * plain (negative: pair even when predicted slower, to measure
    a pair's acceptance rate; e.g. -1.0 pairs every compatible idle drafter). max_verifier_batch: speculation is
    off above this batch (SpecDecodeConfig.max_batch_size), so no pair helps. hop_s: the DraftPropose round trip.
    num_spec_tokens: k_max. verify_cost_per_token / initial_acceptance: the cost model's c and the alpha prior.
    hold_s: a pair is not broken for a worse prediction within this long of its last change (no flapping)."""

    enabled: bool = True
    idle_load: int = 1
    busy_load: int = 4
    max_kv_usage: float = 0.8
    min_gain: float = 0.1
    max_verifier_batch: int = 8
    hop_s: float = 0.001
    num_spec_tokens: int = 4
    verify_cost_per_token: float = 0.05
    initial_acceptance: float = 0.7
    hold_s: float = 2.0

    def __post_init__(self) -> None:
        if not 0 <= self.idle_load < self.busy_load:
            raise ValueError(f"need 0 <= idle_load < busy_load, got {self.idle_load}, {self.busy_load}")
        if not -10.0 <= self.min_gain < 1.0:
            raise ValueError(f"min_gain must be in [-10, 1), got {self.min_gain}")
        if not 1 <= self.num_spec_tokens <= 32:
            raise ValueError(f"num_spec_tokens must be in [1, 32], got {self.num_spec_tokens}")
        if self.hop_s < 0 or self.hold_s < 0 or self.verify_cost_per_token < 0:
            raise ValueError("hop_s, hold_s and verify_cost_per_token must be >= 0")
        if not 0.0 < self.initial_acceptance < 1.0:
            raise ValueError(f"initial_acceptance must be in (0, 1), got {self.initial_acceptance}")


@dataclass(slots=True)
class PairNode:
    """One live node as the pairing policy sees it (hello facts + its last LoadReport).

    routable: up (not draining or suspect). decode_step_s: its measured decode step (0: not measured).
    draft_endpoint: its DraftServer ("" = drafts for nobody). spec_drafter / spec_acceptance_rate: what its
    last LoadReport says about its own speculation.
    """

    node_id: str
    power_score: float
    vocab_id: str = ""
    routable: bool = True
    num_running: int = 0
    num_waiting: int = 0
    kv_usage: float = 0.0
    decode_batch_size: int = 0
    decode_step_s: float = 0.0
    draft_models: tuple[str, ...] = ()
    draft_endpoint: str = ""
    draft_vocab_id: str = ""
    draft_step_s: float = 0.0  # its DraftServer's measured time per drafted token (0: not measured)
    spec_drafter: str = ""
    spec_acceptance_rate: float = -1.0

    @property
    def load(self) -> int:
        return self.num_running + self.num_waiting

    @property
    def can_draft(self) -> bool:
        return bool(self.draft_endpoint and self.draft_models)


@dataclass(frozen=True, slots=True)
class PairChange:
    """Tell ``verifier`` to draft with ``drafter`` at ``endpoint`` ("" drafter: stop)."""

    verifier: str
    drafter: str
    endpoint: str
    num_spec_tokens: int
    reason: str


@dataclass(slots=True)
class SpecPairPolicy:
    config: SpecPairConfig = field(default_factory=SpecPairConfig)
    pairs: dict[str, str] = field(default_factory=dict)  # verifier -> drafter
    predictions: dict[str, PairPrediction] = field(default_factory=dict)  # verifier -> best pair's prediction
    refusals: dict[tuple[str, str], str] = field(default_factory=dict)  # (verifier, drafter) -> why not
    acceptance: dict[tuple[str, str], float] = field(default_factory=dict)  # measured alpha per pair
    _changed_s: dict[str, float] = field(default_factory=dict)  # verifier -> time of its last change
    _refused: set[tuple[str, str]] = field(default_factory=set)  # pairs whose pairing check failed
    _no_gain_s: dict[str, float] = field(default_factory=dict)  # verifier -> when a pair was broken for no gain
    num_pairs_total: int = 0
    num_unpairs_total: int = 0

    def decide(self, nodes: list[PairNode], now_s: float) -> list[PairChange]:
        """The changes to make now, given every live node; updates ``pairs``."""
        if not self.config.enabled:
            return []
        by_id = {n.node_id: n for n in nodes}
        self._learn_acceptance(by_id)
        changes = self._keep_or_break(by_id, now_s)
        changes += self._pair_new(by_id, now_s)
        return changes

    def refuse(self, verifier: str, drafter: str, why: str) -> None:
        """The pair did not take (the verifier's pairing check failed): drop it and keep the reason; the two
        are not paired again (a node that rejoins is forgotten, and may be)."""
        if self.pairs.get(verifier) == drafter:
            del self.pairs[verifier]
            self.num_unpairs_total += 1
        self.refusals[(verifier, drafter)] = why
        self._refused.add((verifier, drafter))

    def forget(self, node_id: str) -> None:
        """A node left: its pair as a verifier is gone with it (a drafter's pair breaks at the next decide)."""
        if self.pairs.pop(node_id, None) is not None:
            self.num_unpairs_total += 1
        self.predictions.pop(node_id, None)
        self._changed_s.pop(node_id, None)
        self._refused = {pair for pair in self._refused if node_id not in pair}

    # -- internals ------------------------------------------------------------------------------------

    def _learn_acceptance(self, by_id: dict[str, PairNode]) -> None:
        for verifier, drafter in self.pairs.items():
            node = by_id.get(verifier)
            if node is not None and node.spec_drafter == drafter and node.spec_acceptance_rate >= 0:
                self.acceptance[(verifier, drafter)] = node.spec_acceptance_rate

    def _keep_or_break(self, by_id: dict[str, PairNode], now_s: float) -> list[PairChange]:
        changes = []
        for verifier, drafter in list(self.pairs.items()):
            v = by_id.get(verifier)
            if v is None:
                self.forget(verifier)
                continue
            d = by_id.get(drafter)
            why = None
            if d is None or not d.routable or not d.can_draft:
                why = f"drafter {drafter} left or is draining"
            elif self._busy(d):
                why = f"drafter {drafter} is busy (load {d.load}, KV {d.kv_usage:.0%})"
            else:
                prediction, refusal = self._predict(v, d)
                if prediction is not None:
                    self.predictions[verifier] = prediction
                gain_lost = refusal or (prediction is not None and not self._gains(prediction))
                if gain_lost and now_s - self._changed_s.get(verifier, -1e18) >= self.config.hold_s:
                    why = refusal or (
                        f"predicted TPOT {_ms(prediction.tpot_paired_s)} paired vs {_ms(prediction.tpot_plain_s)} plain"
                    )
                    self._no_gain_s[verifier] = now_s  # not paired again within hold_s (no flapping)
            if why is not None:
                del self.pairs[verifier]
                self.num_unpairs_total += 1
                self._changed_s[verifier] = now_s
                changes.append(PairChange(verifier, "", "", 0, f"unpaired: {why}"))
        return changes

    def _pair_new(self, by_id: dict[str, PairNode], now_s: float) -> list[PairChange]:
        busy_drafters = set(self.pairs.values())
        paired = set(self.pairs)
        drafters = [
            d
            for d in by_id.values()
            if d.can_draft and d.routable and d.node_id not in busy_drafters and d.node_id not in paired
            and d.load <= self.config.idle_load and d.kv_usage <= self.config.max_kv_usage
        ]  # fmt: skip
        if not drafters:
            return []
        verifiers = sorted(
            (
                v
                for v in by_id.values()
                if v.routable
                and (v.load > 0 or not v.can_draft)
                and v.node_id not in paired
                and v.node_id not in busy_drafters
            ),  # an idle node that can draft is a drafter, not a verifier (idle L4s never pair with each other)
            key=lambda v: (-v.power_score, -v.load, v.node_id),
        )
        changes = []
        for v in verifiers:
            if v.node_id in busy_drafters or now_s - self._no_gain_s.get(v.node_id, -1e18) < self.config.hold_s:
                continue  # (drafting for a verifier paired earlier in this pass: a node is one or the other)
            best: tuple[PairPrediction, PairNode] | None = None
            for d in drafters:
                if d.node_id == v.node_id or d.node_id in busy_drafters or d.node_id in self.pairs:
                    continue
                if (v.node_id, d.node_id) in self._refused:
                    continue
                prediction, refusal = self._predict(v, d)
                if refusal is not None:
                    self.refusals[(v.node_id, d.node_id)] = refusal
                    continue
                self.refusals.pop((v.node_id, d.node_id), None)
                if best is None or prediction.tpot_paired_s < best[0].tpot_paired_s:
                    best = (prediction, d)
            if best is None:
                continue
            prediction, d = best
            self.predictions[v.node_id] = prediction
            if not self._gains(prediction):
                self.refusals[(v.node_id, d.node_id)] = (
                    f"predicted TPOT {_ms(prediction.tpot_paired_s)} paired vs {_ms(prediction.tpot_plain_s)} plain: "
                    f"less than {self.config.min_gain:.0%} better"
                )
                continue
            self.pairs[v.node_id] = d.node_id
            busy_drafters.add(d.node_id)
            self._changed_s[v.node_id] = now_s
            self.num_pairs_total += 1
            reason = (
                f"paired: predicted TPOT {_ms(prediction.tpot_paired_s)} vs {_ms(prediction.tpot_plain_s)} plain "
                f"(k={prediction.num_spec_tokens}, alpha={prediction.alpha:.2f})"
            )
            changes.append(PairChange(v.node_id, d.node_id, d.draft_endpoint, prediction.num_spec_tokens, reason))
        return changes

    def _busy(self, d: PairNode) -> bool:
        return d.load >= self.config.busy_load or d.kv_usage > self.config.max_kv_usage

    def _gains(self, prediction: PairPrediction) -> bool:
        return prediction.tpot_paired_s <= (1.0 - self.config.min_gain) * prediction.tpot_plain_s

    def _predict(self, v: PairNode, d: PairNode) -> tuple[PairPrediction | None, str | None]:
        """The pair's prediction, or why it cannot pair at all."""
        if not v.vocab_id or v.vocab_id != d.draft_vocab_id:
            return None, (
                f"vocabulary mismatch: {v.node_id} uses tokenizer {v.vocab_id or '(unsaid)'}, "
                f"{d.node_id}'s draft models {list(d.draft_models)} use {d.draft_vocab_id or '(unsaid)'}"
            )
        if d.power_score > v.power_score:
            return None, f"drafter {d.node_id} (power {d.power_score:.2f}) is stronger than {v.node_id}"
        if v.decode_step_s <= 0:
            return None, f"{v.node_id}'s decode step is not measured yet"
        if v.decode_batch_size > self.config.max_verifier_batch:
            return None, f"{v.node_id}'s batch {v.decode_batch_size} is above {self.config.max_verifier_batch}"
        draft_step_s = d.draft_step_s
        if draft_step_s <= 0:  # not measured: the drafter's speed on the verifier's model (pessimistic for a
            if d.power_score <= 0 or v.power_score <= 0:  # smaller draft model)
                return None, f"{d.node_id}'s draft step is not measured"
            draft_step_s = v.decode_step_s * v.power_score / d.power_score
        alpha = self.acceptance.get((v.node_id, d.node_id), self.config.initial_acceptance)
        c = self.config
        return predict_pair_tpot(
            v.decode_step_s, draft_step_s, c.hop_s, alpha, c.num_spec_tokens, c.verify_cost_per_token
        ), None


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms"
