"""What the scheduler hands a model runner for one step, and what the runner hands back.

Sans-IO plain data: no torch, no numpy. The same structures drive the torch runner, the JAX
runner and the simulated GPU runner.

Life of one step::

    scheduler.schedule() ──► SchedulerOutput ──► runner.execute() ──► RunnerOutput
                                                                        │
    scheduler.update_from_output(SchedulerOutput, RunnerOutput) ◄───────┘

The runner applies, in this order, before the forward pass:
    1. ``blocks_to_swap_out``  device block -> host block   (frees device blocks)
    2. ``blocks_to_swap_in``   host block   -> device block  (may reuse blocks freed in 1.)
    3. ``blocks_to_copy``      device block -> device block  (copy-on-write of a shared block)

The REMOTE tier's moves (engine/kv/remote_tier.py) are not the runner's: the engine's remote I/O hook
(engine/remote_kv.py) applies them before the runner sees the step — it reads ``remote_swap_out``'s device
blocks (freed this step, so nothing may write them first) and writes ``remote_swap_in``'s (the scheduler
never pairs them with a host swap-out in one step, whose device blocks the runner still has to read), and
passes ``remote_fetch`` on to the network.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.sampling_params import SamplingParams
from engine.structured_output import Grammar


@dataclass(slots=True)
class LogitsInputs:
    """What a sampler needs beyond a request's SamplingParams to process its logits (backends/logits_adjust.py).

    history: the request's tokens (prompt, then output) where a penalty reads them, else None. The request's own
        list, not a copy: the first ``start_pos + len(token_ids)`` entries are the tokens known at this step.
    banned_token_ids: ids its next token may not be (while fewer than ``min_tokens`` are out: EOS, unless
        ``ignore_eos``, and ``stop_token_ids``; a bad word's last token where the output ends with the rest of it).
    num_resumed_tokens: the prompt's last tokens that are the request's output from before it resumed on this node
        (a failover, a migration, a prefill/decode hand-off): the penalties count them as output.
    grammar: its structured-output constraint (engine/structured_output.Grammar), or None; the sampler advances it
        by the output tokens it has not consumed and bans what it does not allow next.
    forced_token_id: the one token its next may be (its thinking budget forcing the thinking's end,
        engine/thinking_budget.py), or None.
    """

    history: list[int] | None
    banned_token_ids: tuple[int, ...] = ()
    num_resumed_tokens: int = 0
    grammar: Grammar | None = None
    forced_token_id: int | None = None


@dataclass(slots=True)
class ScheduledRequest:
    """One request's share of a step.

    Counter model: a request has ``num_tokens`` known tokens (prompt + generated) of which
    ``start_pos`` (= num_computed_tokens before this step) already have KV in the cache. This step
    computes ``token_ids`` at positions ``[start_pos, start_pos + len(token_ids))`` — a prefill
    chunk, a whole prompt, or one decode token; there is no separate prefill phase.

    block_ids: the request's device block table (logical block i -> physical block id), long
        enough to hold ``start_pos + len(token_ids) + len(spec_token_ids)`` tokens. Token at
        position p lives in block ``block_ids[p // block_size]``, slot ``p % block_size``.
    sample: True when this chunk reaches the request's last known token, so a next token must be
        sampled from the last position's logits. False for a non-final prefill chunk.
    spec_token_ids: draft tokens placed after ``token_ids`` for verification (speculative
        decoding); the runner returns up to ``len(spec_token_ids) + 1`` sampled tokens.
    spec_draft_probs: None for deterministic drafts (accepted while they equal the target's sample), or
        the proposal distribution [>= len(spec_token_ids), V] they were sampled from (an opaque backend
        array; the runner verifies them by rejection sampling, engine/spec/proposer.py).
    num_output_tokens: tokens generated so far (seeded samplers and penalties may use it).
    logits_inputs: what its sampler needs beyond its params to process the logits (LogitsInputs), or None.
    lora_id: adapter to apply; None for the base model.
    prompt_targets: the prompt tokens this chunk's rows predict, from its first row on (row p predicts p + 1), when
        its params ask for ``prompt_logprobs`` (engine/prompt_logprobs.py); None otherwise.
    """

    req_id: str
    token_ids: list[int]
    start_pos: int
    block_ids: list[int]
    sample: bool
    sampling_params: SamplingParams
    num_output_tokens: int = 0
    spec_token_ids: list[int] = field(default_factory=list)
    lora_id: int | None = None
    spec_draft_probs: object | None = None
    logits_inputs: LogitsInputs | None = None
    prompt_targets: list[int] | None = None

    @property
    def num_scheduled_tokens(self) -> int:
        return len(self.token_ids) + len(self.spec_token_ids)

    @property
    def is_decode(self) -> bool:
        """One new token on top of a cached context (the batched decode fast path; a prompt token to score, or one
        whose embedding is asked, is not)."""
        return (
            len(self.token_ids) == 1
            and not self.spec_token_ids
            and self.start_pos > 0
            and not self.prompt_targets
            and not self.embed
        )

    @property
    def embed(self) -> bool:
        """This chunk reaches the last prompt token of a request that asks for its embedding (engine/embeddings.py):
        the runner returns that row's vector, and never runs it as a plain decode row."""
        return self.sample and not self.num_output_tokens and self.sampling_params.embed


@dataclass(slots=True, frozen=True)
class RemoteMove:
    """A request's KV between the device and the REMOTE tier: ``block_ids`` are device blocks, in the order of
    its block table (out: read them now; in: write the fetched KV into them now)."""

    req_id: str
    block_ids: list[int]
    num_tokens: int = 0  # computed tokens the blocks hold


@dataclass(slots=True, frozen=True)
class RemoteFetch:
    """Ask peer ``peer_id`` for the KV it holds for ``req_id`` under ``handle`` (answered asynchronously)."""

    req_id: str
    peer_id: str
    handle: str


@dataclass(slots=True)
class SchedulerOutput:
    """Everything one step does. Block pairs are (source, destination) physical block ids."""

    step_id: int
    requests: list[ScheduledRequest] = field(default_factory=list)
    blocks_to_swap_out: list[tuple[int, int]] = field(default_factory=list)  # (device, host)
    blocks_to_swap_in: list[tuple[int, int]] = field(default_factory=list)  # (host, device)
    blocks_to_copy: list[tuple[int, int]] = field(default_factory=list)  # (device, device)
    finished_req_ids: list[str] = field(default_factory=list)  # runner may drop their state
    remote_swap_out: list[RemoteMove] = field(default_factory=list)  # device -> peer (engine/remote_kv.py)
    remote_swap_in: list[RemoteMove] = field(default_factory=list)  # fetched KV -> device
    remote_fetch: list[RemoteFetch] = field(default_factory=list)  # peer -> this node's memory

    @property
    def num_batched_tokens(self) -> int:
        return sum(r.num_scheduled_tokens for r in self.requests)

    @property
    def is_empty(self) -> bool:
        return not (self.requests or self.blocks_to_swap_out or self.blocks_to_swap_in or self.blocks_to_copy)


@dataclass(slots=True)
class TokenLogprob:
    """Log-probability of a sampled (or, for prompt logprobs, a prompt) token and, optionally, the top alternatives.
    A prompt's: ``rank`` is the token's rank in its distribution (1: the most likely); position 0's logprob is None
    (nothing precedes it: engine/prompt_logprobs.py)."""

    token_id: int
    logprob: float | None
    top: list[tuple[int, float]] = field(default_factory=list)
    rank: int | None = None


@dataclass(slots=True)
class RunnerOutput:
    """Result of one step.

    sampled_token_ids: for each request scheduled with ``sample=True``, the sampled tokens
        (one for a plain step; for a verification step the accepted drafts plus one bonus token).
    logprobs: per request, one entry per sampled token, when its params asked for logprobs.
    prompt_logprobs: per request whose chunk scored prompt tokens (its params' ``prompt_logprobs``): the first
        position scored and one entry per scored position (backends/prompt_rows.py).
    embeddings: per request whose chunk has ``embed``: its prompt's embedding (engine/embeddings.py).
    step_time_s: wall time of the step as measured by the runner (a simulated runner reports
        its predicted time).
    """

    sampled_token_ids: dict[str, list[int]] = field(default_factory=dict)
    logprobs: dict[str, list[TokenLogprob]] = field(default_factory=dict)
    prompt_logprobs: dict[str, tuple[int, list[TokenLogprob]]] = field(default_factory=dict)
    embeddings: dict[str, list[float]] = field(default_factory=dict)
    step_time_s: float = 0.0
