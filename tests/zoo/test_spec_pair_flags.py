"""The fleet-pair flags: `zoo controlplane --no-spec-pairs / --spec-pair-*` reach SpecPairConfig, and
`zoo agent --can-draft NAME[,NAME]` builds a lazy DraftServer advertising those names."""

from __future__ import annotations

import pytest

from zoo.cli import build_parser
from zoo.serve import controlplane_from_args
from zoo.spec_args import drafter_from_args


def test_controlplane_spec_pair_flags():
    args = build_parser().parse_args(["controlplane", "--fake-tokenizer"])
    assert controlplane_from_args(args).spec_pairs.policy.config.enabled
    args = build_parser().parse_args(
        ["controlplane", "--fake-tokenizer", "--no-spec-pairs", "--spec-pair-min-gain", "-1", "--spec-pair-busy-load",
         "6"]
    )  # fmt: skip
    config = controlplane_from_args(args).spec_pairs.policy.config
    assert not config.enabled and config.min_gain == -1.0 and config.busy_load == 6
    bad = build_parser().parse_args(["controlplane", "--fake-tokenizer", "--spec-pair-idle-load", "9"])
    with pytest.raises(ValueError, match="idle_load"):
        controlplane_from_args(bad)


def test_agent_can_draft_flag():
    args = build_parser().parse_args(["agent", "--can-draft", "smol-a, smol-b", "--draft-bind", "tcp://127.0.0.1:0"])
    drafter = drafter_from_args(args)
    assert drafter.draft_models == ("smol-a", "smol-b") and drafter.proposer is None  # loads when the agent starts
    assert drafter_from_args(build_parser().parse_args(["agent"])) is None
    with pytest.raises(ValueError, match="at least one"):
        drafter_from_args(build_parser().parse_args(["agent", "--can-draft", ","]))
