"""A draft model in this process: k cheap forward steps propose, the target verifies in one.

The draft is any Llama-family model with the target's vocabulary (checked at pairing; ``check_vocab``):
the target's own checkpoint in a cheaper form (bf16 weights, fewer threads) or another checkpoint
(``--draft-model PATH``, e.g. a 1B draft for an 8B target on a GPU). It keeps its own paged KV cache,
managed by the engine's own ``KVCacheManager`` (integers) over the draft runner's tensors::

    round r:   context T (target's known tokens)   draft cache holds seq.tokens[:num_computed]
      1. n = common prefix of the cached tokens and T; rollback_slots (rejected drafts' KV)
      2. one chunk T[n:] -> logits -> d_0  (usually 2 tokens: the last accepted draft and the bonus)
      3. k - 1 decode steps d_{i-1} -> d_i, batched over every request that wants drafts
      afterwards the cache holds T + d_0..d_{k-2}

Draws: a greedy request gets argmax drafts (deterministic: ``probs`` is None); a sampled one gets drafts
sampled from the draft's own processed distribution q (the request's temperature / top-k / top-p), and q
travels with them so the target can verify by rejection sampling (rejection_sampler.py). With
``sample_drafts=False`` every draft is argmax (for a target runner without rejection sampling; still
exact, with lower acceptance under sampling).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from backends.torch.runner import TorchModelRunner
from engine.batch import ScheduledRequest, SchedulerOutput
from engine.kv import KVCacheManager
from engine.model_runner import KVCacheSpec
from engine.spec.proposer import Draft, DraftRequest

# ids whose text must agree between draft and target tokenizers, besides the sizes and EOS
_VOCAB_PROBE_IDS = (*range(0, 512), *range(1000, 50_000, 997))


class VocabMismatchError(ValueError):
    """The draft model cannot propose for the target: their vocabularies differ."""


def check_vocab(target_tokenizer: Any, draft_tokenizer: Any, target_vocab: int, draft_vocab: int) -> None:
    """Refuse a pair whose token ids do not mean the same text (sizes, EOS, a sample of ids)."""
    if target_vocab != draft_vocab:
        raise VocabMismatchError(
            f"draft model's vocabulary has {draft_vocab} tokens, the target's {target_vocab}: "
            "a draft must share the target's tokenizer"
        )
    if target_tokenizer is None or draft_tokenizer is None or target_tokenizer is draft_tokenizer:
        return
    if getattr(target_tokenizer, "eos_token_id", None) != getattr(draft_tokenizer, "eos_token_id", None):
        raise VocabMismatchError(
            f"draft tokenizer's EOS id {draft_tokenizer.eos_token_id} != the target's {target_tokenizer.eos_token_id}"
        )
    ids = [i for i in _VOCAB_PROBE_IDS if i < min(target_vocab, target_tokenizer.vocab_size)]
    for i in ids:
        if target_tokenizer.decode([i], skip_special_tokens=False) != draft_tokenizer.decode(
            [i], skip_special_tokens=False
        ):
            raise VocabMismatchError(f"draft and target tokenizers disagree on token id {i}")


@dataclass(slots=True)
class _DraftSeq:
    """A request as the draft's KV manager sees it (the attributes KVCacheManager reads)."""

    req_id: str
    tokens: list[int] = field(default_factory=list)  # the context the cache was built for (+ last drafts)
    num_computed_tokens: int = 0
    lora_id: int | None = None

    @property
    def all_token_ids(self) -> list[int]:
        return self.tokens

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


class DraftModelProposer:
    """Proposes with ``runner`` (a TorchModelRunner on the draft model; its KV cache is made here)."""

    name = "model"

    def __init__(
        self,
        runner: TorchModelRunner,
        target_vocab_size: int,
        *,
        num_blocks: int = 512,
        block_size: int = 16,
        num_threads: int | None = None,
        sample_drafts: bool = True,
        seed: int = 0,
    ) -> None:
        check_vocab(None, None, target_vocab_size, runner.config.vocab_size)
        self.runner = runner
        self.num_threads = num_threads
        self.sample_drafts = sample_drafts
        self.block_size = block_size
        runner.initialize_kv_cache(KVCacheSpec(num_device_blocks=num_blocks, num_host_blocks=0, block_size=block_size))
        self.kv = KVCacheManager(block_size, num_blocks, 0, enable_prefix_caching=False)
        self._seqs: dict[str, _DraftSeq] = {}
        self._rng = torch.Generator(device=runner.device)
        self._rng.manual_seed(seed)
        self._step_id = 0

    def propose(self, requests: list[DraftRequest]) -> dict[str, Draft]:
        threads = torch.get_num_threads()
        if self.num_threads is not None and threads != self.num_threads:
            torch.set_num_threads(self.num_threads)
        try:
            with torch.inference_mode():
                return self._propose(requests)
        finally:
            if torch.get_num_threads() != threads:
                torch.set_num_threads(threads)

    def drop(self, req_ids: Iterable[str]) -> None:
        for req_id in req_ids:
            seq = self._seqs.pop(req_id, None)
            if seq is not None:
                self.kv.free(seq)

    # -- one round -------------------------------------------------------------------------------

    def _propose(self, requests: list[DraftRequest]) -> dict[str, Draft]:
        max_len = self.runner.max_model_len
        live: list[tuple[DraftRequest, _DraftSeq]] = []
        first: list[ScheduledRequest] = []
        for r in requests:
            tokens = list(r.token_ids)
            if len(tokens) + r.num_spec_tokens > max_len:
                continue
            seq = self._sync(r.req_id, tokens)
            num_new = len(tokens) - seq.num_computed_tokens
            if self.kv.try_allocate_slots(seq, num_new + r.num_spec_tokens - 1) is None:
                self.drop([r.req_id])  # no room in the draft's cache: this request decodes plainly
                continue
            live.append((r, seq))
            first.append(self._scheduled(r, seq, tokens[seq.num_computed_tokens :], seq.num_computed_tokens))
        if not live:
            return {}
        drafts: dict[str, list[int]] = {r.req_id: [] for r, _ in live}
        probs: dict[str, list[torch.Tensor]] = {r.req_id: [] for r, _ in live}
        batch = first
        for step in range(max(r.num_spec_tokens for r, _ in live)):
            logits = self._logits(batch)
            next_batch = []
            for scheduled in batch:
                req_id = scheduled.req_id
                token_id, q = self._draw(logits[req_id][-1:], scheduled)
                drafts[req_id].append(token_id)
                if q is not None:
                    probs[req_id].append(q)
            for r, seq in live:
                if len(drafts[r.req_id]) < r.num_spec_tokens and step + 1 < r.num_spec_tokens:
                    pos = len(r.token_ids) + step
                    next_batch.append(self._scheduled(r, seq, [drafts[r.req_id][-1]], pos))
            if not next_batch:
                break
            batch = next_batch
        out: dict[str, Draft] = {}
        for r, seq in live:
            ids = drafts[r.req_id]
            seq.tokens = list(r.token_ids) + ids
            seq.num_computed_tokens = len(r.token_ids) + len(ids) - 1  # the last draft has no KV yet
            rows = probs[r.req_id]
            out[r.req_id] = Draft(ids, torch.cat(rows) if rows and len(rows) == len(ids) else None)
        return out

    def _sync(self, req_id: str, tokens: list[int]) -> _DraftSeq:
        """The request's draft state, its cache cut back to the prefix it shares with ``tokens``."""
        seq = self._seqs.get(req_id)
        if seq is None:
            seq = self._seqs[req_id] = _DraftSeq(req_id)
        n = 0
        limit = min(seq.num_computed_tokens, len(tokens) - 1)  # at least one token to compute
        cached = seq.tokens
        while n < limit and cached[n] == tokens[n]:
            n += 1
        seq.tokens = tokens
        seq.num_computed_tokens = n
        self.kv.rollback_slots(seq)
        return seq

    def _scheduled(self, r: DraftRequest, seq: _DraftSeq, token_ids: list[int], start_pos: int) -> ScheduledRequest:
        return ScheduledRequest(
            req_id=r.req_id,
            token_ids=token_ids,
            start_pos=start_pos,
            block_ids=self.kv.get_block_ids(seq.req_id),
            sample=True,
            sampling_params=r.sampling_params,
        )

    def _logits(self, batch: list[ScheduledRequest]) -> dict[str, torch.Tensor]:
        self._step_id += 1
        return self.runner.compute_logits(SchedulerOutput(step_id=self._step_id, requests=batch))

    def _draw(self, logits: torch.Tensor, scheduled: ScheduledRequest) -> tuple[int, torch.Tensor | None]:
        """One draft token from logits [1, V], and its proposal distribution [1, V] when sampled."""
        params = scheduled.sampling_params
        if params.greedy or not self.sample_drafts:
            return int(logits.argmax(dim=-1)), None
        q = self.runner.sampler.target_probs(logits, params)  # [1, V]
        token_id = int(torch.multinomial(q, 1, generator=self._rng))
        return token_id, q
