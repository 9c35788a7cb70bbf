"""Predicted-output-aware routing: send a request with OpenAI's ``prediction`` where its node will draft from it.

A predicted output (the file being edited, sent back mostly unchanged) is drafted from only on a node that speculates
(``zoo agent --speculative ngram|model|remote``: engine/spec/prediction_drafts.py); anywhere else it is ignored
and every one of its tokens is a decode step. Where it is drafted from, an answer that repeats it takes a fraction
of the steps (2.1x fewer seconds measured on SmolLM2 with n-gram speculation,
bench/results/2026-12-06-sdk-batches-prediction-interop-b.json). So, as adapter affinity does for a LoRA request
(router/lora_affinity.py), the speculating nodes are offered to the policy alone while one of them has an empty
queue; once they all queue work, or none speculates, every node is offered and the policy's own load pricing
decides. The speculating nodes are a hello fact, so the subset keeps the registry's change mark (the policy's
tables stay incremental: router/node_changes.py). Sans-IO.
"""

from __future__ import annotations

from controlplane.router.policy import ClusterSnapshot

SPECULATING = "speculates"  # the subgroup's tag (router/node_changes.py ChangeMark.subgroup)


def prefer_speculating(snapshot: ClusterSnapshot) -> ClusterSnapshot:
    """The nodes that speculate if one of them has no waiting request; else ``snapshot`` unchanged."""
    speculating = tuple(v for v in snapshot.nodes if v.speculates)
    if not any(v.num_waiting == 0 for v in speculating):
        return snapshot
    if len(speculating) == len(snapshot.nodes):
        return snapshot
    changes = None if snapshot.changes is None else snapshot.changes.subgroup(SPECULATING)
    return ClusterSnapshot(snapshot.now_s, speculating, changes)
