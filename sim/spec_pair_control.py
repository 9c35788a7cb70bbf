"""The control plane's speculative pairing, run in the fleet simulator on the simulated nodes' own messages.

    SimNode's LoadReport ─► PairingRegistry.report: stamped by the node's DrafterSwitch (agent/drafter_switch.py:
        its drafter, the acceptance rate since it paired) ─► ClusterRegistry.report, then, as controlplane/server.py
        does, SpecPairing.on_load_report (controlplane/spec_pairing.py) ─► SpecPairPolicy.decide
        (controlplane/spec_pairs.py) ─► SpecPair orders
    SpecPair ─► the verifier's simulated agent: the newest order per node is kept and carried out at that node's
        next LoadReport, which the simulator sends only between two of its steps (an agent switches proposers
        between steps too: agent/drafter_switch.py); ``PairedFleet.carry_out`` builds the pair's proposer

So "under-used" is what the policy measures (each drafter's ``num_running + num_waiting`` and KV usage in its
last report; the verifier's measured decode step and batch), never assumed, and pairs come and go with load.

The hellos are each node's own (NodeCore.hello: power score, the decode step its start-up profile predicted)
plus what a pairing agent adds: ``vocab_id`` (engine/spec/vocab_id.py over the simulated tokenizer) and, for
the nodes that run a DraftServer (``SpecPairsConfig.drafters``), the draft model, an endpoint, the draft's
tokenizer id and its step (the cost model's draft decode step at batch 1, as the profile predicts the target's).
"""

from __future__ import annotations

from typing import Any

from agent.drafter_switch import DrafterSwitch
from backends.sim.engine import SimTokenizer
from controlplane.registry import ClusterRegistry
from controlplane.spec_pairing import SpecPairing
from engine.clock import Clock
from engine.spec.vocab_id import vocab_id
from transport.messages import LoadReport, NodeHello, SpecPair


def sim_vocab_id(model) -> str:
    """The id of a simulated model's tokenizer (a ``sim:*`` ModelConfig)."""
    return vocab_id(SimTokenizer(model.vocab_size, model.eos_token_id))


class PairingRegistry(ClusterRegistry):
    """The run's registry with the control plane's pairing fed from it. fleet: the PairedFleet (its
    ``pair_hello`` and ``carry_out``). ``history``: every order, as (time, verifier, drafter, reason)."""

    def __init__(self, clock: Clock, fleet: Any) -> None:
        super().__init__(clock, heartbeat_timeout_s=1e18)
        self.fleet = fleet
        self.hellos: dict[str, NodeHello] = {}
        self.switches: dict[str, DrafterSwitch] = {}
        self.pending: dict[str, SpecPair] = {}
        self.history: list[tuple[float, str, str, str]] = []
        self.pairing = SpecPairing(self, self.hellos, self._order, fleet.pairs_config.policy_config())

    def join(self, hello: NodeHello):
        hello = self.fleet.pair_hello(hello)
        self.hellos[hello.node_id] = hello
        self.switches[hello.node_id] = DrafterSwitch()
        return super().join(hello)

    def report(self, report: LoadReport) -> bool:
        node_id = report.node_id
        switch = self.switches.get(node_id)
        order = self.pending.pop(node_id, None)
        if order is not None and switch is not None:
            self.fleet.carry_out(node_id, order, switch)
        if switch is not None:
            report = switch.report(report, self.fleet.engines[node_id])
        ok = super().report(report)
        self.pairing.on_load_report(report)
        return ok

    def _order(self, msg: SpecPair, node_id: str) -> None:
        self.pending[node_id] = msg  # the newest order wins (agent/verifier_pairing.py)
        self.history.append((self.clock.now(), node_id, msg.drafter_node_id, msg.reason))
