"""The speculative-decoding flags (``zoo generate``, ``zoo bench spec``) and the config they make."""

from __future__ import annotations

import argparse

from engine.spec import SpecDecodeConfig


def add_spec_args(p: argparse.ArgumentParser, with_method: bool = True) -> None:
    if with_method:
        p.add_argument(
            "--speculative",
            default=None,
            choices=["ngram", "model", "remote"],
            help="propose drafts, verify them in one step",
        )
    p.add_argument("--draft-endpoint", default=None, help="remote: the draft agent (zoo draft-server) address")
    p.add_argument("--draft-timeout-s", type=float, default=0.5, help="remote: no drafts past this wait")
    p.add_argument("--draft-model", default=None, help="draft checkpoint (GGUF or HF dir); default: the target's own")
    p.add_argument("--draft-dtype", default="float32", choices=["float32", "bfloat16"], help="the draft's dtype")
    p.add_argument("--draft-num-threads", type=int, default=None, help="CPU threads of the draft model")
    p.add_argument("--num-spec-tokens", type=int, default=4, help="the most drafts per request per step (k)")
    p.add_argument("--no-adaptive-k", action="store_true", help="always ask for --num-spec-tokens drafts")
    p.add_argument(
        "--spec-max-batch",
        type=int,
        default=8,
        help="no speculation in steps with more running requests (0: never off)",
    )


def spec_config_from_args(args: argparse.Namespace, method: str | None = None) -> SpecDecodeConfig:
    return SpecDecodeConfig(
        method=method or args.speculative,
        num_spec_tokens=args.num_spec_tokens,
        adaptive=not args.no_adaptive_k,
        max_batch_size=args.spec_max_batch,
        draft_model=args.draft_model,
        draft_dtype=args.draft_dtype,
        draft_num_threads=args.draft_num_threads,
        draft_endpoint=args.draft_endpoint,
        draft_timeout_s=args.draft_timeout_s,
    )


def add_can_draft_args(p: argparse.ArgumentParser) -> None:
    """`zoo agent`: the node also drafts for verifiers the control plane pairs it with."""
    p.add_argument(
        "--can-draft",
        default=None,
        metavar="NAME[,NAME]",
        help="run a draft server for other nodes and advertise these draft model names (the checkpoint: "
        "--draft-model, default the served one, in --draft-dtype with --draft-num-threads)",
    )
    p.add_argument("--draft-bind", default="tcp://127.0.0.1:0", help="--can-draft: where the draft server binds")


def drafter_from_args(args: argparse.Namespace):
    """The DraftServer ``--can-draft`` asks for (its model loads when the agent starts), or None."""
    if not getattr(args, "can_draft", None):
        return None
    from functools import partial

    from agent.draft_server import DraftServer, load_draft_proposer

    names = tuple(n.strip() for n in args.can_draft.split(",") if n.strip())
    if not names:
        raise ValueError("--can-draft needs at least one draft model name")
    load = partial(
        load_draft_proposer,
        args.draft_model or args.model,
        args.draft_dtype,
        args.device,
        args.draft_num_threads,
        args.num_device_blocks,
        args.block_size,
    )
    return DraftServer(None, 0, args.draft_bind, draft_models=names, load=load)


def add_spec_pair_args(p: argparse.ArgumentParser) -> None:
    """`zoo controlplane`: pairing weak drafting nodes with strong verifiers (controlplane/spec_pairs.py)."""
    p.add_argument("--no-spec-pairs", action="store_true", help="never pair drafting nodes with verifiers")
    p.add_argument(
        "--spec-pair-min-gain",
        type=float,
        default=0.1,
        help="pair only when the predicted TPOT improves by this fraction (negative: pair anyway, to measure)",
    )
    p.add_argument("--spec-pair-idle-load", type=int, default=1, help="a drafter with at most this load is idle")
    p.add_argument("--spec-pair-busy-load", type=int, default=4, help="a drafter with this load is unpaired")


def spec_pair_config_from_args(args: argparse.Namespace):
    from controlplane.spec_pairs import SpecPairConfig

    return SpecPairConfig(
        enabled=not args.no_spec_pairs,
        min_gain=args.spec_pair_min_gain,
        idle_load=args.spec_pair_idle_load,
        busy_load=args.spec_pair_busy_load,
    )
