"""A prompt's embedding: what ``POST /v1/embeddings`` returns, computed by the same forward pass as its first token.

The rule is vLLM's for a decoder-only model served as an embedding model (vllm/model_executor/models/adapters.py
``as_embedding_model``, the pooler vllm/model_executor/layers/pooler.py, v0.11: LAST pooling, ``normalize`` on by
default): the final hidden state (after the model's last norm) at the prompt's last token, L2-normalised, in
float32. A request asks with ``SamplingParams.embed``; its chunk that reaches the last prompt token is never run as
a plain decode row (``ScheduledRequest.embed``), so the runner's prefill path computes that row and returns its
vector (``RunnerOutput.embeddings``); the engine puts it on the request's first output (``RequestOutput.embedding``),
the agent on its TokenChunk. A tensor-parallel node embeds as its rank 0 (the final norm and the residual stream are
whole there). A runner that cannot (simulated, fake) has no ``embeds`` and refuses the request with an error naming
``embed``.

The request samples one token as any other (the gateway asks for ``max_tokens`` 1), so an embedding request is
scheduled, batched, preempted, cached and routed like a one-token completion: the prefix cache serves its prompt
but its last token, which is always computed.

Two embeddings are compared by their cosine similarity (``cosine``): vLLM's score for an embedding model (a
bi-encoder), which the gateway's score and rerank APIs and the ZeroMQ client's ``score`` and ``rerank`` return; which
texts are paired is vLLM's rule too (``score_pairs``).
"""

from __future__ import annotations

import math

from engine.sampling_params import SamplingParams


def check_runner(runner: object, params: SamplingParams) -> None:
    """ValueError naming ``embed`` when an embedding is asked of a runner that cannot compute one."""
    if params.embed and not getattr(runner, "embeds", False):
        raise ValueError("embed: this node's runner does not compute embeddings")


def score_pairs(num_first: int, num_second: int) -> list[tuple[int, int]]:
    """vLLM's pairing of two sides' texts, as indices into the first side followed by the second: one first text
    against each second one (1:N, 1:1), or the two sides pairwise (N:N), in the second side's order. ValueError
    when a side is empty or the sides pair neither way (vllm/entrypoints/pooling/score/utils.py)."""
    if num_first < 1 or num_second < 1 or (num_first > 1 and num_first != num_second):
        raise ValueError(f"score pairs 1:1, 1:N or N:N texts; got {num_first} against {num_second}")
    return [(0 if num_first == 1 else j, num_first + j) for j in range(num_second)]


def cosine(a: list[float], b: list[float]) -> float:
    """The cosine similarity of two vectors, in [-1, 1] (0 when either is all zeros, or their sizes differ). Each is
    scaled by its largest magnitude first, so tiny or huge values neither underflow nor overflow."""
    scale_a, scale_b = max(map(abs, a), default=0.0), max(map(abs, b), default=0.0)
    if len(a) != len(b) or not scale_a or not scale_b:
        return 0.0
    a, b = [x / scale_a for x in a], [y / scale_b for y in b]
    value = math.fsum(x * y for x, y in zip(a, b)) / (math.hypot(*a) * math.hypot(*b))
    return max(-1.0, min(1.0, value))
