"""SpecPairing: the control plane's shell around SpecPairPolicy (controlplane/spec_pairs.py).

    LoadReport ─► on_load_report ─┐  (at most every DECIDE_INTERVAL_S)
    node lost  ─► on_node_lost   ─┴─► PairNodes (registry views + hellos + last reports) ─► policy.decide
                                                  ─► SpecPair(drafter, endpoint | "") ─► the verifier's agent

The verifier's agent switches its proposer to the remote drafter (or back) and says so in its LoadReports
(``spec_drafter``, ``spec_acceptance_rate``); ``summary()`` is what stats, /metrics and ``zoo top`` show.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping

from controlplane.spec_pairs import PairNode, SpecPairConfig, SpecPairPolicy
from engine.clock import Clock
from transport.actor import MailboxFull
from transport.messages import LoadReport, NodeHello, SpecPair

log = logging.getLogger(__name__)

RECONCILE_GRACE_S = 5.0  # an agent's reports may lag the last order this long (its pairing check included)
# a decision looks at every node: made at most this often on load reports (each node reports several times a second,
# so deciding on every report would cost O(nodes) per report); a node lost is decided at once
DECIDE_INTERVAL_S = 0.2


class SpecPairing:
    """registry: the ClusterRegistry (``views()``, ``state(node_id)``); hellos: node id → its NodeHello;
    send_to_node(msg, node_id): the agent socket's send."""

    def __init__(
        self,
        registry,
        hellos: Mapping[str, NodeHello],
        send_to_node: Callable,
        config: SpecPairConfig | None = None,
    ) -> None:
        self.registry = registry
        self.hellos = hellos
        self._send_to_node = send_to_node
        self.clock: Clock = registry.clock
        self.policy = SpecPairPolicy(config or SpecPairConfig())
        self.reports: dict[str, LoadReport] = {}
        self.seen_drafter = False  # a node that can draft has joined (else nothing is ever decided)
        self._ordered_s: dict[str, float] = {}  # verifier -> when the last SpecPair was sent to it
        self._decided_s = float("-inf")  # when policy.decide last ran

    def on_load_report(self, msg: LoadReport) -> None:
        self.reports[msg.node_id] = msg
        if self.clock.now() - self._decided_s >= DECIDE_INTERVAL_S:
            self.update()
        self._reconcile(msg)

    def _reconcile(self, msg: LoadReport) -> None:
        """What the verifier reports against what was decided, once no order to it is younger than
        RECONCILE_GRACE_S: drafting with a node it was not paired with here (this control plane restarted, an
        order was lost) → told to stop; not drafting with the drafter it was paired with (its pairing check
        failed: no answer, another vocabulary) → the pair is dropped and refused for that reason."""
        paired = self.policy.pairs.get(msg.node_id, "")
        if msg.spec_drafter == paired:
            return
        now_s = self.clock.now()
        if now_s - self._ordered_s.get(msg.node_id, -1e18) < RECONCILE_GRACE_S:
            return
        if paired:
            self.policy.refuse(msg.node_id, paired, f"{msg.node_id} could not pair with {paired} (see its log)")
        if msg.spec_drafter:
            self._send(SpecPair(node_id=msg.node_id, reason=f"unpaired: {msg.spec_drafter} is not its drafter here"))

    def on_node_lost(self, node_id: str) -> None:
        self.reports.pop(node_id, None)
        self.policy.forget(node_id)
        self.update()

    def update(self) -> None:
        if not self.seen_drafter:
            self.seen_drafter = any(h.draft_endpoint for h in self.hellos.values())
            if not self.seen_drafter:
                return
        self._decided_s = self.clock.now()
        for change in self.policy.decide(self.nodes(), self._decided_s):
            log.info("speculative pair %s <- %s: %s", change.verifier, change.drafter or "(none)", change.reason)
            msg = SpecPair(
                node_id=change.verifier,
                drafter_node_id=change.drafter,
                draft_endpoint=change.endpoint,
                num_spec_tokens=change.num_spec_tokens or self.policy.config.num_spec_tokens,
                reason=change.reason,
            )
            self._send(msg)

    def _send(self, msg: SpecPair) -> None:
        self._ordered_s[msg.node_id] = self.clock.now()
        try:
            self._send_to_node(msg, msg.node_id)
        except MailboxFull:
            log.warning("node %s: could not tell it about its drafter (agent outbox full)", msg.node_id)

    def nodes(self) -> list[PairNode]:
        nodes = []
        for view in self.registry.views():
            hello = self.hellos.get(view.node_id)
            if hello is None:
                continue
            report = self.reports.get(view.node_id)
            step_ms = view.decode_step_ms or hello.decode_step_ms
            nodes.append(
                PairNode(
                    node_id=view.node_id,
                    power_score=view.power_score,
                    vocab_id=hello.vocab_id,
                    routable=str(self.registry.state(view.node_id)) == "up",
                    num_running=view.num_running,
                    num_waiting=view.num_waiting,
                    kv_usage=view.kv_usage,
                    decode_batch_size=view.decode_batch_size,
                    decode_step_s=step_ms / 1e3,
                    draft_models=tuple(hello.draft_models),
                    draft_endpoint=hello.draft_endpoint,
                    draft_vocab_id=hello.draft_vocab_id,
                    draft_step_s=hello.draft_step_ms / 1e3,
                    spec_drafter=report.spec_drafter if report is not None else "",
                    spec_acceptance_rate=report.spec_acceptance_rate if report is not None else -1.0,
                )
            )
        return nodes

    def summary(self) -> dict:
        """For stats(): the pairs the policy made, what each verifier's agent says it drafts with, the
        predictions and the refusals."""
        policy = self.policy
        return {
            "pairs": dict(policy.pairs),
            "active": {n: r.spec_drafter for n, r in self.reports.items() if r.spec_drafter},
            "acceptance": {n: r.spec_acceptance_rate for n, r in self.reports.items() if r.spec_acceptance_rate >= 0},
            "predictions": {
                n: {
                    "tpot_plain_s": p.tpot_plain_s,
                    "tpot_paired_s": p.tpot_paired_s,
                    "num_spec_tokens": p.num_spec_tokens,
                    "alpha": p.alpha,
                }
                for n, p in policy.predictions.items()
            },
            "refusals": {f"{v}<-{d}": why for (v, d), why in policy.refusals.items()},
            "num_pairs_total": policy.num_pairs_total,
            "num_unpairs_total": policy.num_unpairs_total,
        }
