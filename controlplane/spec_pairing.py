"""SpecPairing: the control plane's shell around SpecPairPolicy (controlplane/spec_pairs.py).

    LoadReport ─► on_load_report ─┐
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

    def on_load_report(self, msg: LoadReport) -> None:
        self.reports[msg.node_id] = msg
        self.update()

    def on_node_lost(self, node_id: str) -> None:
        self.reports.pop(node_id, None)
        self.policy.forget(node_id)
        self.update()

    def update(self) -> None:
        if not self.seen_drafter:
            self.seen_drafter = any(h.draft_endpoint for h in self.hellos.values())
            if not self.seen_drafter:
                return
        for change in self.policy.decide(self.nodes(), self.clock.now()):
            log.info("speculative pair %s <- %s: %s", change.verifier, change.drafter or "(none)", change.reason)
            msg = SpecPair(
                node_id=change.verifier,
                drafter_node_id=change.drafter,
                draft_endpoint=change.endpoint,
                num_spec_tokens=change.num_spec_tokens or self.policy.config.num_spec_tokens,
                reason=change.reason,
            )
            try:
                self._send_to_node(msg, change.verifier)
            except MailboxFull:
                log.warning("node %s: could not tell it about its drafter (agent outbox full)", change.verifier)

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
