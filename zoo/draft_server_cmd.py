"""`zoo draft-server`: a draft agent process (agent/draft_server.py) that verifiers pair with through
``--speculative remote --draft-endpoint ADDR``."""

from __future__ import annotations

import argparse

import anyio


def add_draft_server_args(p: argparse.ArgumentParser) -> None:
    from zoo.log_args import add_log_args

    add_log_args(p)
    p.add_argument("--bind", default="tcp://127.0.0.1:5560", help="the address verifiers connect to")
    p.add_argument("--model", default=None, help="the draft checkpoint (default: SmolLM2-135M-Instruct)")
    p.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--num-threads", type=int, default=None, help="CPU threads of the draft model")
    p.add_argument("--num-device-blocks", type=int, default=1024, help="KV blocks of the draft's cache")
    p.add_argument("--block-size", type=int, default=16)


def run_draft_server(args: argparse.Namespace) -> int:
    import torch

    from agent.draft_server import DraftServer
    from backends.checkpoint import load_checkpoint
    from backends.torch import TorchModelRunner
    from backends.torch.draft_proposer import DraftModelProposer
    from zoo.log_args import configure_logging_from_args

    configure_logging_from_args(args, "draft-server")
    if args.num_threads is not None:
        torch.set_num_threads(args.num_threads)
    checkpoint = load_checkpoint(args.model)
    runner = TorchModelRunner(checkpoint, dtype=args.dtype, device=args.device, num_threads=args.num_threads)
    vocab_size = checkpoint.tokenizer.vocab_size
    proposer = DraftModelProposer(
        runner,
        runner.config.vocab_size,
        num_blocks=args.num_device_blocks,
        block_size=args.block_size,
        num_threads=args.num_threads,
        sample_drafts=False,
    )
    server = DraftServer(proposer, vocab_size, args.bind)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            endpoint = await tg.start(server.run)
            print(f"draft server: {checkpoint.config.name} at {endpoint}", flush=True)

    try:
        anyio.run(serve)
    except KeyboardInterrupt:
        return 130
    return 0
