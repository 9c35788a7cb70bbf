"""Pairs an engine with a draft proposer from a SpecDecodeConfig: the one place a proposer is chosen by name.

ngram   engine/spec/ngram_proposer.py, no model
remote  transport/remote_drafter.py: a draft agent (agent/draft_server.py, ``zoo draft-server``)
model   backends/torch/draft_proposer.py: the draft checkpoint (``draft_model``; default the target's
        own) in ``draft_dtype`` with ``draft_num_threads``. Same checkpoint and dtype as a torch
        target: the draft shares the target's weights (its own KV cache). Vocabularies must match.
"""

from __future__ import annotations

from typing import Any

from engine.llm_engine import LLMEngine
from engine.spec import SpecDecodeConfig, Speculator
from engine.spec.ngram_proposer import NgramProposer


def attach_speculator(engine: LLMEngine, spec: SpecDecodeConfig, target_model: str | None = None) -> Speculator:
    """Build the proposer ``spec`` names, wrap it in a Speculator and set it on ``engine``.

    target_model: the target's checkpoint path (None = the default model), to share its weights when the
    draft is the same checkpoint. Raises ValueError (VocabMismatchError) for a draft that cannot pair.
    """
    if spec.method == "ngram":
        proposer: Any = NgramProposer(spec.ngram_min, spec.ngram_max)
    elif spec.method == "model":
        proposer = build_draft_proposer(engine, spec, target_model)
    elif spec.method == "remote":
        from transport.remote_drafter import RemoteProposer

        proposer = RemoteProposer(spec.draft_endpoint, spec.draft_timeout_s)
        try:
            proposer.pair(engine.tokenizer.vocab_size)  # the vocabulary is checked at pairing
        except BaseException:
            proposer.close()
            raise
    else:  # SpecDecodeConfig validated the name
        raise AssertionError(spec.method)
    speculator = Speculator(proposer, spec, engine.clock)
    engine.speculator = speculator
    return speculator


def build_draft_proposer(engine: LLMEngine, spec: SpecDecodeConfig, target_model: str | None = None) -> Any:
    from backends.checkpoint import load_checkpoint
    from backends.checkpoint.locate import default_model_path
    from backends.torch import TorchModelRunner
    from backends.torch.draft_proposer import DraftModelProposer, check_vocab

    target = engine.runner
    target_is_torch = isinstance(target, TorchModelRunner)
    same_checkpoint = spec.draft_model is None or _same_path(spec.draft_model, target_model)
    if target_is_torch and same_checkpoint and str(target.dtype).endswith(spec.draft_dtype):
        draft_runner = TorchModelRunner(target.model, dtype=spec.draft_dtype, device=target.device, progress=False)
        draft_tokenizer = engine.tokenizer
    else:
        path = spec.draft_model if spec.draft_model is not None else (target_model or default_model_path())
        checkpoint = load_checkpoint(path)
        check_vocab(
            engine.tokenizer, checkpoint.tokenizer, engine.tokenizer.vocab_size, checkpoint.tokenizer.vocab_size
        )
        device = target.device if target_is_torch else "cpu"
        draft_runner = TorchModelRunner(checkpoint, dtype=spec.draft_dtype, device=device, progress=False)
        draft_tokenizer = checkpoint.tokenizer
    target_vocab = target.config.vocab_size if hasattr(target, "config") else engine.tokenizer.vocab_size
    check_vocab(engine.tokenizer, draft_tokenizer, target_vocab, draft_runner.config.vocab_size)
    cache = engine.cache_config
    return DraftModelProposer(
        draft_runner,
        target_vocab,
        num_blocks=cache.num_device_blocks,
        block_size=cache.block_size,
        num_threads=spec.draft_num_threads,
        # only the torch runner verifies sampled drafts by rejection sampling; others get argmax drafts
        sample_drafts=target_is_torch,
    )


def _same_path(a: str, b: str | None) -> bool:
    from pathlib import Path

    if b is None:
        from backends.checkpoint.locate import default_model_path

        b = str(default_model_path())
    return Path(a).resolve() == Path(b).resolve()
